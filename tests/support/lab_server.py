"""A JupyterLab server for the tests: started on the course as ``make jupyter`` starts it,
driven over its REST API, and stopped with everything it started."""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Sequence

from raydata_course.jupyter import lab_command, lab_environment
from raydata_grader.paths import check_instructor_root

__all__ = ["LabServer", "LabServerError", "free_port"]


class LabServerError(RuntimeError):
    """The JupyterLab server did not start, or did not answer, in time."""


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
        root: the course root (see :func:`raydata_grader.paths.check_instructor_root`).
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
        self.root = check_instructor_root(root)
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
