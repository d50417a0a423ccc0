"""The graded kernel's sandbox, checked one property at a time with small commands (no Ray).

Each test runs a Python snippet inside a :class:`raydata_grader.kernel_sandbox.KernelJail` as
the grader does for a kernel, and checks what the snippet could see, reach or leave behind.
They need bubblewrap (``.ci/run`` installs it); where the machine cannot sandbox at all they
are skipped, unless ``RAYDATA_COURSE_REQUIRE_SANDBOX=1`` (set by ``.ci/run``) makes that a failure.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from raydata_grader.kernel_sandbox import SANDBOX_UID, KernelJail, SandboxLimits, probe
from raydata_grader.sandbox_uids import SANDBOX_UID_BASE, SANDBOX_UID_SLOTS, key_counts
from raydata_course.layout import REQUIRE_SANDBOX_ENV
from raydata_course.units import MiB

ROOT = Path(__file__).resolve().parents[1]
SUPPORT = probe()
REQUIRED = os.environ.get(REQUIRE_SANDBOX_ENV) == "1"

if not SUPPORT.available:
    if REQUIRED:
        raise RuntimeError(f"{REQUIRE_SANDBOX_ENV}=1 but this machine cannot sandbox: {SUPPORT.why}")
    pytest.skip(f"no sandbox on this machine: {SUPPORT.why}", allow_module_level=True)


def _run(tmp_path, code: str, limits: SandboxLimits | None = None, timeout_s: float = 60, name: str = "jail",
         **jail_args):
    """Run ``code`` with the kernel's Python inside a jail; return (returncode, stdout, stderr, jail)."""
    jail = KernelJail(SUPPORT, limits or SandboxLimits(), Path(f"/tmp/rdg-test-{os.getpid()}-{name}"), **jail_args)
    with jail:
        proc = subprocess.run(jail.wrap([sys.executable, "-c", code]), capture_output=True, text=True,
                              timeout=timeout_s, env={**os.environ, "GRADER_SECRET": "s3cret"})
    return proc.returncode, proc.stdout, proc.stderr, jail


def test_the_kernel_is_an_unprivileged_user_that_sees_nothing_secret(tmp_path):
    probes = [str(ROOT / "autograder" / "oracles" / "data01.py"), str(ROOT / "solutions"), str(ROOT / "tests"),
              str(ROOT / ".git"), "/root/.ssh", "/etc/shadow", str(Path.home() / ".ray"), str(tmp_path)]
    code = f"""
import json, os
seen = {{}}
for p in {probes!r}:
    try:
        seen[p] = sorted(os.listdir(p))[:3] if os.path.isdir(p) else open(p, "rb").read(8).hex()
    except Exception as exc:
        seen[p] = type(exc).__name__
caps = [l for l in open("/proc/self/status") if l.startswith(("CapEff", "CapPrm", "CapBnd"))]
print(json.dumps({{"uid": os.getuid(), "euid": os.geteuid(), "gid": os.getgid(), "seen": seen, "caps": caps,
                  "env": sorted(os.environ), "secret": os.environ.get("GRADER_SECRET"),
                  "ppid_cmd": open("/proc/1/cmdline").read()[:200]}}))
"""
    rc, out, err, jail = _run(tmp_path, code)
    assert rc == 0, err
    facts = json.loads(out)
    assert (facts["uid"], facts["euid"], facts["gid"]) == (jail.uid,) * 3
    if SUPPORT.level == "root":  # a uid of its own, not the host's nobody
        assert SANDBOX_UID_BASE <= jail.uid < SANDBOX_UID_BASE + SANDBOX_UID_SLOTS
    else:
        assert jail.uid == SANDBOX_UID
    assert all(v in ("FileNotFoundError", "PermissionError") for v in facts["seen"].values()), facts["seen"]
    assert all(line.split()[1] == "0000000000000000" for line in facts["caps"]), facts["caps"]
    assert facts["secret"] is None and "GRADER_SECRET" not in facts["env"]
    assert "raydata_grader" not in facts["ppid_cmd"]  # the grader's processes are outside the PID namespace


