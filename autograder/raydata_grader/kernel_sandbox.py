"""The graded kernel's sandbox: bubblewrap, an unprivileged user, cgroup bounds (grader only).

Every submitted notebook is hostile code. Its kernel, and every process it starts (Ray
included), runs inside a sandbox built with bubblewrap (Debian's ``bubblewrap``):

- **a user without privileges**: as root, ``bwrap`` builds the sandbox and ``setpriv`` drops
  to uid/gid 65534 (``nobody``) with no capabilities before the kernel starts; as another
  user, ``bwrap --unshare-user`` maps the kernel's uid 65534 to that user;
- **nothing secret mounted**: the new root holds only ``/usr`` (and its ``/bin``, ``/lib``
  links), ``/etc`` (read-only; ``/etc/shadow`` is unreadable for ``nobody``), ``/sys``
  read-only, a new ``/proc`` and ``/dev``, the Python installation and the virtual
  environment read-only, the student package's source read-only, the released exercise
  read-only, the judge's socket folder read-only and the kernel's connection folder. No
  oracles, ``solutions/``, gradebook, other students' folders, results or grader source;
- **private, size-limited scratch**: ``/tmp``, ``/dev/shm`` (Ray's object store) and the
  home folder ``/home/student`` (the kernel's working folder) are tmpfs mounts of their own;
- **its own PID namespace** (``--unshare-pid``, ``--die-with-parent``): when the kernel ends,
  everything it started ends with it, double-forked daemons included;
- **loopback only** (``--unshare-net``): Ray inside works on 127.0.0.1; nothing else is
  reachable;
- **bounds**: a per-notebook cgroup (v1 or v2) caps memory, tmpfs and shared memory included,
  and the number of processes and threads, and, where the CPU controller can be had, shares
  the CPUs fairly between notebooks graded at once and caps each at 2 cores; ``prlimit`` caps each process's private memory
  (``RLIMIT_DATA``), the size of any file it writes (``RLIMIT_FSIZE``) and core dumps; the
  grader's watchdog (:func:`raydata_grader.sandbox.run_limited`) caps wall time.

The kernel talks to the grader over Unix sockets only: Jupyter's ``ipc`` transport in the
connection folder, and the judge's socket (:mod:`raydata_grader.judge`).

Where bubblewrap cannot run (macOS, a machine without user namespaces), :func:`probe` says
so and the grader refuses to grade unless the instructor opts out (``--no-sandbox``).
"""

from __future__ import annotations

import hashlib
import os
import time
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.manager import AsyncKernelManager
from traitlets import Int, List, Unicode

from raydata_course.layout import GRADING_CPUS, HEADLESS_ENV, MACHINE_CPUS_ENV, TEMP_ROOT_ENV
from raydata_course.units import GiB, MiB
from raydata_grader.cgroups import CGROUP_PREFIX, Cgroup, writable_version
from raydata_grader.sandbox import remove_tree

__all__ = ["SANDBOX_UID", "SandboxSupport", "SandboxLimits", "KernelJail", "SandboxedKernelManager", "probe"]

#: The uid and gid the kernel runs as (``nobody`` on Debian).
SANDBOX_UID = 65534
#: Where the kernel's home and working folder is, inside the sandbox.
SANDBOX_HOME = "/home/student"
#: The sandbox's host name (loopback in its own ``/etc/hosts``).
SANDBOX_HOSTNAME = "grading-sandbox"
#: The largest message the grader accepts from a sandboxed kernel, in bytes (ZeroMQ drops
#: the connection on a larger one; the cell then fails instead of the grader filling up).
MAX_MESSAGE_BYTES = 256 * 1024 * 1024
#: Seconds a sandboxed kernel's Ray driver waits for a GCS it lost before it exits (Ray's
#: ``gcs_rpc_server_reconnect_timeout_s``, 60 by default).
GCS_RECONNECT_TIMEOUT_S = 15


