"""What the judge sees of a sandbox from the host: scratch space, processes, file opens, writers.

A small program runs in a real sandbox (:class:`raydata_grader.kernel_sandbox.KernelJail`, as a
graded kernel does) and does, step by step, what a check observes: it fills ``/dev/shm`` and
``/tmp``, renames a process, opens a file again and again, and writes files itself and from a
child process. The host's view must see each, whatever the program says about itself.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from raydata_course.layout import REQUIRE_SANDBOX_ENV
from raydata_course.units import MiB
from raydata_grader.file_events import OpenCounter, WriterWatch
from raydata_grader.kernel_sandbox import KernelJail, SandboxLimits, probe
from raydata_grader.outside import SandboxView

SUPPORT = probe()
if not SUPPORT.available:
    if os.environ.get(REQUIRE_SANDBOX_ENV) == "1":
        raise RuntimeError(f"{REQUIRE_SANDBOX_ENV}=1 but this machine cannot sandbox: {SUPPORT.why}")
    pytest.skip(f"no sandbox on this machine: {SUPPORT.why}", allow_module_level=True)

#: The program in the sandbox: each step waits for a line on stdin, then says "done".
PROGRAM = r'''
import os, subprocess, sys
def step():
    sys.stdout.write("ready\n"); sys.stdout.flush(); sys.stdin.readline()
os.makedirs("/tmp/out", exist_ok=True)
open("/tmp/model.bin", "wb").write(b"x" * 1000)
step()                                   # 1: 24 MiB into /dev/shm, 8 MiB into /tmp, a process titled like Ray's
open("/dev/shm/store", "wb").write(b"x" * (24 << 20))
open("/tmp/spill", "wb").write(b"x" * (8 << 20))
pretender = subprocess.Popen(["ray::Pretend", "-c", "import time; time.sleep(30)"], executable=sys.executable)
step()                                   # 2: three loads of the model file
for _ in range(3):
    with open("/tmp/model.bin", "rb") as f:
        f.read()
step()                                   # 3: a file written here, one by a child process
open("/tmp/out/mine.parquet", "wb").write(b"PAR1")
subprocess.run([sys.executable, "-c", "open('/tmp/out/child.parquet', 'wb').write(b'PAR1')"], check=True)
step()
'''


@pytest.fixture()
def sandboxed():
    jail = KernelJail(SUPPORT, SandboxLimits(), Path(f"/tmp/rdg-test-{os.getpid()}-outside"))
    with jail:
        proc = subprocess.Popen(jail.wrap([sys.executable, "-c", PROGRAM]), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)

        def next_step():
            proc.stdin.write("go\n")
            proc.stdin.flush()
            assert proc.stdout.readline() == "ready\n"

        assert proc.stdout.readline() == "ready\n"
        try:
            yield SandboxView(jail.cgroup_dirs), next_step, proc
        finally:
            proc.kill()
            proc.wait()


def test_the_host_sees_scratch_space_processes_opens_and_writers(sandboxed):
    view, next_step, proc = sandboxed
    assert view.inside_pid() is not None and view.inside_pid() != os.getpid()
    assert view.host_path("/tmp/model.bin").read_bytes() == b"x" * 1000

    with view.watch() as watch:
        next_step()
        # The step's writes and the child's start can all fall between two of the watch's
        # samples; the child lives 30 s, so keep the watch open until the host lists it (the
        # watch samples on its own thread meanwhile), for at most 5 s.
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not any(
                t.startswith("ray::Pretend") for t in view.titles().values()):
            time.sleep(0.05)
    assert watch.shm_growth_bytes() >= 24 * MiB and watch.tmp_growth_bytes() >= 8 * MiB
    assert watch.pids_titled("ray::Pretend", new_only=True), watch.titles  # a title is only a title

    with OpenCounter(view.host_path("/tmp/model.bin")) as opens:
        next_step()
    assert opens.opens == 3

    writers = WriterWatch(view.host_path("/tmp/out")).start()
    if writers is None:  # fanotify needs root
        assert os.geteuid() != 0
        return
    next_step()
    written = {Path(w.path).name: w.title for w in writers.stop()}
    assert set(written) == {"mine.parquet", "child.parquet"}, written
    assert written["child.parquet"].startswith(sys.executable) and "-c" in written["child.parquet"]
    assert not any(t.startswith("ray::") for t in written.values()), written
    if view.cgroup_dirs:
        assert view.cpu_seconds() is not None and view.cpu_seconds() > 0
