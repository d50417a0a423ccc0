"""Who opened or wrote a file, seen by the host's kernel: inotify and fanotify (grader only, Linux).

A check that must know how often a model file was loaded, or which process wrote the files an
answer made, cannot ask the student's process: code there could report anything. Linux can
tell from outside. Both watchers here take a path on the host (a file inside a sandbox is
reached through ``/proc/<pid>/root``); marks are on inodes, so they see every process of every
namespace that uses the file.

- :class:`OpenCounter` counts the times a file is opened (``inotify(7)``, ``IN_OPEN``): any
  user, no privilege. inotify merges an event into an identical one still unread, so the
  counter also asks for reads and closes: one process that loads a file again and again
  shows an open per load. Two processes that open it at the same moment may show as one
  open: the count can fall short, never over;
- :class:`WriterWatch` records, for each file closed after writing in a folder, the pid of
  the process that wrote it and that process's title (``fanotify(7)``, ``FAN_CLOSE_WRITE``
  with ``FAN_EVENT_ON_CHILD``). fanotify needs ``CAP_SYS_ADMIN``: :meth:`WriterWatch.start`
  returns None without it, and the check then says it could not observe.

Both use the C library through :mod:`ctypes` (the calls are ``inotify_init1``,
``inotify_add_watch``, ``fanotify_init``, ``fanotify_mark`` and ``read``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import select
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["OpenCounter", "WriterWatch", "Written", "process_title"]

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)

IN_ACCESS = 0x00000001
IN_CLOSE_WRITE = 0x00000008
IN_CLOSE_NOWRITE = 0x00000010
IN_OPEN = 0x00000020
IN_Q_OVERFLOW = 0x00004000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC
_INOTIFY_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len (then len bytes of name)

FAN_CLOEXEC = 0x00000001
FAN_NONBLOCK = 0x00000002
FAN_CLASS_NOTIF = 0x00000000
FAN_MARK_ADD = 0x00000001
FAN_CLOSE_WRITE = 0x00000008
FAN_EVENT_ON_CHILD = 0x08000000
FAN_Q_OVERFLOW = 0x00004000
FAN_NOFD = -1
AT_FDCWD = -100
_FAN_EVENT = struct.Struct("IBBHQii")  # event_len, vers, reserved, metadata_len, mask, fd, pid


def process_title(pid: int) -> str:
    """``/proc/<pid>/cmdline`` as one line (a Ray worker's title, ``ray::Write``), or "" if gone."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()[:300]


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


class OpenCounter:
    """Counts the opens of one file while it is watched (inotify ``IN_OPEN``).

    Use it as a context manager; :attr:`opens` is the count (read it at the end, or call
    :meth:`count`). Opens by every process count, the host's and a sandbox's alike; opens at
    the same moment by two processes may count once (see the module's docstring), so use the
    count as a lower bound on loads where several processes load at once.

    Args:
        path: the file, as the host sees it.

    Raises:
        OSError: if the file cannot be watched (it does not exist, or inotify is not available).
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.opens = 0
        self.overflowed = False
        self._fd = -1

    def __enter__(self) -> "OpenCounter":
        self._fd = _check(_libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC), "inotify_init1")
        try:
            mask = IN_OPEN | IN_ACCESS | IN_CLOSE_NOWRITE | IN_CLOSE_WRITE  # events between opens: no merging
            _check(_libc.inotify_add_watch(self._fd, os.fsencode(self.path), mask), f"inotify_add_watch {self.path}")
        except OSError:
            os.close(self._fd)
            self._fd = -1
            raise
        return self

    def count(self) -> int:
        """Read the events that arrived; return the opens counted so far."""
        while self._fd >= 0:
            try:
                data = os.read(self._fd, 65536)
            except BlockingIOError:
                break
            offset = 0
            while offset + _INOTIFY_EVENT.size <= len(data):
                _, mask, _, length = _INOTIFY_EVENT.unpack_from(data, offset)
                self.opens += bool(mask & IN_OPEN)
                self.overflowed |= bool(mask & IN_Q_OVERFLOW)
                offset += _INOTIFY_EVENT.size + length
        return self.opens

    def __exit__(self, *exc) -> None:
        self.count()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


@dataclass(frozen=True)
class Written:
    """One file closed after writing.

    Attributes:
        path: the file, as the host sees it.
        pid: the writer's pid (in the host's PID namespace).
        title: the writer's title when the event was read (``ray::Write`` for a Ray task).
    """

    path: str
    pid: int
    title: str


@dataclass
class WriterWatch:
    """Records which processes write files in one folder (fanotify ``FAN_CLOSE_WRITE``).

    Start it with :meth:`start` (None where fanotify cannot be had: not root, not Linux), and
    :meth:`stop` it to get every :class:`Written` event. A thread reads the events as they come,
    so that each writer's title is read while the writer is alive.

    Args:
        folder: the folder, as the host sees it (its files' writes are reported).
    """

    folder: Path
    written: list[Written] = field(default_factory=list)
    overflowed: bool = False
    _fd: int = -1
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> "WriterWatch | None":
        """Begin watching; None where fanotify is not permitted here (it needs CAP_SYS_ADMIN)."""
        fd = _libc.fanotify_init(FAN_CLASS_NOTIF | FAN_CLOEXEC | FAN_NONBLOCK, os.O_RDONLY | os.O_LARGEFILE)
        if fd < 0:
            if ctypes.get_errno() in (errno.EPERM, errno.ENOSYS, errno.EINVAL):
                return None
            _check(fd, "fanotify_init")
        self._fd = fd
        mark = _libc.fanotify_mark
        mark.argtypes = [ctypes.c_int, ctypes.c_uint, ctypes.c_uint64, ctypes.c_int, ctypes.c_char_p]
        if mark(fd, FAN_MARK_ADD, FAN_CLOSE_WRITE | FAN_EVENT_ON_CHILD, AT_FDCWD, os.fsencode(self.folder)) < 0:
            err = ctypes.get_errno()
            os.close(fd)
            self._fd = -1
            raise OSError(err, f"fanotify_mark {self.folder}: {os.strerror(err)}")
        self._thread = threading.Thread(target=self._read_loop, name="writer-watch", daemon=True)
        self._thread.start()
        return self

    def _read_once(self) -> None:
        try:
            data = os.read(self._fd, 65536)
        except BlockingIOError:
            return
        offset = 0
        while offset + _FAN_EVENT.size <= len(data):
            length, _, _, _, mask, fd, pid = _FAN_EVENT.unpack_from(data, offset)
            offset += max(length, _FAN_EVENT.size)
            if mask & FAN_Q_OVERFLOW:
                self.overflowed = True
            if fd == FAN_NOFD or fd < 0:
                continue
            try:
                path = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                path = ""
            finally:
                os.close(fd)
            self.written.append(Written(path, pid, process_title(pid)))

    def _read_loop(self) -> None:
        while not self._stop.is_set():
            ready, _, _ = select.select([self._fd], [], [], 0.05)
            if ready:
                self._read_once()

    def stop(self) -> list[Written]:
        """Stop watching; every write seen, in order."""
        if self._thread is not None:
            time.sleep(0.1)  # the last close's event
            self._stop.set()
            self._thread.join(timeout=2)
            self._read_once()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        return list(self.written)