#: Tries every call the seccomp filter refuses, and the honest calls it must let through; prints
#: {what: errno name or "ok"} as JSON. NR is this machine's syscall numbers.
FILTER_PROBE = r"""
import ctypes, errno, json, multiprocessing, os, subprocess, threading, time
NR = {numbers}
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def call(name, *args):
    ctypes.set_errno(0)
    r = libc.syscall(NR[name], *[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    if r == 0 and name == "clone":
        os._exit(0)  # the child of a clone the filter let through
    return errno.errorcode.get(ctypes.get_errno(), "?") if r == -1 else "ok"
CLONE_NEWUSER, CLONE_NEWNS, CLONE_FILES, SIGCHLD = 0x10000000, 0x20000, 0x400, 17
child = subprocess.Popen(["sleep", "30"])
iov = (ctypes.c_char * 8)()
vec = (ctypes.c_void_p * 2)(ctypes.addressof(iov), 8)
seen = {{
    "unshare -r": str(subprocess.run(["unshare", "-r", "true"], capture_output=True).returncode),
    "add_key": call("add_key", b"user", b"rdg-key", b"v", 1, -4),
    "request_key": call("request_key", b"user", b"rdg-key", None, -4),
    "keyctl": call("keyctl", 0, -4, 0),
    "unshare newuser": call("unshare", CLONE_NEWUSER),
    "unshare newns": call("unshare", CLONE_NEWNS),
    "clone newuser": call("clone", CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0),
    "clone3": call("clone3", 0, 0),
    "setns": call("setns", 0, 0),
    "ptrace traceme": call("ptrace", 0, 0, 0, 0),
    "ptrace attach child": call("ptrace", 16, child.pid, 0, 0),
    "ptrace attach pid 1": call("ptrace", 16, 1, 0, 0),
    "process_vm_readv": call("process_vm_readv", child.pid, ctypes.byref(vec), 1, ctypes.byref(vec), 1, 0),
    "perf_event_open": call("perf_event_open", 0, 0, -1, -1, 0),
    "bpf": call("bpf", 0, 0, 0),
    "userfaultfd": call("userfaultfd", 0),
    "mount": call("mount", b"none", b"/tmp", b"tmpfs", 0, 0),
    "chroot": call("chroot", b"/tmp"),
    "io_uring_setup": call("io_uring_setup", 1, 0),
    "personality no-aslr": call("personality", 0x0040000),
    # what honest code does
    "personality query": call("personality", 0xFFFFFFFF),
    "unshare files": call("unshare", CLONE_FILES),
}}
child.kill(); child.wait()
t = threading.Thread(target=time.sleep, args=(0.01,)); t.start(); t.join()
seen["thread"] = "ok"
seen["subprocess"] = "ok" if subprocess.run(["true"]).returncode == 0 else "failed"
for method in ("fork", "spawn"):
    with multiprocessing.get_context(method).Pool(2) as pool:
        seen["pool " + method] = "ok" if pool.map(abs, [-1, -2]) == [1, 2] else "failed"
print(json.dumps(seen))
"""

REFUSED_CALLS = {
    "add_key": "EPERM", "request_key": "EPERM", "keyctl": "EPERM", "unshare newuser": "EPERM",
    "unshare newns": "EPERM", "clone newuser": "EPERM", "clone3": "ENOSYS", "setns": "EPERM",
    "ptrace traceme": "EPERM", "ptrace attach child": "EPERM", "ptrace attach pid 1": "EPERM",
    "process_vm_readv": "EPERM", "perf_event_open": "EPERM", "bpf": "EPERM", "userfaultfd": "EPERM",
    "mount": "EPERM", "chroot": "EPERM", "io_uring_setup": "ENOSYS", "personality no-aslr": "EPERM",
}
HONEST_CALLS = ("personality query", "unshare files", "thread", "subprocess", "pool fork", "pool spawn")