@dataclass(frozen=True)
class SandboxSupport:
    """What this machine can enforce for a graded kernel.

    Attributes:
        level: ``"root"`` (bwrap as root, then ``setpriv`` to uid 65534), ``"user"``
            (bwrap in a user namespace, mapped to the grader's own uid) or ``"none"``.
        cgroups: ``"v1"``, ``"v2"`` or ``""`` (no writable memory and pids controllers).
        why: for ``"none"``, what is missing; otherwise empty.
    """

    level: str
    cgroups: str
    why: str = ""

    @property
    def available(self) -> bool:
        """True when kernels can be sandboxed here."""
        return self.level != "none"

    def describe(self) -> str:
        """One line for the grader's log."""
        if not self.available:
            return f"no sandbox on this machine: {self.why}"
        who = ("bubblewrap as root, kernel as uid 65534 without capabilities" if self.level == "root"
               else "bubblewrap in a user namespace, kernel as uid 65534 mapped to the grader's user")
        bounds = (f"cgroup {self.cgroups} bounds on memory and processes" if self.cgroups
                  else "no writable cgroups: memory bounded per process (RLIMIT_DATA) and by the watchdog's PSS sum, "
                       "processes not bounded")
        return f"{who}; {bounds}; private /tmp, /dev/shm and home; own PID namespace; loopback only"


def _bwrap() -> str | None:
    return shutil.which("bwrap")


@lru_cache(maxsize=1)
def probe() -> SandboxSupport:
    """Find out (once per process) whether bubblewrap runs here, and which cgroups are writable."""
    if not sys.platform.startswith("linux"):
        return SandboxSupport("none", "", f"bubblewrap needs Linux; this is {sys.platform}")
    bwrap = _bwrap()
    if bwrap is None:
        return SandboxSupport("none", "", "bwrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)")
    level = "root" if os.geteuid() == 0 else "user"
    cmd = [bwrap, "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--unshare-pid", "--unshare-net",
           "--unshare-ipc", "--die-with-parent"]
    cmd += ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)] if level == "user" else []
    cmd += ["--", "/bin/true"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return SandboxSupport("none", "", f"bwrap did not run ({type(exc).__name__}: {exc})")
    if out.returncode != 0:
        return SandboxSupport("none", "", f"bwrap failed here ({out.stderr.strip()[:200] or out.returncode}); "
                                          "user namespaces may be disabled")
    if level == "root" and shutil.which("setpriv") is None:
        return SandboxSupport("none", "", "setpriv (util-linux) is not installed")
    return SandboxSupport(level, writable_version())


@dataclass(frozen=True)
class SandboxLimits:
    """Bounds for one graded kernel and everything it starts.

    Attributes:
        memory_bytes: the cgroup's memory limit (tmpfs and shared memory included) and each
            process's ``RLIMIT_DATA``, in bytes.
        pids_max: most processes and threads at once (the cgroup's ``pids.max``).
        file_bytes: largest file any process may write (``RLIMIT_FSIZE``), in bytes. It must
            exceed the object store: Ray's plasma store is one file of that size in
            ``/dev/shm`` (with 2 GiB for both, Ray's node times out at start-up).
        tmp_bytes: size of the private ``/tmp``, in bytes.
        shm_bytes: size of the private ``/dev/shm`` (Ray's object store lives there), in bytes.
        home_bytes: size of the private home and working folder, in bytes.
        cpus: most cores the kernel and all it starts may use at once (the cgroup's CPU quota,
            where the controller can be had): a notebook keeps about 1.3 busy on average
            (``benchmarks/grade_scale.py``), and a neighbour that spins every thread is held to 2.
    """

    memory_bytes: int = 6 * GiB
    pids_max: int = 4096
    file_bytes: int = 4 * GiB
    tmp_bytes: int = 2 * GiB
    shm_bytes: int = 3 * GiB
    home_bytes: int = 256 * MiB
    cpus: float = 2.0

    @property
    def scratch_bytes(self) -> int:
        """Bytes of the private tmpfs mounts together: memory the kernel can fill that only a cgroup counts."""
        return self.tmp_bytes + self.shm_bytes + self.home_bytes


def _python_dirs() -> list[str]:
    """The Python installation and the virtual environment the kernel runs from."""
    dirs = {os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix)}
    return sorted(dirs)


