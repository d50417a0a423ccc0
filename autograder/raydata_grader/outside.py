"""A graded kernel's sandbox, seen from the grader's side of it (grader only, Linux).

What a student's process computes, it can fake; what the host sees of the sandbox, it cannot.
A :class:`SandboxView` is the judge's window onto one notebook's sandbox
(:mod:`raydata_grader.kernel_sandbox`), and each observation names where it comes from:

- **processes**: every process in the sandbox (its cgroup's ``cgroup.procs`` where the grader
  made one, else the grader's own descendants in another mount namespace) and its title from
  ``/proc/<pid>/cmdline``: Ray names each worker after what it runs (``ray::SplitCoordinator``,
  ``ray::MapWorker(MapBatches(Predictor))``, ``ray::ReadRange->MapBatches(decode)``);
- **scratch space**: the bytes in use in the sandbox's private ``/dev/shm`` and ``/tmp``
  (``statvfs`` through ``/proc/<pid>/root``). Ray's object store is one file in ``/dev/shm``
  whose pages are touched as objects are first placed and stay (Ray's allocator reuses freed
  space rather than returning it), so its use is the store's high-water mark since Ray
  started, fragmentation included, and drops to 0 when Ray shuts down. Objects spilled to disk
  and objects allocated outside the store (Ray's disk fallback) are files under ``/tmp``;
- **CPU time**: the cgroup's ``cpuacct`` usage, where the grader made one;
- **files**: a path inside the sandbox as the host reaches it (for :mod:`.file_events`).

:meth:`SandboxView.watch` samples processes and scratch space in a thread while a check runs
something in the kernel.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from raydata_grader.file_events import process_title

__all__ = ["SandboxView", "Watch", "SAMPLE_INTERVAL_S"]

#: Seconds between two samples of a :class:`Watch`.
SAMPLE_INTERVAL_S = 0.1


def _children() -> dict[int, list[int]]:
    """``{ppid: [pid, ...]}`` of every process the host shows."""
    tree: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry.name}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def _mount_ns(pid: int | str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return None


class SandboxView:
    """One sandbox's processes, scratch space and files, read from the host.

    Args:
        cgroup_dirs: the sandbox's cgroup folders (``KernelJail.cgroup_dirs``); empty where
            the grader made none.
        ancestor_pid: without cgroups, the sandbox's processes are this process's
            descendants that live in another mount namespace (default: the grader's own
            process, which in a grading job holds one notebook's kernel only).
    """

    def __init__(self, cgroup_dirs: Iterable[str | os.PathLike] = (), ancestor_pid: int | None = None):
        self.cgroup_dirs = [Path(d) for d in cgroup_dirs]
        self.ancestor_pid = ancestor_pid if ancestor_pid is not None else os.getpid()
        self._own_ns = _mount_ns("self")
        self._inside: int | None = None

    # -- processes
    def pids(self) -> set[int]:
        """Every process in the sandbox now (the bubblewrap launcher outside it included, with cgroups)."""
        found: set[int] = set()
        for folder in self.cgroup_dirs:
            try:
                found |= {int(p) for p in (folder / "cgroup.procs").read_text().split()}
            except (OSError, ValueError):
                continue
        if found or self.cgroup_dirs:
            return found
        tree, stack = _children(), [self.ancestor_pid]
        while stack:
            for child in tree.get(stack.pop(), []):
                if _mount_ns(child) not in (None, self._own_ns):
                    found.add(child)
                stack.append(child)
        return found

    def inside_pid(self) -> int | None:
        """A live process inside the sandbox's mount namespace, or None when none is running."""
        if self._inside is not None and _mount_ns(self._inside) not in (None, self._own_ns):
            return self._inside
        for pid in sorted(self.pids()):
            if _mount_ns(pid) not in (None, self._own_ns):
                self._inside = pid
                return pid
        return None

    def titles(self) -> dict[int, str]:
        """``{pid: title}`` of the sandbox's processes (``ray::...`` for Ray's workers)."""
        return {pid: t for pid in self.pids() if (t := process_title(pid))}

    # -- files and scratch space
    def host_path(self, inside: str) -> Path | None:
        """Where the host reaches the sandbox's ``inside`` path, or None when no process is inside."""
        pid = self.inside_pid()
        if pid is None:
            return None
        return Path(f"/proc/{pid}/root") / inside.lstrip("/")

    def used_bytes(self, mount: str) -> int | None:
        """Bytes in use in the sandbox's ``mount`` (``/dev/shm``, ``/tmp``), or None if unreadable."""
        path = self.host_path(mount)
        if path is None:
            return None
        try:
            st = os.statvfs(path)
        except OSError:
            return None
        return (st.f_blocks - st.f_bfree) * st.f_frsize

    def cpu_seconds(self) -> float | None:
        """CPU time of every process the sandbox ever ran, in seconds (None without a cpuacct cgroup)."""
        for folder in self.cgroup_dirs:
            for name, scale in (("cpuacct.usage", 1e-9), ("cpu.stat", 1e-6)):
                try:
                    text = (folder / name).read_text()
                except OSError:
                    continue
                if name == "cpu.stat":
                    fields = dict(line.split() for line in text.splitlines() if " " in line)
                    if "usage_usec" in fields:
                        return int(fields["usage_usec"]) * scale
                    continue
                return int(text.strip()) * scale
        return None

    def watch(self, interval_s: float = SAMPLE_INTERVAL_S) -> "Watch":
        """A :class:`Watch` of this sandbox (use it as a context manager)."""
        return Watch(self, interval_s)


@dataclass
class Watch:
    """Samples a sandbox while a check runs something in its kernel.

    Attributes:
        shm_start_bytes, tmp_start_bytes: ``/dev/shm`` and ``/tmp`` in use at the start.
        shm_peak_bytes, tmp_peak_bytes: the most in use at any sample, the last one included.
        titles: ``{pid: every title it showed}`` for the processes seen.
        start_titles: ``{pid: title}`` of the sandbox's processes at the start.
        wall_s: seconds from the start to the end, timed here.
        cpu_s: the sandbox's CPU seconds over the watch (None without a cpuacct cgroup).
        samples: samples taken.
    """

    view: SandboxView
    interval_s: float = SAMPLE_INTERVAL_S
    shm_start_bytes: int | None = None
    tmp_start_bytes: int | None = None
    shm_peak_bytes: int | None = None
    tmp_peak_bytes: int | None = None
    titles: dict[int, set[str]] = field(default_factory=dict)
    start_titles: dict[int, str] = field(default_factory=dict)
    wall_s: float = 0.0
    cpu_s: float | None = None
    samples: int = 0

    def __post_init__(self):
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _sample(self) -> None:
        shm, tmp = self.view.used_bytes("/dev/shm"), self.view.used_bytes("/tmp")
        titles = self.view.titles()
        with self._lock:
            if shm is not None:
                self.shm_peak_bytes = max(self.shm_peak_bytes or 0, shm)
            if tmp is not None:
                self.tmp_peak_bytes = max(self.tmp_peak_bytes or 0, tmp)
            for pid, title in titles.items():
                self.titles.setdefault(pid, set()).add(title)
            self.samples += 1

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def __enter__(self) -> "Watch":
        self._t0 = time.perf_counter()
        self._cpu0 = self.view.cpu_seconds()
        self.shm_start_bytes = self.view.used_bytes("/dev/shm")
        self.tmp_start_bytes = self.view.used_bytes("/tmp")
        self.start_titles = self.view.titles()
        self._sample()
        self._thread = threading.Thread(target=self._loop, name="sandbox-watch", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._sample()
        self.wall_s = time.perf_counter() - self._t0
        cpu1 = self.view.cpu_seconds()
        self.cpu_s = None if cpu1 is None or self._cpu0 is None else cpu1 - self._cpu0

    # -- what was seen
    def pids_titled(self, prefix: str | tuple[str, ...], new_only: bool = False) -> set[int]:
        """Processes that showed a title starting with ``prefix`` (``"ray::SplitCoordinator"``, or
        any of a tuple of prefixes);
        with ``new_only``, not those that already showed it when the watch began (a Ray worker
        that was idle then and took the title since counts as new)."""
        return {pid for pid, titles in self.titles.items() if any(t.startswith(prefix) for t in titles)
                and not (new_only and self.start_titles.get(pid, "").startswith(prefix))}

    def shm_growth_bytes(self) -> int | None:
        """How far ``/dev/shm`` rose over its start (None if it could not be read)."""
        if self.shm_start_bytes is None or self.shm_peak_bytes is None:
            return None
        return max(self.shm_peak_bytes - self.shm_start_bytes, 0)

    def tmp_growth_bytes(self) -> int | None:
        """How far ``/tmp`` rose over its start (None if it could not be read)."""
        if self.tmp_start_bytes is None or self.tmp_peak_bytes is None:
            return None
        return max(self.tmp_peak_bytes - self.tmp_start_bytes, 0)