def test_the_seccomp_filter_refuses_what_a_kernel_never_needs_and_lets_honest_calls_through(tmp_path):
    """Keyring, new namespaces, tracing, kernel interfaces and mounts are refused (never killed);
    threads (glibc tries clone3 first, then clone), subprocesses and process pools still work."""
    from raydata_grader.seccomp_filter import arch_for

    rc, out, err, _ = _run(tmp_path, FILTER_PROBE.format(numbers=arch_for().numbers))
    assert rc == 0, err
    seen = json.loads(out)
    assert {k: seen[k] for k in REFUSED_CALLS} == REFUSED_CALLS, seen
    assert seen["unshare -r"] != "0", seen  # `unshare -r` (a user namespace, uid 0 inside) fails
    assert all(seen[k] == "ok" for k in HONEST_CALLS), seen


def test_no_key_passes_from_one_kernel_to_the_next_or_stays_on_the_host(tmp_path):
    """One kernel writes a key to its user and session keyrings, a second one (running at the same
    time, and after) looks for it: every call is refused, and no sandbox uid holds a key afterwards."""
    from raydata_grader.seccomp_filter import arch_for

    numbers = arch_for().numbers
    code = f"""
import ctypes, errno, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def call(nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(nr, *[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    return errno.errorcode.get(ctypes.get_errno(), "?") if r == -1 else f"key {{r}}"
seen = {{}}
for ring in (-4, -3):  # KEY_SPEC_USER_KEYRING, KEY_SPEC_SESSION_KEYRING
    seen[f"read {{ring}}"] = call({numbers['request_key']}, b"user", b"rdg-message", None, 0)
    seen[f"search {{ring}}"] = call({numbers['keyctl']}, 10, ring, b"user", b"rdg-message", 0)  # KEYCTL_SEARCH
    if sys.argv[-1] == "write":
        seen[f"write {{ring}}"] = call({numbers['add_key']}, b"user", b"rdg-message", b"answers", 7, ring)
print(json.dumps(seen))
"""
    before = key_counts()
    jail_a = KernelJail(SUPPORT, SandboxLimits(), Path(f"/tmp/rdg-test-{os.getpid()}-key-a"))
    jail_b = KernelJail(SUPPORT, SandboxLimits(), Path(f"/tmp/rdg-test-{os.getpid()}-key-b"))
    with jail_a, jail_b:
        if SUPPORT.level == "root":
            assert jail_a.uid != jail_b.uid
        writer = subprocess.Popen(jail_a.wrap([sys.executable, "-c", code + "import time; time.sleep(2)", "write"]),
                                  stdout=subprocess.PIPE, text=True)
        time.sleep(1)
        reader = subprocess.run(jail_b.wrap([sys.executable, "-c", code, "read"]), capture_output=True, text=True,
                                timeout=60)
        written = json.loads(writer.communicate(timeout=60)[0])
        uids = {jail_a.uid, jail_b.uid}
    assert set(written.values()) == {"EPERM"}, written
    assert set(json.loads(reader.stdout).values()) == {"EPERM"}, reader.stdout + reader.stderr
    # the host's view: no uid the kernels ran as holds a key (or a keyring) it did not hold before
    after = key_counts()
    assert all(after.get(uid, 0) <= before.get(uid, 0) for uid in uids | {SANDBOX_UID}), (uids, after)
    for folder in ("/tmp", "/dev/shm"):
        for uid in uids - {os.getuid()}:
            owned = subprocess.run(["find", folder, "-xdev", "-uid", str(uid), "-print", "-quit"], capture_output=True,
                                   text=True).stdout
            assert not owned, f"uid {uid} left {owned.strip()} on the host"


