"""A grading run's progress, for the instructor who waits: done / total, failures, time left.

On a terminal it is a tqdm bar (``grading: 40%|####      | 4/10 [01:10<01:45, failed=1]``),
and each notebook's line is printed above it; in a log (stderr is not a terminal) each
notebook's line is followed by one plain line, ``[grade] 4/10 done, 1 failed, 01:10 so far,
about 01:45 left``. The time left is the time so far per notebook done, times the
notebooks left: with several at once it is rough until the first few have ended.
"""

from __future__ import annotations

import sys
import time

__all__ = ["Progress"]


class Progress:
    """Progress over ``total`` notebooks (a context manager).

    Args:
        total: notebooks to grade in this run.
        quiet: show nothing at all.
        stream: where to show it (default: ``sys.stderr``).
    """

    def __init__(self, total: int, quiet: bool = False, stream=None):
        self.total = total
        self.quiet = quiet
        self.stream = stream or sys.stderr
        self.done_count = 0
        self.failed = 0
        self._start = time.monotonic()
        self._bar = None

    def __enter__(self) -> "Progress":
        self._start = time.monotonic()
        if not self.quiet and hasattr(self.stream, "isatty") and self.stream.isatty():
            from tqdm import tqdm

            self._bar = tqdm(total=self.total, desc="grading", unit="notebook", file=self.stream, dynamic_ncols=True)
            self._bar.set_postfix(failed=0)
        return self

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.close()

    def write(self, line: str) -> None:
        """Print ``line`` (above the bar, on a terminal)."""
        if self.quiet:
            return
        if self._bar is not None:
            self._bar.write(line, file=self.stream)
        else:
            print(line, flush=True)

    def status(self) -> str:
        """One line: done / total, failures, time so far and time left (``mm:ss``)."""
        from tqdm import tqdm

        elapsed = time.monotonic() - self._start
        line = f"[grade] {self.done_count}/{self.total} done, {self.failed} failed, {tqdm.format_interval(elapsed)} so far"
        if 0 < self.done_count < self.total:
            line += f", about {tqdm.format_interval(elapsed / self.done_count * (self.total - self.done_count))} left"
        return line

    def done(self, line: str, failed: bool = False) -> None:
        """One more notebook ended: print its ``line`` and move the progress on."""
        self.done_count += 1
        self.failed += bool(failed)
        self.write(line)
        if self.quiet:
            return
        if self._bar is not None:
            self._bar.set_postfix(failed=self.failed, refresh=False)
            self._bar.update(1)
        else:
            print(self.status(), flush=True)
