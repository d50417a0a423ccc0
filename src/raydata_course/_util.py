"""Small helpers shared inside the package (not public API)."""

from __future__ import annotations

import contextlib
import os
from typing import Iterator


@contextlib.contextmanager
def temporary_env(values: dict[str, str | None]) -> Iterator[None]:
    """Set (or, for None, unset) environment variables inside a ``with`` block, then restore.

    Examples:
        >>> with temporary_env({"RDC_DEMO": "1"}):
        ...     os.environ["RDC_DEMO"]
        '1'
        >>> "RDC_DEMO" in os.environ
        False
    """
    saved = {k: os.environ.get(k) for k in values}
    try:
        for key, value in values.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value



def cause_chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and the exceptions that caused it, outermost first, root cause last.

    Follows a Ray error's ``cause`` (``RayTaskError`` keeps the task's exception there) and
    otherwise ``__cause__`` (``raise ... from``); stops at a repeat.

    Examples:
        >>> try:
        ...     try:
        ...         raise ValueError("inner")
        ...     except ValueError as inner:
        ...         raise RuntimeError("outer") from inner
        ... except RuntimeError as exc:
        ...     [type(e).__name__ for e in cause_chain(exc)]
        ['RuntimeError', 'ValueError']
    """
    chain, seen, current = [], set(), exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        chain.append(current)
        nxt = getattr(current, "cause", None)
        current = nxt if isinstance(nxt, BaseException) else current.__cause__
    return chain

#: Worker log lines known to be harmless on the course's clusters, as (logger, text in the line).
#: Ray Train's placement-group cleaner asks the State API whether the Train controller is
#: alive every few seconds; the State API is served by the dashboard, which the course's
#: local clusters do not start, so every check logs this warning until training ends
#: (``ray/train/v2/_internal/execution/controller/placement_group_cleaner.py``).
#: Ray's core worker (C++, ``core_worker.cc``) also logs an error-level line for every actor
#: created with constructor arguments in the object store and ``max_restarts > 0``, which
#: every Ray Data actor pool and Ray Train's own actors are: it warns that a restart could
#: fail if the arguments were lost, nothing a course user can act on.
#: Ray Train's ``DataConfig.configure`` builds each run's ``ExecutionOptions`` with
#: ``exclude_resources=`` the context's own value (``ray/train/_internal/data_config.py:150``),
#: which Ray Data 2.60 has deprecated, so every Train run's DatasetManager actor prints a
#: ``RayDeprecationWarning`` (two lines: the warning and its source line) about Ray's own call.
KNOWN_NOISE: tuple[tuple[str, str], ...] = (
    ("ray.train.v2._internal.execution.controller.placement_group_cleaner",
     "Failed to query Ray Train Controller actor state"),
    ("core_worker.cc", "has constructor arguments in the object store and max_restarts > 0"),
    ("ray.train._internal.data_config", "RayDeprecationWarning: `ExecutionOptions.exclude_resources` is deprecated"),
    ("ray.train._internal.data_config", "    self.exclude_resources = exclude_resources"),
)


def drop_known_noise() -> bool:
    """Stop this driver from printing the workers' :data:`KNOWN_NOISE` lines; all others still print.

    Ray forwards every worker's output to the driver through one handler,
    ``ray_print_logs``, on ``ray._private.worker.global_worker_stdstream_dispatcher`` (an
    internal API: Ray 2.60 has no public one). This wraps that handler so that the known lines
    are dropped before Ray prints (and de-duplicates) a batch. Filtering in the workers instead
    (``runtime_env={"worker_process_setup_hook": ...}``) was measured to add about 10 s to a
    fresh cluster's first execution, because every worker then starts through the runtime-env
    agent. Calling it twice wraps once.

    Returns:
        True when the handler is wrapped (now or before); False when this Ray has no such
        handler (nothing changes then).
    """
    try:
        from ray._private.worker import global_worker_stdstream_dispatcher as dispatcher
    except ImportError:
        return False
    texts = tuple(text for _, text in KNOWN_NOISE)
    with dispatcher._lock:
        for index, (name, handler) in enumerate(dispatcher.handlers):
            if name != "ray_print_logs":
                continue
            if getattr(handler, "drops_known_noise", False):
                return True

            def filtered(data, _print=handler):
                lines = data.get("lines") or []
                kept = [line for line in lines if not any(text in line for text in texts)]
                if kept or not lines:
                    _print({**data, "lines": kept})

            filtered.drops_known_noise = True
            dispatcher.handlers[index] = (name, filtered)
            return True
    return False