@pytest.mark.skipif(SUPPORT.level != "root", reason="as another user every kernel is that user: no uid of its own")
def test_a_kernel_that_uses_up_its_users_counts_leaves_another_kernels_alone(tmp_path):
    """Linux counts inotify instances per uid (fs.inotify.max_user_instances, 128 here): a kernel
    that takes them all while another kernel runs does not leave the other one without."""
    limit = int(Path("/proc/sys/fs/inotify/max_user_instances").read_text())
    hog = f"""
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
fds = [libc.inotify_init() for _ in range({limit} + 8)]
print(sum(fd >= 0 for fd in fds), flush=True)
time.sleep(5)
"""
    other = """
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init()
print("ok" if fd >= 0 else errno.errorcode[ctypes.get_errno()])
"""
    jail_a = KernelJail(SUPPORT, SandboxLimits(), Path(f"/tmp/rdg-test-{os.getpid()}-count-a"))
    jail_b = KernelJail(SUPPORT, SandboxLimits(), Path(f"/tmp/rdg-test-{os.getpid()}-count-b"))
    with jail_a, jail_b:
        hogging = subprocess.Popen(jail_a.wrap([sys.executable, "-c", hog]), stdout=subprocess.PIPE, text=True)
        taken = int(hogging.stdout.readline())
        second = subprocess.run(jail_b.wrap([sys.executable, "-c", other]), capture_output=True, text=True, timeout=60)
        hogging.kill()
        hogging.wait()
    assert taken == limit, taken  # the first kernel did use up its uid's count
    assert second.stdout.strip() == "ok", second.stdout + second.stderr


def test_no_process_shows_the_graders_folders_inside(tmp_path):
    """bwrap's command line (PID 1 inside), the kernel's and every other process's, and their
    environments, name no folder of the grader's: not the jail's, not the released exercise's
    copy, not the judge's; bwrap's own file descriptors are closed before the kernel starts."""
    release, judge = tmp_path / "release" / "data01", tmp_path / "judge"
    release.mkdir(parents=True)
    judge.mkdir()
    code = """
import json, os, subprocess
child = subprocess.Popen(["sleep", "30"])
seen = {}
for pid in os.listdir("/proc"):
    if pid.isdigit():
        for name in ("cmdline", "environ"):
            try:
                seen[f"{pid}/{name}"] = open(f"/proc/{pid}/{name}", "rb").read().decode("utf-8", "replace")
            except OSError as exc:
                seen[f"{pid}/{name}"] = type(exc).__name__
child.kill()
print(json.dumps({"proc": seen, "fds": sorted(os.listdir("/proc/self/fd"))}))
"""
    rc, out, err, jail = _run(tmp_path, code, readonly=[str(release)], judge_dir=str(judge), name="proc")
    assert rc == 0, err
    facts = json.loads(out)
    assert facts["proc"]["1/cmdline"].startswith(shutil.which("bwrap") + "\0--args\0"), facts["proc"]["1/cmdline"]
    shown = "\n".join(facts["proc"].values())
    for secret in (str(jail.base_dir), str(tmp_path), "GRADER_SECRET", "rdg-test"):
        assert secret not in shown, (secret, facts["proc"])
    assert len(facts["fds"]) == 4, facts["fds"]  # 0, 1, 2 and the one listing /proc/self/fd


def test_the_student_package_is_there_and_read_only_and_the_grader_is_not(tmp_path):
    import raydata_course

    package = Path(raydata_course.__file__).resolve().parent
    code = f"""
import importlib.util, os
print(importlib.util.find_spec("raydata_course") is not None)
try:
    import raydata_grader
    print("grader importable")
except ImportError:
    print("no grader")
try:
    open({str(package / "units.py")!r}, "a").write("# changed")
    print("package writable")
except OSError as exc:
    print(type(exc).__name__)
"""
    rc, out, err, _ = _run(tmp_path, code)
    assert rc == 0, err
    words = out.split()
    assert words[:3] == ["True", "no", "grader"] and words[3] in ("PermissionError", "OSError"), out