def _student_package_dir() -> str:
    import raydata_course

    return os.path.realpath(Path(raydata_course.__file__).parent)


def _mkdirs(path: str) -> list[str]:
    """``--perms 0755 --dir`` for every folder above ``path`` (bwrap makes them 0700 otherwise)."""
    args, parts = [], Path(path).parts
    for i in range(2, len(parts)):
        args += ["--perms", "0755", "--dir", str(Path(*parts[:i]))]
    return args


@dataclass
class KernelJail:
    """One graded kernel's sandbox: its folders, its cgroup, its command line.

    Use it as a context manager: entering creates the folders and the cgroup, leaving kills
    whatever still runs in the cgroup, removes the cgroup and deletes the folders.

    Args:
        support: what the machine can do (:func:`probe`).
        limits: the bounds (:class:`SandboxLimits`).
        base_dir: a private folder of the grader's for this kernel (created).
        readonly: more folders to show read-only at the same path (the released exercise).
        judge_dir: the folder holding the judge's socket (shown read-only).
        env: extra environment for the kernel (names and values are the grader's, not secret).
    """

    support: SandboxSupport
    limits: SandboxLimits
    base_dir: Path
    readonly: list[str] = field(default_factory=list)
    judge_dir: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    cgroup: Cgroup | None = None
    peak_memory_bytes: int = 0
    oom_kills: int = 0
    cpu_seconds: float | None = None

    @property
    def ipc_dir(self) -> Path:
        """The kernel's connection folder: its connection file and ZeroMQ sockets (writable inside)."""
        return self.base_dir / "ipc"

    def __enter__(self) -> "KernelJail":
        self.base_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.ipc_dir.mkdir(exist_ok=True, mode=0o700)
        if self.support.level == "root":
            os.chown(self.ipc_dir, SANDBOX_UID, SANDBOX_UID)
        if self.support.cgroups:
            unique = hashlib.sha256(f"{self.base_dir.resolve()}:{os.getpid()}:{time.time_ns()}".encode()).hexdigest()[:16]
            self.cgroup = Cgroup(self.support.cgroups, f"{CGROUP_PREFIX}-{os.getpid()}-{unique}",
                                 self.limits.memory_bytes, self.limits.pids_max, self.limits.cpus)
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def cgroup_dirs(self) -> list[Path]:
        """The kernel's cgroup folders (empty without cgroups, or once stopped)."""
        return list(self.cgroup.dirs) if self.cgroup is not None else []

    def stop(self) -> int:
        """Kill everything left in the cgroup, remove it and the folders; return how many were killed."""
        killed = 0
        if self.cgroup is not None:
            self.peak_memory_bytes = max(self.peak_memory_bytes, self.cgroup.memory_bytes()[1])
            self.oom_kills = self.cgroup.oom_kills()
            killed = self.cgroup.stop()
            self.cpu_seconds = self.cgroup.cpu_seconds_at_stop
            self.cgroup = None
        remove_tree(self.base_dir)
        return killed

    # -- the command line
    def environment(self) -> dict[str, str]:
        """The kernel's whole environment (bwrap clears the grader's)."""
        venv_bin = str(Path(sys.executable).parent)
        env = {
            "PATH": f"{venv_bin}:/usr/local/bin:/usr/bin:/bin",
            "HOME": SANDBOX_HOME,
            "USER": "student",
            "TMPDIR": "/tmp",
            "LANG": "C.UTF-8",
            "PYTHONUNBUFFERED": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            "MPLBACKEND": "Agg",
            "MPLCONFIGDIR": "/tmp/matplotlib",
            HEADLESS_ENV: "1",
            TEMP_ROOT_ENV: "/tmp/ray",
            MACHINE_CPUS_ENV: str(GRADING_CPUS),  # the same default cluster on every machine that grades
            # The kernel's own cluster, once a submission kills it, never comes back: its driver
            # gives up on the GCS after this many seconds (Ray's gcs_rpc_server_reconnect_timeout_s,
            # 60 by default, spent spinning two cores). A live GCS under load keeps its connection.
            "RAY_gcs_rpc_server_reconnect_timeout_s": str(GCS_RECONNECT_TIMEOUT_S),
        }
        env.update(self.env)
        return env

    def _hosts_file(self) -> Path:
        """An ``/etc/hosts`` in which the sandbox's host name is loopback (Ray looks its own name up,
        and there is no DNS in a namespace with loopback only)."""
        hosts = self.base_dir / "hosts"
        hosts.write_text(f"127.0.0.1 localhost {SANDBOX_HOSTNAME}\n::1 localhost\n")
        hosts.chmod(0o644)
        return hosts

    def wrap(self, kernel_cmd: list[str]) -> list[str]:
        """The full command that starts ``kernel_cmd`` inside this sandbox."""
        lim = self.limits
        cmd: list[str] = []
        procs = self.cgroup.procs_files if self.cgroup is not None else []
        if procs:  # join the cgroups first, so that everything started later is in them
            script = " && ".join(f'echo $$ > "${i + 1}"' for i in range(len(procs))) + f' && shift {len(procs)} && exec "$@"'
            cmd += ["/bin/sh", "-c", script, "sh", *procs]
        cmd += ["prlimit", f"--data={lim.memory_bytes}", f"--fsize={lim.file_bytes}", "--core=0", "--"]
        cmd += [_bwrap() or "bwrap", "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-net",
                "--unshare-ipc", "--unshare-uts", "--hostname", SANDBOX_HOSTNAME]
        cmd += ["--ro-bind", "/usr", "/usr"]
        for link in ("bin", "lib", "lib64", "sbin"):
            target = os.readlink(f"/{link}") if os.path.islink(f"/{link}") else None
            if target:
                cmd += ["--symlink", target, f"/{link}"]
            elif os.path.isdir(f"/{link}"):
                cmd += ["--ro-bind", f"/{link}", f"/{link}"]
        cmd += ["--ro-bind", "/etc", "/etc", "--ro-bind", str(self._hosts_file()), "/etc/hosts",
                "--ro-bind", "/sys", "/sys", "--proc", "/proc", "--dev", "/dev"]
        cmd += ["--perms", "1777", "--size", str(lim.shm_bytes), "--tmpfs", "/dev/shm"]
        cmd += ["--perms", "1777", "--size", str(lim.tmp_bytes), "--tmpfs", "/tmp"]
        cmd += ["--perms", "0755", "--dir", "/home"]
        cmd += ["--perms", "0700" if self.support.level == "user" else "0777", "--size", str(lim.home_bytes),
                "--tmpfs", SANDBOX_HOME]
        shown = set()
        for path in [*_python_dirs(), _student_package_dir(), *self.readonly]:
            if path in shown:
                continue
            shown.add(path)
            cmd += _mkdirs(path) + ["--ro-bind", path, path]
        if self.judge_dir:
            cmd += _mkdirs(self.judge_dir) + ["--ro-bind", self.judge_dir, self.judge_dir]
        ipc = str(self.ipc_dir)
        cmd += _mkdirs(ipc) + ["--bind", ipc, ipc, "--chdir", SANDBOX_HOME, "--clearenv"]
        for key, value in self.environment().items():
            cmd += ["--setenv", key, value]
        if self.support.level == "root":
            cmd += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--",
                    "setpriv", f"--reuid={SANDBOX_UID}", f"--regid={SANDBOX_UID}", "--clear-groups",
                    "--inh-caps=-all", "--bounding-set=-all", "--"]
        else:
            cmd += ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--"]
        return cmd + list(kernel_cmd)


