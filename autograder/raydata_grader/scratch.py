"""The grader's scratch on a machine: folders and cgroups named for their owner, swept when it is gone.

Every folder a grading job makes under ``/tmp`` (its private course, the judge's and the
kernel's folder, the Ray runtime of an unsandboxed kernel) is named
``rdg-<owner pid>-<random>`` and holds a lock file, ``.owner``, that its owner keeps locked
(``flock``) for as long as it runs; every cgroup is named
``raydata-grader-<owner pid>-<random>`` (:mod:`.cgroups`). The owner removes them when its
job ends (:func:`remove_owned`). An owner that is killed (a Ray worker on a node whose raylet
died, a grader stopped with ``kill -9``) cannot, and the process it started dies with it
(:func:`raydata_grader.sandbox.run_limited` sets the parent-death signal, and the kernel's
``bwrap --die-with-parent`` does the same inside), so what is left is files and empty
cgroups. :func:`sweep` removes those of owners that no longer run; every job calls it before
it starts, on the machine it runs on, and a grading run calls it when it ends.

Only names of this form are touched. A folder is its owner's while its lock is held (the
kernel releases a dead process's locks, whatever PID namespace it ran in, and a reused pid
holds no lock); a folder without a lock file falls back to its owner's pid. A cgroup is its
owner's while that pid runs (a pid reused by an unrelated process keeps a dead owner's
cgroup until that process ends: a leak in the safe direction).
"""

from __future__ import annotations

import fcntl
import os
import re
import tempfile
import threading
from pathlib import Path

import psutil

from raydata_grader.cgroups import CGROUP_PREFIX, stale_cgroups
from raydata_grader.sandbox import remove_tree

__all__ = ["SCRATCH_PREFIX", "LOCK_NAME", "owned_temp_dir", "remove_owned", "owner_pid", "sweep"]

#: Every scratch folder of the grader is ``/tmp/<prefix>-<owner pid>-<random>``.
SCRATCH_PREFIX = "rdg"
_OWNED = re.compile(rf"^{SCRATCH_PREFIX}-(\d+)-[A-Za-z0-9_]+$")
#: The lock file in each owned folder.
LOCK_NAME = ".owner"
#: The open lock files of this process's folders, by folder.
_HELD: dict[str, int] = {}
_HELD_LOCK = threading.Lock()


def owned_temp_dir(tag: str = "", parent: str = "/tmp") -> Path:
    """A new private folder (mode 0700) ``<parent>/rdg-<this pid>-<tag><random>``, its lock held.

    Kept short on purpose: Unix socket paths (Ray's, the kernel's, the judge's) live below
    such folders, and Linux caps them at 107 bytes. Remove it with :func:`remove_owned`,
    which also lets go of the lock.
    """
    folder = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}-{os.getpid()}-{tag}", dir=parent))
    fd = os.open(folder / (LOCK_NAME + ".new"), os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.rename(folder / (LOCK_NAME + ".new"), folder / LOCK_NAME)  # only ever seen locked
    with _HELD_LOCK:
        _HELD[str(folder)] = fd
    return folder


def remove_owned(folder: str | os.PathLike) -> None:
    """Remove a folder of :func:`owned_temp_dir`, and close its lock (a missing folder is not an error)."""
    remove_tree(folder)
    with _HELD_LOCK:
        fd = _HELD.pop(str(folder), None)
    if fd is not None:
        os.close(fd)


def _lock_free(lock: Path) -> bool | None:
    """True when no process holds ``lock``; False when one does; None when there is no lock file."""
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError:
        return False  # not ours to judge (a link, no permission): leave the folder alone
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def owner_pid(name: str) -> int | None:
    """The owner's pid in a scratch folder's or cgroup's name, or None if it is not one of ours.

    Examples:
        >>> owner_pid("rdg-4242-job_x1y2"), owner_pid("raydata-grader-4242-abcd"), owner_pid("rdg-x1y2")
        (4242, 4242, None)
    """
    if name.startswith(CGROUP_PREFIX + "-"):
        name = SCRATCH_PREFIX + name[len(CGROUP_PREFIX):]
    match = _OWNED.match(name)
    return int(match.group(1)) if match else None


def _gone(pid: int) -> bool:
    return pid != os.getpid() and not psutil.pid_exists(pid)


def sweep(parent: str = "/tmp") -> list[str]:
    """Remove the grader's folders under ``parent`` and its cgroups whose owner no longer runs.

    A cgroup that still holds processes (an owner killed so fast that its kernel's
    parent-death signal has not yet landed) has them killed first.

    Returns:
        What was removed (paths), for the log.
    """
    removed = []
    try:
        entries = list(os.scandir(parent))
    except OSError:
        entries = []
    for entry in entries:
        pid = owner_pid(entry.name)
        if pid is None or not entry.is_dir(follow_symlinks=False):
            continue
        free = _lock_free(Path(entry.path) / LOCK_NAME)
        if free or (free is None and _gone(pid)):
            remove_tree(entry.path)
            removed.append(entry.path)
    for group in stale_cgroups(lambda name: (pid := owner_pid(name)) is not None and _gone(pid)):
        group.stop()
        removed.extend(str(d) for d in group.dirs)
    return removed