def test_only_loopback_is_reachable(tmp_path):
    code = """
import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(1)
c = socket.create_connection(s.getsockname(), timeout=2); print("loopback ok")
for host in ("8.8.8.8", "10.255.255.53", "1.1.1.1"):
    try:
        socket.create_connection((host, 53), timeout=2); print("reached", host)
    except OSError as exc:
        print("blocked", host)
"""
    rc, out, err, _ = _run(tmp_path, code)
    assert rc == 0, err
    assert "loopback ok" in out and "reached" not in out


def test_a_detached_daemon_and_shared_memory_end_with_the_jail(tmp_path):
    marker = f"rdg-daemon-{os.getpid()}"
    code = f"""
import os, time
with open("/dev/shm/{marker}", "wb") as f:
    f.write(b"x" * (4 * 1024 * 1024))
with open("/tmp/{marker}", "w") as f:
    f.write("left behind?")
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execvp("sleep", ["sleep", "600", "{marker}"])
    os._exit(0)
time.sleep(0.5)
print("forked")
"""
    rc, out, err, jail = _run(tmp_path, code)
    assert rc == 0 and "forked" in out, err
    time.sleep(0.5)
    left = [p.pid for p in psutil.process_iter(["cmdline"]) if marker in " ".join(p.info["cmdline"] or [])]
    assert not left, f"the daemon outlived its jail: {left}"
    assert not Path(f"/dev/shm/{marker}").exists() and not Path(f"/tmp/{marker}").exists()
    assert not jail.base_dir.exists() and jail.cgroup_dirs == []


@pytest.mark.skipif(not SUPPORT.cgroups, reason="needs writable cgroups (root)")
def test_memory_counts_shared_memory_and_is_bounded(tmp_path):
    code = """
import os
chunk = b"x" * (16 * 1024 * 1024)
with open("/dev/shm/fill", "wb") as f:
    for i in range(64):  # 1 GiB of shared memory, over the 256 MiB limit
        f.write(chunk); f.flush()
print("wrote it all")
"""
    rc, out, err, jail = _run(tmp_path, code, SandboxLimits(memory_bytes=256 * MiB, shm_bytes=2048 * MiB))
    assert "wrote it all" not in out
    assert rc != 0 and jail.oom_kills >= 1, (rc, out, err)


@pytest.mark.skipif(not SUPPORT.cgroups, reason="needs writable cgroups (root)")
def test_processes_are_bounded(tmp_path):
    code = """
import os, time
kids = 0
try:
    for _ in range(500):
        pid = os.fork()
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        kids += 1
except OSError as exc:
    print("fork refused after", kids, type(exc).__name__)
"""
    rc, out, err, _ = _run(tmp_path, code, SandboxLimits(pids_max=64), timeout_s=120)
    assert "fork refused after" in out, (out, err)
    assert int(out.split("after")[1].split()[0]) < 64


def test_file_size_and_scratch_space_are_bounded(tmp_path):
    code = """
import errno
for path in ("/home/student/big", "/tmp/big"):
    try:
        with open(path, "wb") as f:
            for _ in range(64):
                f.write(b"x" * (1024 * 1024)); f.flush()
        print(path, "written")
    except OSError as exc:
        print(path, errno.errorcode.get(exc.errno))
"""
    rc, out, err, _ = _run(tmp_path, code, SandboxLimits(file_bytes=16 * MiB, home_bytes=8 * MiB, tmp_bytes=32 * MiB))
    assert rc == 0, err
    assert "/home/student/big ENOSPC" in out and "/tmp/big EFBIG" in out, out