#: How much of a sandboxed kernel's own stdout and stderr reaches the grader's log, in bytes.
KERNEL_LOG_BYTES = 256 * 1024


def _forward_capped(stream, limit_bytes: int) -> None:
    """Copy ``stream`` to this process's stderr until ``limit_bytes``, then read and drop the rest."""
    written = dropped = 0
    for chunk in iter(lambda: stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536), b""):
        keep = chunk[:max(limit_bytes - written, 0)]
        if keep:
            sys.stderr.write(keep.decode("utf-8", "replace"))
            sys.stderr.flush()
        written += len(keep)
        dropped += len(chunk) - len(keep)
    if dropped:
        sys.stderr.write(f"\n[grader] {dropped:,} more bytes of the kernel's own output were dropped\n")


class SandboxedKernelClient(AsyncKernelClient):
    """The client of a sandboxed kernel: once the kernel first answers, before any cell can
    run, it has the manager lock the kernel's connection folder
    (:meth:`SandboxedKernelManager.lock_connection_folder`)."""

    async def wait_for_ready(self, timeout=None):
        await AsyncKernelClient.wait_for_ready(self, timeout=timeout)
        lock = getattr(self.parent, "lock_connection_folder", None)
        if lock is not None:
            lock()


class SandboxedKernelManager(AsyncKernelManager):
    """A Jupyter kernel manager that starts the kernel inside a :class:`KernelJail`.

    The kernel uses the ``ipc`` transport (Unix sockets in the jail's connection folder: the
    kernel's network namespace has only its own loopback), reads its connection file there,
    and is interrupted by message (a signal would reach bubblewrap, not the kernel).
    """

    jail_prefix = List(Unicode(), help="the command that the kernel's own command follows").tag(config=True)
    ipc_dir = Unicode("", help="the jail's connection folder").tag(config=True)
    sandbox_uid = Int(-1, help="owner to give the connection file (-1: leave it)").tag(config=True)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        if not self.jail_prefix or not self.ipc_dir:
            raise ValueError("SandboxedKernelManager needs jail_prefix and ipc_dir (see KernelJail)")
        self.client_factory = SandboxedKernelClient
        self.transport = "ipc"
        self.ip = str(Path(self.ipc_dir) / "kernel")
        self.connection_file = str(Path(self.ipc_dir) / "kernel.json")

    @property
    def kernel_spec(self):
        spec = super().kernel_spec
        if spec is not None and spec.interrupt_mode != "message":
            spec.interrupt_mode = "message"
        return spec

    def write_connection_file(self, **kwargs) -> None:
        super().write_connection_file(**kwargs)
        if self.sandbox_uid >= 0 and os.path.exists(self.connection_file):
            os.chown(self.connection_file, self.sandbox_uid, self.sandbox_uid)

    def lock_connection_folder(self) -> bool:
        """Once the kernel is up, take its connection folder back: return whether it was locked.

        The folder is the one path on the grader's disk the kernel can write to, and only for
        its start-up (its connection file and ZeroMQ sockets). As root, the folder and the
        connection file then belong to root again (0755, 0644): the kernel, uid
        :data:`SANDBOX_UID`, can neither add a file there nor grow one. Its sockets stay
        bound. Under a user namespace the kernel is the grader's own user, so nothing changes
        (False); the folder's files still end with the notebook.
        """
        if self.sandbox_uid < 0:
            return False
        folder = Path(self.ipc_dir)
        for entry in folder.iterdir():
            if entry.is_file() and not entry.is_symlink():
                os.chown(entry, 0, 0, follow_symlinks=False)
                entry.chmod(0o644)
        os.chown(folder, 0, 0)
        folder.chmod(0o755)
        return True

    def format_kernel_cmd(self, extra_arguments=None) -> list[str]:
        return list(self.jail_prefix) + super().format_kernel_cmd(extra_arguments)

    async def _async_launch_kernel(self, kernel_cmd, **kw):
        # The kernel's own stdout and stderr (Ray's start-up messages, a crash's last words)
        # would be the grader's log file, which the kernel could fill: they go through a pipe
        # instead, of which the first KERNEL_LOG_BYTES reach the log.
        kw["stdout"] = subprocess.PIPE
        kw["stderr"] = subprocess.STDOUT
        result = await super()._async_launch_kernel(kernel_cmd, **kw)
        process = getattr(self.provisioner, "process", None)
        if process is not None and process.stdout is not None:
            threading.Thread(target=_forward_capped, args=(process.stdout, KERNEL_LOG_BYTES), daemon=True,
                             name="kernel-log").start()
        return result

    def client(self, **kwargs):
        """A client whose ZeroMQ sockets drop any message over :data:`MAX_MESSAGE_BYTES`."""
        import zmq

        kc = super().client(**kwargs)
        kc.context.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
        return kc
