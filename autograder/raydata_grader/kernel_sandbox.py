"""The graded kernel's sandbox: bubblewrap, an unprivileged user, cgroup bounds (grader only).

Every submitted notebook is hostile code. Its kernel, and every process it starts (Ray
included), runs inside a sandbox built with bubblewrap (Debian's ``bubblewrap``):

- **a user without privileges**: as root, ``bwrap`` builds the sandbox and ``setpriv`` drops
  to a uid and gid of the kernel's own, leased for as long as it runs
  (:mod:`raydata_grader.sandbox_uids`: no two kernels share the keyring or the per-user
  counts), with no capabilities, before the kernel starts; as another user,
  ``bwrap --unshare-user`` maps the kernel's uid 65534 to that user. Inside, the uid is
  ``student`` in an ``/etc/passwd`` of the sandbox's own;
- **a seccomp filter** (:mod:`raydata_grader.seccomp_filter`) refuses the calls a kernel never
  needs: the keyring, new namespaces (``unshare -r`` included), tracing other processes,
  mounts, BPF, perf events, userfaultfd, kernel modules and the machine's administration;
- **nothing secret mounted**: the new root holds only ``/usr`` (and its ``/bin``, ``/lib``
  links), ``/etc`` (read-only; ``/etc/shadow`` is unreadable for the kernel's user), ``/sys``
  read-only, a new ``/proc`` and ``/dev``, the Python installation and the virtual
  environment read-only, the student package's source read-only, the released exercise
  read-only, the judge's socket folder read-only and the kernel's connection folder (at
  ``/run/kernel``). No oracles, ``solutions/``, gradebook, other students' folders, results
  or grader source, and no process inside shows a folder of the grader's in its command line
  or environment: bubblewrap reads its options from a file descriptor (``--args``), not its
  command line. ``/proc/self/mountinfo`` still names the host folders that are mounted (the
  venv, the released exercise's copy and the grader's temporary folders, none of them secret);
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
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from raydata_course.layout import GRADING_CPUS, HEADLESS_ENV, MACHINE_CPUS_ENV, TEMP_ROOT_ENV
from raydata_course.units import GiB, MiB
from raydata_grader.cgroups import CGROUP_PREFIX, Cgroup, writable_version
from raydata_grader.kernel_manager import MAX_MESSAGE_BYTES, SANDBOX_IPC_DIR, SandboxedKernelManager
from raydata_grader.sandbox import remove_tree
from raydata_grader.sandbox_uids import UidLease, lease_uid
from raydata_grader.seccomp_filter import SeccompUnsupported, build_filter
from raydata_grader.seccomp_filter import describe as seccomp_description

__all__ = ["SANDBOX_UID", "SandboxSupport", "SandboxLimits", "KernelJail", "SandboxedKernelManager", "probe"]

#: The uid and gid the kernel runs as (``nobody`` on Debian).
SANDBOX_UID = 65534
#: Where the kernel's home and working folder is, inside the sandbox.
SANDBOX_HOME = "/home/student"
#: The sandbox's host name (loopback in its own ``/etc/hosts``).
SANDBOX_HOSTNAME = "grading-sandbox"
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
        who = ("bubblewrap as root, each kernel as a uid of its own without capabilities" if self.level == "root"
               else "bubblewrap in a user namespace, kernel as uid 65534 mapped to the grader's user")
        bounds = (f"cgroup {self.cgroups} bounds on memory and processes" if self.cgroups
                  else "no writable cgroups: memory bounded per process (RLIMIT_DATA) and by the watchdog's PSS sum, "
                       "processes not bounded")
        return (f"{who}; {bounds}; private /tmp, /dev/shm and home; own PID namespace; loopback only; "
                f"{seccomp_description()}")


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
    try:
        build_filter()
    except SeccompUnsupported as exc:
        return SandboxSupport("none", "", str(exc))
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
    """One graded kernel's sandbox: its folders, its uid, its cgroup, its command line.

    Use it as a context manager: entering creates the folders and the cgroup and, as root,
    leases the kernel's uid (:mod:`raydata_grader.sandbox_uids`); leaving kills whatever still
    runs in the cgroup, removes the cgroup, deletes the folders and gives the uid back.

    Args:
        support: what the machine can do (:func:`probe`).
        limits: the bounds (:class:`SandboxLimits`).
        base_dir: a private folder of the grader's for this kernel (created).
        readonly: more folders to show read-only at the same path (the released exercise).
        judge_dir: the folder holding the judge's socket (shown read-only).
        env: extra environment for the kernel (names and values are the grader's, not secret).

    Attributes:
        uid: the kernel's uid and gid on the host: a leased one as root, else
            :data:`SANDBOX_UID` (inside a user namespace, mapped to the grader's user).
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
    uid: int = SANDBOX_UID
    _lease: UidLease | None = None

    @property
    def ipc_dir(self) -> Path:
        """The kernel's connection folder: its connection file and ZeroMQ sockets (writable inside,
        at :data:`SANDBOX_IPC_DIR`)."""
        return self.base_dir / "ipc"

    def __enter__(self) -> "KernelJail":
        self.base_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.ipc_dir.mkdir(exist_ok=True, mode=0o700)
        if self.support.level == "root":
            self._lease = lease_uid()
            self.uid = self._lease.uid
            os.chown(self.ipc_dir, self.uid, self.uid)
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
        """Kill everything left in the cgroup, remove it and the folders, give the uid back;
        return how many processes were killed."""
        killed = 0
        if self.cgroup is not None:
            self.peak_memory_bytes = max(self.peak_memory_bytes, self.cgroup.memory_bytes()[1])
            self.oom_kills = self.cgroup.oom_kills()
            killed = self.cgroup.stop()
            self.cpu_seconds = self.cgroup.cpu_seconds_at_stop
            self.cgroup = None
        remove_tree(self.base_dir)
        if self._lease is not None:  # a uid that some process still runs as is not leased again
            self._lease.release()
            self._lease = None
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

    def _etc_file(self, name: str, text: str) -> Path:
        path = self.base_dir / name
        path.write_text(text)
        path.chmod(0o644)
        return path

    def _etc_files(self) -> list[str]:
        """bwrap options that show the sandbox's own ``/etc/hosts``, ``/etc/passwd`` and ``/etc/group``.

        ``hosts`` makes the sandbox's host name loopback (Ray looks its own name up, and there is
        no DNS in a namespace with loopback only); ``passwd`` and ``group`` name the kernel's uid
        ``student`` (with ``root`` and ``nobody``), so that a library that looks its user up finds
        one, and the host's users are not listed.
        """
        users = {0: "root", 65534: "nobody", self.uid: "student"}
        groups = {0: "root", 65534: "nogroup", self.uid: "student"}
        homes = {"student": SANDBOX_HOME, "root": "/root"}
        passwd = "".join(f"{name}:x:{uid}:{uid}:{name}:{homes.get(name, '/nonexistent')}:/usr/sbin/nologin\n"
                         for uid, name in users.items())
        group = "".join(f"{name}:x:{gid}:\n" for gid, name in groups.items())
        files = {"hosts": f"127.0.0.1 localhost {SANDBOX_HOSTNAME}\n::1 localhost\n", "passwd": passwd, "group": group}
        args = []
        for name, text in files.items():
            args += ["--ro-bind", str(self._etc_file(name, text)), f"/etc/{name}"]
        return args

    def _bwrap_options(self) -> list[str]:
        """Every bwrap option (the command aside), as the ``--args`` file gives them to bwrap."""
        lim = self.limits
        opts = ["--die-with-parent", "--new-session", "--unshare-pid", "--unshare-net", "--unshare-ipc",
                "--unshare-uts", "--hostname", SANDBOX_HOSTNAME, "--seccomp", str(_FILTER_FD)]
        opts += ["--ro-bind", "/usr", "/usr"]
        for link in ("bin", "lib", "lib64", "sbin"):
            target = os.readlink(f"/{link}") if os.path.islink(f"/{link}") else None
            if target:
                opts += ["--symlink", target, f"/{link}"]
            elif os.path.isdir(f"/{link}"):
                opts += ["--ro-bind", f"/{link}", f"/{link}"]
        opts += ["--ro-bind", "/etc", "/etc", *self._etc_files(), "--ro-bind", "/sys", "/sys", "--proc", "/proc",
                 "--dev", "/dev"]
        opts += ["--perms", "1777", "--size", str(lim.shm_bytes), "--tmpfs", "/dev/shm"]
        opts += ["--perms", "1777", "--size", str(lim.tmp_bytes), "--tmpfs", "/tmp"]
        opts += ["--perms", "0755", "--dir", "/home"]
        opts += ["--perms", "0700" if self.support.level == "user" else "0777", "--size", str(lim.home_bytes),
                 "--tmpfs", SANDBOX_HOME]
        shown = set()
        for path in [*_python_dirs(), _student_package_dir(), *self.readonly]:
            if path in shown:
                continue
            shown.add(path)
            opts += _mkdirs(path) + ["--ro-bind", path, path]
        if self.judge_dir:
            opts += _mkdirs(self.judge_dir) + ["--ro-bind", self.judge_dir, self.judge_dir]
        opts += _mkdirs(SANDBOX_IPC_DIR) + ["--bind", str(self.ipc_dir), SANDBOX_IPC_DIR, "--chdir", SANDBOX_HOME,
                                            "--clearenv"]
        for key, value in self.environment().items():
            opts += ["--setenv", key, value]
        if self.support.level == "root":
            opts += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        else:
            opts += ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
        return opts

    def wrap(self, kernel_cmd: list[str]) -> list[str]:
        """The full command that starts ``kernel_cmd`` inside this sandbox (call it inside ``with``).

        The command, run on the host: a shell (with an empty environment) joins the kernel's
        cgroups and opens two files of this jail's folder, bwrap's options and the seccomp
        filter (:func:`raydata_grader.seccomp_filter.build_filter`), as file descriptors
        :data:`_ARGS_FD` and :data:`_FILTER_FD`; then ``prlimit`` sets the per-process limits
        and bwrap reads its options from the first (``--args``) and the filter from the second
        (``--seccomp``), and closes both before the kernel starts. bwrap's own command line,
        the one process of the grader's that the kernel can see (PID 1 of its namespace), is
        ``bwrap --args 8 -- [setpriv ... --] kernel_cmd``: no mount, no folder of the grader's.

        Raises:
            SeccompUnsupported: on an architecture the filter has no syscall table for.
        """
        args_file, filter_file = self.base_dir / "bwrap-args", self.base_dir / "seccomp.bpf"
        filter_file.write_bytes(build_filter())
        args_file.write_bytes(b"".join(arg.encode() + b"\0" for arg in self._bwrap_options()))
        for path in (args_file, filter_file):
            path.chmod(0o600)
        procs = self.cgroup.procs_files if self.cgroup is not None else []
        # join the cgroups first, so that everything started later is in them
        script = "".join(f'echo $$ > "${{{i + 1}}}" && ' for i in range(len(procs)))
        script += (f'a="${{{len(procs) + 1}}}" && f="${{{len(procs) + 2}}}" && shift {len(procs) + 2} && '
                   f'exec "$@" {_ARGS_FD}<"$a" {_FILTER_FD}<"$f"')
        cmd = [_tool("env"), "-i", _tool("sh"), "-c", script, "sh", *map(str, procs), str(args_file), str(filter_file)]
        cmd += [_tool("prlimit"), f"--data={self.limits.memory_bytes}", f"--fsize={self.limits.file_bytes}",
                "--core=0", "--"]
        cmd += [_bwrap() or "bwrap", "--args", str(_ARGS_FD), "--"]
        if self.support.level == "root":
            cmd += [_tool("setpriv"), f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups",
                    "--inh-caps=-all", "--bounding-set=-all", "--"]
        return cmd + list(kernel_cmd)


#: The file descriptors through which bwrap reads its options and the seccomp filter (a
#: POSIX shell redirects single digits only).
_ARGS_FD, _FILTER_FD = 8, 9


def _tool(name: str) -> str:
    """The absolute path of a command the launcher runs with an empty environment."""
    return shutil.which(name) or next((p for p in (f"/usr/bin/{name}", f"/bin/{name}") if os.path.exists(p)), name)