def test_a_sandboxed_kernel_runs_is_interrupted_and_leaves_nothing(tmp_path):
    """The kernel itself, as the grader starts it: uid 65534, interrupted by message at the
    per-cell limit (a signal would reach bubblewrap), and nothing left once it ends."""
    import nbformat
    from nbclient import NotebookClient
    from traitlets.config import Config

    from raydata_course.layout import KERNEL_NAME
    from raydata_grader.kernel_manager import SANDBOX_IPC_DIR, SandboxedKernelManager

    marker = f"rdg-kernel-daemon-{os.getpid()}"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in (
        "import os; print(os.getuid())",
        "import time\nwhile True:\n    time.sleep(0.1)",
        "print('still alive')",
        f"open('/dev/shm/{marker}', 'wb').write(b'x' * 1024)\n"
        "if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        f"        os.execvp('sleep', ['sleep', '600', '{marker}'])\n    os._exit(0)\n"
        "time.sleep(0.5); print('daemon started')",
        # the connection folder is the one host folder the kernel wrote to (at start-up only)
        "import sys\nfolder = os.path.dirname(sys.argv[sys.argv.index('-f') + 1])\n"
        "for target in (os.path.join(folder, 'big'), sys.argv[sys.argv.index('-f') + 1]):\n"
        "    try:\n        open(target, 'ab').write(b'x' * 1024)\n        print('wrote')\n"
        "    except PermissionError:\n        print('refused')",
        # what every process inside shows of its command line and environment
        "for pid in [p for p in os.listdir('/proc') if p.isdigit()]:\n    for name in ('cmdline', 'environ'):\n"
        "        try:\n            print(pid, name, open(f'/proc/{pid}/{name}', 'rb').read().decode().replace('\\0', ' '))\n"
        "        except OSError as exc:\n            print(pid, name, type(exc).__name__)",
    )])
    jail = KernelJail(SUPPORT, SandboxLimits(), Path(f"/tmp/rdg-test-{os.getpid()}-kernel"))
    with jail:
        config = Config()
        config.SandboxedKernelManager.jail_prefix = jail.wrap([])
        config.SandboxedKernelManager.ipc_dir = str(jail.ipc_dir)
        config.SandboxedKernelManager.sandbox_uid = jail.uid if SUPPORT.level == "root" else -1
        client = NotebookClient(nb, kernel_name=KERNEL_NAME, timeout=10, allow_errors=True, config=config,
                                kernel_manager_class=SandboxedKernelManager, interrupt_on_timeout=True)
        client.execute()
    outputs = [[o.get("text", o.get("ename", "")) for o in c.outputs] for c in nb.cells]
    assert outputs[0] == [f"{jail.uid}\n"], outputs
    assert any("KeyboardInterrupt" in o or "CellTimeoutError" in o for o in outputs[1]), outputs[1]
    assert outputs[2] == ["still alive\n"] and "daemon started\n" in outputs[3], outputs
    if SUPPORT.level == "root":  # under a user namespace the kernel is the grader's own user
        assert "".join(outputs[4]) == "refused\nrefused\n", outputs[4]
    shown = "".join(outputs[5])
    assert f"-f {SANDBOX_IPC_DIR}/kernel.json" in shown and str(jail.base_dir) not in shown, shown
    time.sleep(0.5)
    assert not [p.pid for p in psutil.process_iter(["cmdline"]) if marker in " ".join(p.info["cmdline"] or [])]
    assert not Path(f"/dev/shm/{marker}").exists() and not jail.base_dir.exists()


def test_remove_tree_removes_a_tree_deeper_than_the_recursion_limit(tmp_path):
    """A kernel can nest folders past ``shutil.rmtree``'s recursion; the clean-up still removes them."""
    from raydata_grader.sandbox import remove_tree

    top = tmp_path / "deep"
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        os.mkdir("deep", dir_fd=fd)
        here = os.open("deep", os.O_RDONLY, dir_fd=fd)
        for _ in range(sys.getrecursionlimit() + 200):
            os.mkdir("d", dir_fd=here)
            nxt = os.open("d", os.O_RDONLY, dir_fd=here)
            os.close(here)
            here = nxt
        with open(os.open("leftover", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=here), "wb") as f:
            f.write(b"x" * 1024)
        os.close(here)
    finally:
        os.close(fd)
    with pytest.raises(RecursionError):
        shutil.rmtree(top)
    remove_tree(top)
    assert not top.exists()
    remove_tree(top)  # a missing folder is not an error
