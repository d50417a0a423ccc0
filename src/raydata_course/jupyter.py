"""``make jupyter``, the student's side: JupyterLab on the course, with the course kernel.

nbgrader 0.9.6 ships a JupyterLab extension (``@jupyter/nbgrader``) whose **Validate** button
(the notebook toolbar) runs a notebook's visible tests. It reads ``nbgrader_config.py`` from
the folder the server was started in, and it fails a test cell that writes anything to
stderr, which Ray does on every Dataset execution. This module holds what the course needs
for that and for starting JupyterLab:

- :data:`VALIDATE_KERNEL_ARGUMENTS`, the kernel arguments Validate's kernels get (set by the
  course root's ``nbgrader_config.py``);
- :func:`lab_command` and :func:`lab_environment`: the command line and environment that
  start JupyterLab at the course root with the course kernel as default; the virtual
  environment's ``bin`` comes first on ``PATH``;
- :func:`install_kernel`: registers this Python as the course kernel (``make setup``, or
  ``python -m raydata_course.jupyter --install-kernel``);
- :func:`main`: ``python -m raydata_course.jupyter [--port N] [--no-browser] [--root DIR]
  [jupyter options]``.

The instructor's launcher (formgrader on a grading folder, ``make jupyter GRADING=...``) is
``raydata_grader.formgrader``; it starts JupyterLab with the same command line.

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
import os
import sys
from pathlib import Path
from typing import Sequence

from raydata_course.layout import KERNEL_DISPLAY_NAME, KERNEL_NAME, course_root, is_course_root

__all__ = [
    "install_kernel",
    "VALIDATE_KERNEL_ARGUMENTS",
    "lab_command",
    "lab_environment",
    "check_kernel",
    "exec_lab",
    "main",
]


def install_kernel(prefix: str | None = None) -> str:
    """Register this Python as the course's Jupyter kernel (``make setup`` calls it).

    Args:
        prefix: install under this environment prefix; default ``sys.prefix`` (the venv).

    Returns:
        The folder the kernelspec was written to.
    """
    import tempfile

    from ipykernel.kernelspec import write_kernel_spec
    from jupyter_client.kernelspec import KernelSpecManager

    # ipykernel's install() stages the spec in a mkdtemp folder and removes only its contents,
    # leaving an empty folder in /tmp each time; stage it in a folder that goes away instead.
    with tempfile.TemporaryDirectory(prefix="rdc-kernelspec-") as staging:
        spec = write_kernel_spec(Path(staging) / KERNEL_NAME, overrides={"display_name": KERNEL_DISPLAY_NAME})
        return KernelSpecManager().install_kernel_spec(str(spec), kernel_name=KERNEL_NAME, prefix=prefix or sys.prefix)


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


def check_kernel() -> None:
    """Make sure the course kernel is registered.

    Raises:
        SystemExit: with the command that registers it, if it is missing.
    """
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        KernelSpecManager().get_kernel_spec(KERNEL_NAME)
    except NoSuchKernel:
        raise SystemExit(
            f"The Jupyter kernel {KERNEL_NAME!r} is not installed. Run `make setup`, or "
            "`python -m raydata_course.jupyter --install-kernel` in the course's environment."
        ) from None


def exec_lab(root: Path, *, port: int | None, open_browser: bool, extra_args: Sequence[str] = (),
             env: dict[str, str] | None = None) -> None:
    """Replace this process with JupyterLab on the course at ``root`` (never returns).

    Raises:
        SystemExit: if the course kernel is not registered.
    """
    check_kernel()
    cmd = lab_command(root, port=port, open_browser=open_browser, extra_args=extra_args)
    os.chdir(root)
    os.execve(cmd[0], cmd, env if env is not None else lab_environment())


def main(argv: list[str] | None = None) -> int:
    """``python -m raydata_course.jupyter``: run JupyterLab on the course until interrupted.

    Options ``--port N``, ``--no-browser`` and ``--root DIR``; anything else is passed to
    ``jupyter lab``. ``--install-kernel`` registers the course kernel and exits.

    Raises:
        SystemExit: if the course folder or the course kernel is missing.
    """
    parser = argparse.ArgumentParser(prog="python -m raydata_course.jupyter",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=None, help="listen on this port only")
    parser.add_argument("--no-browser", action="store_true", help="do not open a web browser")
    parser.add_argument("--root", default=None, help="course folder (default: the one found from here)")
    parser.add_argument("--install-kernel", action="store_true", help="register the course kernel, then exit")
    args, rest = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    if args.install_kernel:
        print(f"installed the kernel {KERNEL_NAME!r} in {install_kernel()}")
        return 0
    if args.root is not None and not is_course_root(args.root):
        raise SystemExit(f"{args.root} is not the course folder: it needs chapters/ and exercises/.")
    try:
        root = Path(args.root).resolve() if args.root is not None else course_root()
    except FileNotFoundError as exc:
        raise SystemExit(str(exc)) from None
    exec_lab(root, port=args.port, open_browser=not args.no_browser, extra_args=rest)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
