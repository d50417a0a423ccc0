"""Physical cores shared by the running tasks: processor sharing on a simpy clock.

A machine with 2 cores that Ray gives 4 logical CPUs runs 4 tasks at once at half speed
each. :class:`SharedCores` models that: every job holds some CPU work (CPU seconds) and may
use up to ``width`` cores at once (1 for a Ray task; more for a training step whose PyTorch
kernels run on several threads); while jobs of total width ``W`` run on ``cores`` cores, a
job of width ``w`` advances at ``min(w, cores * w / W)`` CPU seconds per second.

Examples:
    >>> import simpy
    >>> env = simpy.Environment()
    >>> cpu = SharedCores(env, cores=1)
    >>> done = []
    >>> def job(name, work_s):
    ...     yield cpu.run(work_s)
    ...     done.append((name, env.now))
    >>> _ = env.process(job("a", 1.0)); _ = env.process(job("b", 1.0))
    >>> env.run()
    >>> done  # two 1 s jobs on one core both end at 2 s
    [('a', 2.0), ('b', 2.0)]
    >>> cpu2, done = SharedCores(env, cores=2), []
    >>> def wide(name, work_s, width):
    ...     yield cpu2.run(work_s, width=width)
    ...     done.append((name, round(env.now - 2.0, 3)))
    >>> _ = env.process(wide("step", 3.0, 2.0)); _ = env.process(wide("task", 1.0, 1.0))
    >>> env.run()
    >>> done  # 3 cores of width on 2: the task at 2/3, the step at 4/3 CPU-s per second, then 2 alone
    [('task', 1.5), ('step', 2.0)]
"""

from __future__ import annotations

import simpy

__all__ = ["SharedCores"]

_EPS_S = 1e-9


class SharedCores:
    """Processor sharing of ``cores`` cores among the jobs that run (``None``: no sharing).

    Args:
        env: the simulation's environment.
        cores: physical cores; ``None`` runs every job at full speed.
    """

    def __init__(self, env: simpy.Environment, cores: float | None):
        if cores is not None and not cores > 0:
            raise ValueError(f"cores must be positive (or None), got {cores!r}.")
        self.env = env
        self.cores = cores
        self._left_s: dict[simpy.Event, float] = {}
        self._width: dict[simpy.Event, float] = {}
        self._since_s = 0.0
        self._generation = 0

    @property
    def running(self) -> int:
        """Jobs running now."""
        return len(self._left_s)

    def rate(self, width: float = 1.0) -> float:
        """CPU seconds per second a running job of ``width`` cores gets now."""
        if self.cores is None or not self._left_s:
            return width
        return min(width, self.cores * width / sum(self._width.values()))

    def run(self, work_s: float, width: float = 1.0) -> simpy.Event:
        """Start a job of ``work_s`` CPU seconds that may use up to ``width`` cores at once;
        the returned event fires when it is done.

        Raises:
            ValueError: ``work_s`` below 0 or ``width`` not positive.
        """
        if not work_s >= 0:
            raise ValueError(f"work_s must be >= 0 seconds, got {work_s!r}.")
        if not width > 0:
            raise ValueError(f"width must be positive (cores), got {width!r}.")
        done = self.env.event()
        if work_s <= _EPS_S:
            done.succeed()
            return done
        self._advance()
        self._left_s[done] = work_s
        self._width[done] = width
        self._reschedule()
        return done

    def _advance(self) -> None:
        elapsed = self.env.now - self._since_s
        if elapsed > 0 and self._left_s:
            for job in self._left_s:
                self._left_s[job] -= elapsed * self.rate(self._width[job])
        self._since_s = self.env.now

    def _reschedule(self) -> None:
        self._generation += 1
        if not self._left_s:
            return
        wait_s = max(0.0, min(left / self.rate(self._width[job]) for job, left in self._left_s.items()))
        self.env.process(self._wake(self._generation, wait_s))

    def _wake(self, generation: int, wait_s: float):
        yield self.env.timeout(wait_s)
        if generation != self._generation:
            return  # a job started or ended since: a newer wake-up is scheduled
        self._advance()
        for job in [j for j, left in self._left_s.items() if left <= _EPS_S * 10]:
            del self._left_s[job]
            del self._width[job]
            job.succeed()
        self._reschedule()
