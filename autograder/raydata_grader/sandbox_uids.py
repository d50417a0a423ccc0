"""A user id of its own for every graded kernel that runs at once (grader as root only).

Linux keeps some state per user id, across every namespace the grader makes: the kernel
keyring (a key added by one process of a uid can be read by the next one, minutes or runs
later) and the per-user counts (keys, pipe buffer pages, inotify instances, user namespaces,
POSIX message queue bytes). Kernels that share a uid share all of it, and one can fill a count
that another then lacks. So, as root, each kernel gets a uid of its own for as long as it runs,
leased from :data:`SANDBOX_UID_BASE` + 0 ... :data:`SANDBOX_UID_SLOTS` - 1: above the ranges
that user databases, systemd's dynamic users (61184-65519) and systemd-nspawn's containers
(up to 0x6FFFFFFF) use, and below 2**31, which some programs read as signed.

A lease is a lock (``flock``) on the file ``<lock folder>/<uid>``, held by the grading process
for as long as its kernel runs: a second grader, another Ray worker on the same machine or a
test all see it, and the lock goes with its process, however that ends. A uid that some
process still runs as, or that still holds keys (``/proc/key-users``), is never leased.
"""

from __future__ import annotations

import fcntl
import os
import random
import stat
from dataclasses import dataclass
from pathlib import Path

import psutil

__all__ = ["SANDBOX_UID_BASE", "SANDBOX_UID_SLOTS", "UID_LOCK_DIR", "UidLease", "UidsExhausted", "lease_uid",
           "key_counts", "uids_with_keys"]

#: The first uid leased to a kernel.
SANDBOX_UID_BASE = 0x70000000
#: How many uids may be leased at once on one machine.
SANDBOX_UID_SLOTS = 4096
#: The folder of the leases' lock files (made by the first lease, mode 0700).
UID_LOCK_DIR = Path("/run/raydata-grader/uids")


class UidsExhausted(RuntimeError):
    """Every uid of the range is leased, runs a process or holds keys."""


@dataclass
class UidLease:
    """One leased uid; :meth:`release` gives it back (its lock file stays, unlocked).

    Attributes:
        uid: the uid (also the kernel's gid).
        lock_fd: the open, locked lock file (-1 once released).
    """

    uid: int
    lock_fd: int

    def release(self) -> None:
        """Give the uid back (closing the lock file unlocks it); a second call does nothing."""
        if self.lock_fd >= 0:
            os.close(self.lock_fd)
            self.lock_fd = -1


def key_counts(key_users: str | os.PathLike = "/proc/key-users") -> dict[int, int]:
    """How many keys (keyrings included) each uid holds now, from ``/proc/key-users``; empty if unreadable."""
    try:
        lines = Path(key_users).read_text().splitlines()
    except OSError:
        return {}
    counts = {}
    for line in lines:
        uid, _, rest = line.partition(":")
        fields = rest.split()
        if uid.strip().isdigit() and len(fields) >= 2 and fields[1].split("/")[0].isdigit():
            counts[int(uid)] = int(fields[1].split("/")[0])
    return counts


def uids_with_keys(key_users: str | os.PathLike = "/proc/key-users") -> set[int]:
    """The uids that hold keys in the kernel keyring now (``/proc/key-users``; empty if unreadable)."""
    return {uid for uid, n in key_counts(key_users).items() if n > 0}


def _lock_dir(folder: Path) -> Path:
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = os.lstat(folder)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise PermissionError(f"{folder} must be a folder of this user's that no one else can write to, to hold the "
                              "sandbox uids' locks: remove it, and the grader makes it again")
    return folder


def lease_uid(lock_dir: str | os.PathLike = UID_LOCK_DIR, base: int = SANDBOX_UID_BASE,
              slots: int = SANDBOX_UID_SLOTS) -> UidLease:
    """Lease a uid no other kernel, process or key is using now.

    Args:
        lock_dir: the folder of the lock files (made if missing; it must be this user's, 0700).
        base: the first uid of the range.
        slots: how many uids the range holds.

    Returns:
        A :class:`UidLease`; keep it until the kernel and everything it started have ended.

    Raises:
        UidsExhausted: if every uid of the range is leased, runs a process or holds keys.
        PermissionError: if ``lock_dir`` belongs to someone else or others can write to it.
    """
    folder = _lock_dir(Path(lock_dir))
    busy = uids_with_keys()
    for proc in psutil.process_iter(["uids"]):
        uids = proc.info.get("uids")
        if uids:
            busy.update((uids.real, uids.effective, uids.saved))
    start = random.randrange(slots)
    for i in range(slots):
        uid = base + (start + i) % slots
        if uid in busy:
            continue
        fd = os.open(folder / str(uid), os.O_CREAT | os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return UidLease(uid, fd)
    raise UidsExhausted(f"all {slots} sandbox uids from {base} are in use (leased, running a process or holding keys): "
                        "wait for running grading jobs to end, or grade fewer notebooks at once")
