"""A graded kernel's cgroup: bounds on memory and processes, and a sure way to end them all.

The grader (as root) makes one cgroup per graded notebook, in the memory and pids
controllers of cgroup v1 (``/sys/fs/cgroup/memory/<name>``, ``/sys/fs/cgroup/pids/<name>``)
or in the unified hierarchy of cgroup v2 (``/sys/fs/cgroup/<name>``). The kernel's launcher
joins it before it starts bubblewrap, so the kernel, Ray and everything they start are in it:

- **memory**: ``memory.limit_in_bytes`` (v1) or ``memory.max`` (v2) counts anonymous memory,
  tmpfs and shared memory (Ray's object store in the sandbox's ``/dev/shm``) together; over
  it, the kernel's OOM killer ends a process of the group (:meth:`Cgroup.oom_kills` counts);
- **processes**: ``pids.max`` bounds processes and threads together;
- **CPU**, where the controller can be had: the group is scheduled as one against the other
  groups (v1 ``cpu`` hierarchy, v2 ``cpu`` controller; equal weights by default), so a kernel
  that spins a thousand threads gets no more of the machine than one that spins two, and a
  quota caps it at ``cpus`` cores (``cpu.cfs_quota_us`` / ``cpu.max``): several notebooks
  graded at once on one machine cannot starve one another;
- **CPU time**: the group's CPU usage (``cpuacct.usage`` in v1's ``cpuacct`` hierarchy, where
  it is mounted; ``cpu.stat``'s ``usage_usec`` in v2), read when the group is stopped
  (:attr:`Cgroup.cpu_seconds_at_stop`): the CPU the kernel, Ray and everything they started
  used, daemons that were never waited for included;
- **the end**: :meth:`Cgroup.stop` kills every process still listed in ``cgroup.procs`` and
  removes the group.

A group's name carries the pid of the grader process that made it
(``raydata-grader-<pid>-<random>``), so that the groups of a grader that was killed before
it could stop them can be found (:func:`stale_cgroups`) and swept
(:func:`raydata_grader.scratch.sweep`).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Callable, Iterator

__all__ = ["CGROUP_ROOT", "CGROUP_PREFIX", "writable_version", "Cgroup", "stale_cgroups"]

CGROUP_ROOT = Path("/sys/fs/cgroup")
#: Every cgroup the grader makes is named ``<prefix>-<owner pid>-<random>``.
CGROUP_PREFIX = "raydata-grader"


def writable_version() -> str:
    """``"v1"`` or ``"v2"`` when this process may make memory and pids cgroups, else ``""``."""
    if os.geteuid() != 0:
        return ""
    probe_name = f"{CGROUP_PREFIX}-probe-{os.getpid()}"
    if (CGROUP_ROOT / "memory").is_dir() and (CGROUP_ROOT / "pids").is_dir():
        folders = [CGROUP_ROOT / "memory" / probe_name, CGROUP_ROOT / "pids" / probe_name]
        version = "v1"
    else:
        controllers = CGROUP_ROOT / "cgroup.controllers"
        if not (controllers.is_file() and {"memory", "pids"} <= set(controllers.read_text().split())):
            return ""
        folders, version = [CGROUP_ROOT / probe_name], "v2"
    try:
        for folder in folders:
            folder.mkdir(exist_ok=True)
            folder.rmdir()
    except OSError:
        return ""
    return version


class Cgroup:
    """One notebook's cgroup (made at construction).

    Args:
        version: ``"v1"`` or ``"v2"`` (:func:`writable_version`).
        name: the cgroup's name (unique per notebook).
        memory_bytes: the memory limit, in bytes (shared memory and tmpfs included).
        pids_max: most processes and threads at once.
        cpus: most cores the group may use at once (None: no quota; the group is still
            scheduled as one where the CPU controller can be had).

    Raises:
        OSError: if the cgroup cannot be made (the grader is not root, say).
    """

    #: CPU seconds the group had used when :meth:`stop` killed what was left (None: unknown).
    cpu_seconds_at_stop: float | None = None

    def __init__(self, version: str, name: str, memory_bytes: int, pids_max: int, cpus: float | None = None):
        self.version = version
        if version == "v1":
            memory, pids = CGROUP_ROOT / "memory" / name, CGROUP_ROOT / "pids" / name
            for d in (memory, pids):
                d.mkdir(exist_ok=True)
            self.dirs = [memory, pids]
            for controller in ("cpuacct", "cpu"):  # optional: CPU accounting, CPU scheduling and quota
                folder = CGROUP_ROOT / controller / name
                if (CGROUP_ROOT / controller).is_dir() and folder.resolve() not in {d.resolve() for d in self.dirs}:
                    try:
                        folder.mkdir(exist_ok=True)
                        self.dirs.append(folder)
                    except OSError:
                        pass
            cpu_dir = CGROUP_ROOT / "cpu" / name
            if cpus and (cpu_dir / "cpu.cfs_quota_us").exists():
                try:
                    period = int((cpu_dir / "cpu.cfs_period_us").read_text())
                    (cpu_dir / "cpu.cfs_quota_us").write_text(str(int(cpus * period)))
                except (OSError, ValueError):
                    pass
            (memory / "memory.limit_in_bytes").write_text(str(memory_bytes))
            swap = memory / "memory.memsw.limit_in_bytes"
            if swap.exists():
                try:
                    swap.write_text(str(memory_bytes))
                except OSError:
                    pass  # swap accounting off: the limit covers memory alone
            (pids / "pids.max").write_text(str(pids_max))
        else:
            group = CGROUP_ROOT / name
            group.mkdir(exist_ok=True)
            self.dirs = [group]
            (group / "memory.max").write_text(str(memory_bytes))
            if (group / "memory.swap.max").exists():
                (group / "memory.swap.max").write_text("0")
            (group / "pids.max").write_text(str(pids_max))
            if cpus and (group / "cpu.max").exists():  # the cpu controller is on for the root's children
                try:
                    (group / "cpu.max").write_text(f"{int(cpus * 100_000)} 100000")
                except OSError:
                    pass

    @classmethod
    def existing(cls, version: str, dirs: list[Path]) -> "Cgroup":
        """A handle on a cgroup that already exists (``dirs``: its folder in each hierarchy); nothing is changed."""
        group = cls.__new__(cls)
        group.version, group.dirs = version, list(dirs)
        return group

    @property
    def procs_files(self) -> list[str]:
        """The ``cgroup.procs`` files a process writes its pid into to join (one per hierarchy)."""
        return [str(d / "cgroup.procs") for d in self.dirs]

    def pids(self) -> set[int]:
        """Every process now in the cgroup."""
        found: set[int] = set()
        for path in self.procs_files:
            try:
                found |= {int(x) for x in Path(path).read_text().split()}
            except OSError:
                pass
        return found

    def memory_bytes(self) -> tuple[int, int]:
        """(current, peak) memory of the cgroup, in bytes ((0, 0) if unreadable)."""
        memory = self.dirs[0]
        try:
            if self.version == "v1":
                return (int((memory / "memory.usage_in_bytes").read_text()),
                        int((memory / "memory.max_usage_in_bytes").read_text()))
            current = int((memory / "memory.current").read_text())
            peak_file = memory / "memory.peak"
            return current, int(peak_file.read_text()) if peak_file.exists() else current
        except (OSError, ValueError):
            return 0, 0

    def cpu_seconds(self) -> float | None:
        """CPU time (user + system) the group's processes have used, in seconds; None if not accounted."""
        try:
            if self.version == "v1":
                acct = next((d for d in self.dirs if d.parent.name == "cpuacct"), None)
                return int((acct / "cpuacct.usage").read_text()) / 1e9 if acct is not None else None
            for line in (self.dirs[0] / "cpu.stat").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "usage_usec":
                    return int(value) / 1e6
        except (OSError, ValueError):
            pass
        return None

    def oom_kills(self) -> int:
        """Processes the kernel's OOM killer ended in this cgroup."""
        name = "memory.oom_control" if self.version == "v1" else "memory.events"
        try:
            for line in (self.dirs[0] / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def stop(self, timeout_s: float = 10.0) -> int:
        """Kill every process in the cgroup (again until none is left), then remove it.

        Returns:
            Kills sent.
        """
        killed = 0
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            pids = self.pids()
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
                except OSError:
                    pass
            time.sleep(0.1)
        self.cpu_seconds_at_stop = self.cpu_seconds()
        for d in self.dirs:
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)
        return killed


def stale_cgroups(is_stale: Callable[[str], bool]) -> Iterator[Cgroup]:
    """The grader's cgroups (named ``<prefix>-...``) whose name ``is_stale`` accepts, in either version.

    Nothing is yielded where cgroups are not writable (not root, no memory and pids controllers).
    """
    version = writable_version()
    if not version:
        return
    roots = ([CGROUP_ROOT / c for c in ("memory", "pids", "cpuacct", "cpu")] if version == "v1" else [CGROUP_ROOT])
    names: dict[str, list[Path]] = {}
    for root in roots:
        try:
            entries = list(os.scandir(root))
        except OSError:
            continue
        for entry in entries:
            if entry.name.startswith(CGROUP_PREFIX + "-") and entry.is_dir(follow_symlinks=False):
                folders = names.setdefault(entry.name, [])
                if Path(entry.path).resolve() not in {f.resolve() for f in folders}:  # cpu,cpuacct: one folder
                    folders.append(Path(entry.path))
    for name, dirs in sorted(names.items()):
        if is_stale(name):
            yield Cgroup.existing(version, dirs)
