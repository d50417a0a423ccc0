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
from raydata_course.layout import REQUIRE_SANDBOX_ENV
from raydata_course.units import MiB

ROOT = Path(__file__).resolve().parents[1]
SUPPORT = probe()
REQUIRED = os.environ.get(REQUIRE_SANDBOX_ENV) == "1"

if not SUPPORT.available:
    if REQUIRED:
        raise RuntimeError(f"{REQUIRE_SANDBOX_ENV}=1 but this machine cannot sandbox: {SUPPORT.why}")
    pytest.skip(f"no sandbox on this machine: {SUPPORT.why}", allow_module_level=True)


def _run(tmp_path, code: str, limits: SandboxLimits | None = None, timeout_s: float = 60, name: str = "jail"):
    """Run ``code`` with the kernel's Python inside a jail; return (returncode, stdout, stderr, jail)."""
    jail = KernelJail(SUPPORT, limits or SandboxLimits(), Path(f"/tmp/rdg-test-{os.getpid()}-{name}"))
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
    rc, out, err, _ = _run(tmp_path, code)
    assert rc == 0, err
    facts = json.loads(out)
    assert (facts["uid"], facts["euid"], facts["gid"]) == (SANDBOX_UID,) * 3
    assert all(v in ("FileNotFoundError", "PermissionError") for v in facts["seen"].values()), facts["seen"]
    assert all(line.split()[1] == "0000000000000000" for line in facts["caps"]), facts["caps"]
    assert facts["secret"] is None and "GRADER_SECRET" not in facts["env"]
    assert "raydata_grader" not in facts["ppid_cmd"]  # the grader's processes are outside the PID namespace


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
    from raydata_grader.kernel_sandbox import SandboxedKernelManager

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
    )])
    jail = KernelJail(SUPPORT, SandboxLimits(), Path(f"/tmp/rdg-test-{os.getpid()}-kernel"))
    with jail:
        config = Config()
        config.SandboxedKernelManager.jail_prefix = jail.wrap([])
        config.SandboxedKernelManager.ipc_dir = str(jail.ipc_dir)
        config.SandboxedKernelManager.sandbox_uid = SANDBOX_UID if SUPPORT.level == "root" else -1
        client = NotebookClient(nb, kernel_name=KERNEL_NAME, timeout=10, allow_errors=True, config=config,
                                kernel_manager_class=SandboxedKernelManager, interrupt_on_timeout=True)
        client.execute()
    outputs = [[o.get("text", o.get("ename", "")) for o in c.outputs] for c in nb.cells]
    assert outputs[0] == [f"{SANDBOX_UID}\n"], outputs
    assert any("KeyboardInterrupt" in o or "CellTimeoutError" in o for o in outputs[1]), outputs[1]
    assert outputs[2] == ["still alive\n"] and "daemon started\n" in outputs[3], outputs
    if SUPPORT.level == "root":  # under a user namespace the kernel is the grader's own user
        assert "".join(outputs[4]) == "refused\nrefused\n", outputs[4]
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
