"""``make jupyter``: open the course in JupyterLab, with nbgrader's extension pointed at it.

nbgrader 0.9.6 ships a JupyterLab extension (``@jupyter/nbgrader``) with server extensions
for students (the notebook toolbar's **Validate** button, the assignment list) and for
instructors (**formgrader**). None of them is told where the course is: each reads
``nbgrader_config.py`` from the folder the server was started in (and from Jupyter's config
path). So the course root holds a small ``nbgrader_config.py`` that loads
``autograder/nbgrader_config.py``, and this module starts JupyterLab *in* the course root:

- the server's root folder and working folder are the course root, so formgrader's
  ``CourseDirectory.root`` is inside the server root (otherwise formgrader refuses with "The
  course directory root is not a subdirectory of the notebook server root") and finds
  ``solutions/`` as source, ``exercises/`` as release and ``gradebook.db``;
- the course kernel (``raydata-course``) is the default for new notebooks; the course's
  notebooks name it in their metadata;
- the virtual environment's ``bin`` comes first on ``PATH``, because nbgrader shells out to
  ``alembic`` when it creates a gradebook.

It also defines what Validate needs beyond the grader's configuration
(:data:`VALIDATE_KERNEL_ARGUMENTS`), and :class:`LabServer`, which runs a JupyterLab server
as a child process and stops it with everything it started (the tests use it).

Run it with ``python -m raydata_course.jupyter [--port N] [--no-browser] [--grading DIR]
[jupyter options]`` (``make jupyter ARGS="..."``, ``make jupyter GRADING=build/grading``).

Examples:
    >>> cmd = lab_command("/course", port=8890, token="t0k", open_browser=False)
    >>> cmd[1:3]
    ['-m', 'jupyterlab']
    >>> "--ServerApp.root_dir=/course" in cmd and "--IdentityProvider.token=t0k" in cmd
    True
    >>> "--MappingKernelManager.default_kernel_name=raydata-course" in cmd
    True
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Sequence

from raydata_course.grading import KERNEL_NAME

__all__ = [
    "GRADING_DIR_ENV",
    "VALIDATE_KERNEL_ARGUMENTS",
    "LabServer",
    "LabServerError",
    "check_course_root",
    "check_grading_dir",
    "free_port",
    "lab_command",
    "lab_environment",
    "main",
]

#: Kernel arguments for the kernels that nbgrader's Validate starts (set as
#: ``c.Validator.Execute.extra_arguments`` in the course root's ``nbgrader_config.py``).
#:
#: nbgrader's ``Validator`` marks a test cell as failed when it writes *anything* to stderr
#: (``nbgrader/utils.py``, ``determine_grade``), and Ray logs every Dataset execution there
#: ("Starting execution of Dataset ..."), so a correct answer would fail Validate. The grader
#: fixes this with the ``StderrToStdout`` preprocessor, but ``Validator.preprocessors`` is not
#: configurable in 0.9.6. Instead, the validating kernel sends Python-level stderr to stdout
#: from its first line (Ray's log handlers and its worker-log printer pick the stream up
#: when ``ray`` is imported or when they print), and stops copying file-descriptor-level
#: output (Ray's C++ core) into the notebook. A test cell then fails Validate exactly when
#: it raises, as in grading. ``--HistoryManager.hist_file=:memory:`` is nbclient's default,
#: kept because setting ``extra_arguments`` replaces it.
VALIDATE_KERNEL_ARGUMENTS = [
    "--HistoryManager.hist_file=:memory:",
    "--IPKernelApp.capture_fd_output=False",
    "--IPKernelApp.exec_lines=__import__('sys').stderr = __import__('sys').stdout",
]

#: Environment variable read by the course root's ``nbgrader_config.py``: when set, nbgrader
#: (formgrader above all) works in this folder instead of the course root, e.g. the grading
#: folder that ``make grade`` fills (``build/grading``). ``make jupyter GRADING=build/grading``.
GRADING_DIR_ENV = "RAYDATA_COURSE_GRADING_DIR"

#: Files and folders that make a folder a course root JupyterLab can serve.
_COURSE_MARKERS = ("nbgrader_config.py", "autograder/nbgrader_config.py", "solutions", "exercises")


class LabServerError(RuntimeError):
    """The JupyterLab server did not start, or did not answer, in time."""


def check_course_root(root: str | os.PathLike) -> Path:
    """Return ``root`` resolved, after checking that it is a course root.

    Raises:
        FileNotFoundError: naming what is missing (``nbgrader_config.py``,
            ``autograder/nbgrader_config.py``, ``solutions/`` or ``exercises/``).
    """
    folder = Path(root).resolve()
    missing = [name for name in _COURSE_MARKERS if not (folder / name).exists()]
    if missing:
        raise FileNotFoundError(
            f"{folder} is not a course root: it lacks {', '.join(missing)}. Start JupyterLab from "
            "the repository root (make jupyter)."
        )
    return folder


def check_grading_dir(folder: str | os.PathLike, root: str | os.PathLike) -> Path:
    """Return ``folder`` resolved, after checking formgrader can show it.

    Args:
        folder: an nbgrader course folder with a gradebook, e.g. ``build/grading`` after
            ``make grade`` (relative paths are taken from ``root``).
        root: the course root, which JupyterLab serves.

    Raises:
        FileNotFoundError: if ``folder`` has no ``gradebook.db``.
        ValueError: if ``folder`` is not inside ``root`` (formgrader only works on a course
            inside the server's root folder).
    """
    root = Path(root).resolve()
    path = (root / folder).resolve()
    if not path.is_relative_to(root):
        raise ValueError(
            f"the grading folder {path} must be inside the course root {root}, which JupyterLab serves."
        )
    if not (path / "gradebook.db").is_file():
        raise FileNotFoundError(
            f"{path} has no gradebook.db: grade first (make grade SUBMISSIONS=... OUT={folder})."
        )
    return path


def lab_command(
    root: str | os.PathLike,
    *,
    port: int | None = None,
    token: str | None = None,
    open_browser: bool = True,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The command line that starts JupyterLab on the course at ``root``.

    Args:
        root: the course root; it becomes the server's root folder. Run the command with
            ``root`` as working folder too (nbgrader reads ``nbgrader_config.py`` there).
        port: listen on this port only (no retries on other ports); default: Jupyter's
            choice (8888 or the next free one).
        token: the login token; default: Jupyter makes one and prints the URL.
        open_browser: open the user's web browser.
        extra_args: more ``jupyter lab`` options, appended last (they win).

    Returns:
        The argument list, starting with this interpreter (``sys.executable -m jupyterlab``).
    """
    cmd = [
        sys.executable, "-m", "jupyterlab",
        f"--ServerApp.root_dir={Path(root)}",
        f"--MappingKernelManager.default_kernel_name={KERNEL_NAME}",
    ]
    if port is not None:
        cmd += ["--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0"]
    if token is not None:
        cmd.append(f"--IdentityProvider.token={token}")
    if not open_browser:
        cmd.append("--no-browser")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")  # containers and CI runners are often root
    cmd.extend(extra_args)
    return cmd


def lab_environment(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for the server: ``base`` (default ``os.environ``) with this
    interpreter's ``bin`` folder first on ``PATH`` (nbgrader runs ``alembic`` from there)."""
    env = dict(os.environ if base is None else base)
    bin_dir = str(Path(sys.executable).parent)
    rest = [p for p in env.get("PATH", "").split(os.pathsep) if p and p != bin_dir]
    env["PATH"] = os.pathsep.join([bin_dir, *rest])
    return env


def _check_kernel() -> None:
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        KernelSpecManager().get_kernel_spec(KERNEL_NAME)
    except NoSuchKernel:
        raise SystemExit(
            f"The Jupyter kernel {KERNEL_NAME!r} is not installed. Run `make setup`, or "
            f"`python -m ipykernel install --sys-prefix --name {KERNEL_NAME}`."
        ) from None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now (the OS's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LabServer:
    """A JupyterLab server on the course at ``root``, run as a child process on 127.0.0.1.

    The server's output goes to ``log_path``. Use it as a context manager, or call
    :meth:`start` and :meth:`stop`::

        with LabServer(course, log_path=tmp / "server.log") as server:
            server.url("lab/tree/exercises/data01/data01.ipynb")  # with ?token=...

    Args:
        root: the course root (see :func:`check_course_root`).
        log_path: file that receives the server's stdout and stderr.
        env: the server's environment (default :func:`lab_environment`); kernels inherit it.
        extra_args: more ``jupyter lab`` options.
        start_timeout_s: how long :meth:`start` waits for the server to answer.

    Attributes:
        port: the port it listens on.
        token: its login token.
        process: the ``subprocess.Popen`` of the server, once started.
    """

    def __init__(
        self,
        root: str | os.PathLike,
        *,
        log_path: str | os.PathLike,
        env: dict[str, str] | None = None,
        extra_args: Sequence[str] = (),
        start_timeout_s: float = 90.0,
    ) -> None:
        if start_timeout_s <= 0:
            raise ValueError(f"start_timeout_s must be positive, got {start_timeout_s!r}.")
        self.root = check_course_root(root)
        self.log_path = Path(log_path)
        self.env = lab_environment() if env is None else env
        self.extra_args = list(extra_args)
        self.start_timeout_s = start_timeout_s
        self.port = free_port()
        self.token = secrets.token_hex(16)
        self.process: subprocess.Popen | None = None
        self._log_file = None
        self._seen_pids: set[int] = set()

    # ------------------------------------------------------------------ addresses
    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>/``."""
        return f"http://127.0.0.1:{self.port}/"

    def url(self, path: str = "lab") -> str:
        """The address of ``path`` on the server, with the token as a query parameter."""
        sep = "&" if "?" in path else "?"
        return f"{self.base_url}{path.lstrip('/')}{sep}token={self.token}"

    # ------------------------------------------------------------------ REST
    def api(self, method: str, path: str, body: object | None = None, timeout_s: float = 30.0):
        """Call the server's REST API (``/api/...``) with the token; return the decoded JSON.

        Raises:
            urllib.error.HTTPError: on a 4xx/5xx answer.
            urllib.error.URLError: if the server does not answer.
        """
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.base_url + path.lstrip("/"), data=data, method=method,
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            raw = response.read()
        return json.loads(raw) if raw else None

    def log_tail(self, num_lines: int = 40) -> str:
        """The last ``num_lines`` lines of the server's log (empty if there is none)."""
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return ""
        return "\n".join(lines[-num_lines:])

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> LabServer:
        """Start the server and wait until ``/api/status`` answers.

        Raises:
            LabServerError: if the process exits or does not answer within
                ``start_timeout_s``; the message ends with the last lines of its log.
        """
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = open(self.log_path, "ab")
        cmd = lab_command(self.root, port=self.port, token=self.token, open_browser=False,
                          extra_args=self.extra_args)
        self.process = subprocess.Popen(
            cmd, cwd=self.root, env=self.env, stdout=self._log_file, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )
        deadline = time.monotonic() + self.start_timeout_s
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise LabServerError(
                    f"The JupyterLab server exited with status {self.process.returncode} before it "
                    f"answered on port {self.port}. Last lines of {self.log_path}:\n{self.log_tail()}"
                )
            try:
                self.api("GET", "api/status", timeout_s=5)
                return self
            except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
                last_error = exc
                time.sleep(0.5)
        self.stop()
        raise LabServerError(
            f"The JupyterLab server did not answer on {self.base_url} within "
            f"{self.start_timeout_s:.0f} s (last error: {last_error}). Last lines of "
            f"{self.log_path}:\n{self.log_tail()}"
        )

    def descendants(self) -> list[int]:
        """Pids of every live process below the server (kernels, Ray's processes, ...).

        Each call also remembers them, so :meth:`stop` can check that they ended.
        """
        import psutil

        if self.process is None:
            return []
        try:
            pids = [p.pid for p in psutil.Process(self.process.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            pids = []
        self._seen_pids.update(pids)
        return pids

    def stop(self, timeout_s: float = 60.0) -> list[str]:
        """Shut down every kernel and the server, then make sure nothing it started lives on.

        Kernels are shut down through the API first (so that their ``atexit`` handlers stop
        Ray), then the server through ``/api/shutdown``; a server that is still running after
        half of ``timeout_s`` gets SIGTERM, then SIGKILL. Processes that were below the server
        and outlive it are killed.

        Returns:
            One line per process that had to be killed after the shutdown (empty when the
            shutdown was clean).
        """
        import psutil

        if self.process is None:
            return []
        self.descendants()
        deadline = time.monotonic() + timeout_s
        if self.process.poll() is None:
            try:
                for kernel in self.api("GET", "api/kernels", timeout_s=10) or []:
                    self.api("DELETE", f"api/kernels/{kernel['id']}", timeout_s=timeout_s / 2)
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            self.descendants()
            try:
                self.api("POST", "api/shutdown", timeout_s=10)
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            try:
                self.process.wait(timeout=max(1.0, deadline - time.monotonic() - timeout_s / 2))
            except subprocess.TimeoutExpired:
                for sig in (signal.SIGTERM, signal.SIGKILL):
                    try:
                        os.killpg(self.process.pid, sig)
                    except ProcessLookupError:
                        break
                    try:
                        self.process.wait(timeout=10)
                        break
                    except subprocess.TimeoutExpired:
                        continue
        killed = []
        survivors = []
        for pid in sorted(self._seen_pids):
            try:
                proc = psutil.Process(pid)
                if proc.status() != psutil.STATUS_ZOMBIE:
                    survivors.append(proc)
            except psutil.NoSuchProcess:
                continue
        # Ray's processes end a few seconds after the kernel that started them.
        _, alive = psutil.wait_procs(survivors, timeout=max(1.0, deadline - time.monotonic()))
        for proc in alive:
            try:
                line = f"pid {proc.pid}: {' '.join(proc.cmdline())[:160]}"
                proc.kill()
                killed.append(line)
            except psutil.NoSuchProcess:
                continue
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        return killed

    def __enter__(self) -> LabServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    """``python -m raydata_course.jupyter``: run JupyterLab on the course until interrupted.

    Options ``--port N``, ``--no-browser``, ``--root DIR`` and ``--grading DIR`` (formgrader
    shows that grading folder, see :data:`GRADING_DIR_ENV`); anything else is passed to
    ``jupyter lab``.

    Raises:
        SystemExit: if the course root, the course kernel or the grading folder is missing.
    """
    parser = argparse.ArgumentParser(prog="python -m raydata_course.jupyter",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=None, help="listen on this port only")
    parser.add_argument("--no-browser", action="store_true", help="do not open a web browser")
    parser.add_argument("--root", default=None, help="course root (default: this checkout)")
    parser.add_argument("--grading", default=None, metavar="DIR",
                        help="show this grading folder (e.g. build/grading from `make grade`) in formgrader")
    args, rest = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    from raydata_course.grading import course_root

    try:
        root = check_course_root(args.root or course_root())
    except FileNotFoundError as exc:
        raise SystemExit(str(exc)) from None
    _check_kernel()
    env = lab_environment()
    if args.grading:
        try:
            env[GRADING_DIR_ENV] = str(check_grading_dir(args.grading, root))
        except (FileNotFoundError, ValueError) as exc:
            raise SystemExit(str(exc)) from None
    cmd = lab_command(root, port=args.port, open_browser=not args.no_browser, extra_args=rest)
    os.chdir(root)
    os.execve(cmd[0], cmd, env)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
