"""The push-based split's targets in the lab: the checks ``make lab`` prints with their verdicts.

:func:`push_targets` checks one lazy-free setting's pull and push runs against the targets
(``PUSH_*``); for a missed one it says where the bytes or the time went (:func:`peak_where`,
:func:`stall_where`, :func:`rate_where`). The mid-run throughput (batches 25-90 %) is no longer a
target: under pull it mostly measured how fast the consumers drained the stock the producer
had decoded ahead while they waited for their first batch, not the producer's rate;
:func:`midrun_stock_needed_bytes` and :func:`believed_where` stay as explanations;
:func:`format_push_targets` prints the checks as a Markdown table.

The producer's rate is judged over the whole epoch, not after the consumers' first batch,
for a like reason: a pull split over its budget lists and reads every file before that batch
and then only decodes, while a push split, held to its budget, reads as it decodes. After the
first batch the two producers do different work (``table-push.md`` gives the share of the
files each had read by then), so that rate is printed beside the target (:func:`rate_where`),
not checked.
"""

from __future__ import annotations

import statistics
from typing import Any, Optional

from raydata_course.lab.epoch import RunResult, _midrun_span
from raydata_course.lab.workload import ROW_BYTES
from raydata_course.tables import markdown_table
from raydata_course.units import MiB

__all__ = ["PUSH_PULL_OVERAGE_MIN", "PUSH_THROUGHPUT_MIN", "PUSH_LIVE_PEAK_MAX", "PUSH_STALL_FLOOR",
           "PUSH_STALL_MARGIN", "LAZY_FREE_PERIOD_S", "consumer_bound", "stall_where",
           "pull_push_pairs", "push_targets", "believed_where", "peak_where", "rate_where",
           "midrun_stock_needed_bytes", "format_push_targets", "median_recorded"]


def _mib(num_bytes: float) -> str:
    return f"{num_bytes / MiB:,.0f}"


def pull_push_pairs(results: list[RunResult]) -> list[str]:
    """The variants of ``results`` that have a push-based twin (``X`` and ``X-push``), in order.

    Returns:
        The pull variants' names, e.g. ``["train-slow"]`` (empty when no push variant ran).
    """
    ran = {r.variant for r in results}
    return [name for name in dict.fromkeys(r.variant for r in results) if f"{name}-push" in ran]


#: the lab's targets for the push-based split, each a median over repeats, in both lazy-free
#: settings: the store's peak without the freed-but-not-yet-deleted bytes over the budget,
#: at most PUSH_LIVE_PEAK_MAX under push; pull's peak over the budget at least
#: PUSH_PULL_OVERAGE_MIN (the overage must still show); in the consumer-bound variant push's
#: stall fraction D at most max(PUSH_STALL_FLOOR, pull's D + PUSH_STALL_MARGIN); in the
#: producer-bound one push's production rate over the epoch at least
#: PUSH_THROUGHPUT_MIN times pull's, and push's first batch no later than pull's; with the
#: lazy free at its default, push's whole peak at most the budget plus the consumers'
#: consumption rate times LAZY_FREE_PERIOD_S.
PUSH_LIVE_PEAK_MAX = 1.05
PUSH_PULL_OVERAGE_MIN = 1.5
PUSH_THROUGHPUT_MIN = 0.95
PUSH_STALL_FLOOR = 0.02
PUSH_STALL_MARGIN = 0.01
#: the raylet's default ``free_objects_period_milliseconds``, in seconds
LAZY_FREE_PERIOD_S = 1.0


def consumer_bound(config: dict) -> bool:
    """Whether a variant's consumers are slower than its producer by design: a GPU stand-in
    (``gpu_step_s``) or a delay after each step (``step_delay_s``)."""
    return config.get("gpu_step_s", 0) > 0 or config.get("step_delay_s", 0) > 0


def push_targets(results: list[RunResult], free_objects_period_ms: Optional[int] = 0) -> list[dict[str, Any]]:
    """Check the push-vs-pull targets on one cluster setting's runs (medians over repeats).

    Targets (the constants above):

    * consumer-bound variant (:func:`consumer_bound`, a GPU job): push's job-level stall
      fraction ``D`` (:func:`~raydata_course.lab.epoch.stall_fraction`) is at most
      ``max(PUSH_STALL_FLOOR, pull's D + PUSH_STALL_MARGIN)``;
    * producer-bound variant: push's production rate over the epoch (the decode's output from
      the epoch's start to its last block,
      :func:`~raydata_course.lab.producer.epoch_production_batches_per_s`) is at least
      ``PUSH_THROUGHPUT_MIN`` times pull's, and push's first batch comes no later than pull's.
      The rate after the consumers' first batch
      (:func:`~raydata_course.lab.producer.production_batches_per_s`) is printed beside it, not
      checked: by then pull has read its files and push has not (the module docstring). What
      the consumers take after their first batch is printed too, not checked: under pull it
      includes the stock decoded before that batch, as the retired mid-run rate did;
    * every variant: push's peak without the freed-but-not-yet-deleted bytes is at most
      ``PUSH_LIVE_PEAK_MAX`` times the budget; with the lazy free at its default
      (``free_objects_period_ms`` None), push's whole peak is at most the budget plus the
      consumption rate (push's batches/s after the first batch,
      :func:`~raydata_course.lab.epoch.consumption_batches_per_s`, times the bytes each batch
      frees: the batch and the blocks it was made from, the encoded block the decode read,
      :func:`~raydata_course.lab.producer.made_bytes_per_batch`; the batch's bytes alone for
      results that lack it) times ``LAZY_FREE_PERIOD_S``: the raylet keeps every block freed
      in the period, the read's blocks as well as the batches; pull's peak is at least
      ``PUSH_PULL_OVERAGE_MIN`` times the budget.

    Args:
        results: one cluster setting's runs, pull and push.
        free_objects_period_ms: that setting (0: lazy free off; None: the default 1000 ms).

    Returns:
        One dict per check: ``variant``, ``target`` (words ending in ``<=`` or ``>=``),
        ``value``, ``bound``, ``met`` and ``where`` (words: which bytes or which wait, held
        where, :func:`peak_where`, :func:`stall_where`, :func:`rate_where`).
    """
    med = statistics.median
    checks = []

    def check(name, target, value, bound, at_most, where=""):
        checks.append({"variant": name, "target": f"{target} {'<=' if at_most else '>='}", "value": value,
                       "bound": bound, "met": _meets(value, bound, at_most), "where": where})

    def median_of(runs, attr):
        return median_recorded(runs, attr) or 0.0

    for name in pull_push_pairs(results):
        pull = [r for r in results if r.variant == name]
        push = [r for r in results if r.variant == f"{name}-push"]
        cfg = push[0].config
        budget = push[0].budget_bytes
        mid = sorted(push, key=lambda r: r.live_peak_bytes or r.peak_bytes)[(len(push) - 1) // 2]
        if consumer_bound(cfg):
            pull_d, push_d = median_of(pull, "stall_fraction"), median_of(push, "stall_fraction")
            check(name, "push stall fraction D", push_d, max(PUSH_STALL_FLOOR, pull_d + PUSH_STALL_MARGIN), True,
                  where=stall_where(pull, push))
        else:
            pull_rate = median_of(pull, "epoch_production_batches_per_s")
            ratio = median_of(push, "epoch_production_batches_per_s") / pull_rate if pull_rate else 0.0
            where = rate_where(pull, push)
            check(name, "push / pull production rate over the epoch", ratio, PUSH_THROUGHPUT_MIN, False,
                  where=where)
            check(name, "push first batch s", med([r.first_batch_s for r in push]),
                  med([r.first_batch_s for r in pull]), True, where=where)
        live = [r.live_peak_bytes / r.budget_bytes for r in push if r.live_peak_bytes is not None]
        check(name, "push peak without freed-not-deleted / budget", med(live) if live else float("inf"),
              PUSH_LIVE_PEAK_MAX, True, where=peak_where(mid.peak_breakdown))
        if free_objects_period_ms is None:
            # the rate at which the consumers free batches: after their first one (the wait for
            # it frees nothing); the overall rate where results lack it
            rate = median_recorded(push, "consumption_batches_per_s") or med([r.overall_batches_per_s for r in push])
            # every block freed in the period stays: per batch taken, the batch and the blocks
            # it was made from (the batch's bytes where results lack the plan's counters)
            rate_bytes_s = rate * (median_recorded(push, "made_bytes_per_batch") or cfg.get("batch_bytes", 0))
            bound = 1.0 + rate_bytes_s * LAZY_FREE_PERIOD_S / budget
            top = sorted(push, key=lambda r: r.peak_bytes)[(len(push) - 1) // 2]
            check(name, "push peak / budget (lazy free: budget + consumption rate x 1 s)",
                  med([r.peak_bytes / r.budget_bytes for r in push]), bound, True,
                  where=peak_where(top.peak_breakdown))
        check(name, "pull peak / budget", med([r.peak_bytes / r.budget_bytes for r in pull]),
              PUSH_PULL_OVERAGE_MIN, False)
    return checks


def stall_where(pull: list[RunResult], push: list[RunResult]) -> str:
    """Where a stall comes from, in words (medians over repeats): each split's stall fraction,
    its consumers' median wait per batch and median step (seconds), and the first batch's wait.

    Examples:
        >>> from types import SimpleNamespace as R
        >>> run = lambda d, w: R(stall_fraction=d, wait_s_median=w, step_s_median=0.01, first_batch_s=2.0)
        >>> stall_where([run(0.0, 0.0)], [run(0.1, 0.07)])
        'D: pull 0.000, push 0.100; wait per batch: pull 0.000 s, push 0.070 s; step: pull 0.010 s, push 0.010 s; first batch: pull 2.00 s, push 2.00 s'
    """
    med = statistics.median

    def d(runs):
        known = median_recorded(runs, "stall_fraction")
        return "n/a" if known is None else f"{known:.3f}"

    return (f"D: pull {d(pull)}, push {d(push)}; wait per batch: pull {med([r.wait_s_median for r in pull]):.3f} s, "
            f"push {med([r.wait_s_median for r in push]):.3f} s; step: pull {med([r.step_s_median for r in pull]):.3f} s, "
            f"push {med([r.step_s_median for r in push]):.3f} s; first batch: pull "
            f"{med([r.first_batch_s for r in pull]):.2f} s, push {med([r.first_batch_s for r in push]):.2f} s")


def _meets(value: float, bound: float, at_most: bool) -> bool:
    """Whether ``value`` is within ``bound``: at most it, or at least it."""
    return value <= bound if at_most else value >= bound


def peak_where(breakdown: dict) -> str:
    """Push's bytes at the store's fullest classified sample, in words (MiB).

    Examples:
        >>> peak_where({"executor_bytes": 159 * 2**20, "coordinator_bytes": 64 * 2**20,
        ...             "pinned_unreferenced_bytes": 0, "freed_not_deleted_bytes": 128 * 2**20})
        'executor 159 / windows 64 / pinned without a ref 0 / freed, not deleted 128'
    """
    parts = (("executor", "executor_bytes"), ("windows", "coordinator_bytes"),
             ("pinned without a ref", "pinned_unreferenced_bytes"), ("freed, not deleted", "freed_not_deleted_bytes"))
    if any(key not in breakdown for _, key in parts):  # results from before the breakdown existed
        return "not recorded"
    return " / ".join(f"{label} {_mib(breakdown[key])}" for label, key in parts)


def median_recorded(runs: list[RunResult], attr: str) -> Optional[float]:
    """The median of the field ``attr`` over the runs that recorded it (not None); None when
    none did (results written before the field existed).

    Examples:
        >>> from types import SimpleNamespace as R
        >>> median_recorded([R(x=1.0), R(x=None), R(x=3.0)], "x"), median_recorded([R(x=None)], "x")
        (2.0, None)
    """
    known = [getattr(r, attr) for r in runs if getattr(r, attr) is not None]
    return statistics.median(known) if known else None


def rate_where(pull: list[RunResult], push: list[RunResult]) -> str:
    """Where a throughput gap comes from, in words (medians over repeats): the object store's
    usage when the mid-run window opened (what the producer had decoded ahead, MiB), each
    split's median wait for a batch (seconds), each split's producer's rate over the epoch and
    after the first batch, and the share of its files it had read by that batch (a split that
    read them all before it only decodes after it), each split's rate before that window (batches
    per second, all consumers, the first batch's wait included) and its consumers' wait for
    their first batch (seconds; a producer decodes ahead while its consumers wait, so a split
    whose first batch comes later starts the window on a larger stock), and the least push
    would need decoded ahead as the window opens to meet the mid-run target
    (:func:`midrun_stock_needed_bytes`)."""
    med = statistics.median

    def stored(runs):
        known = median_recorded(runs, "midrun_start_store_bytes")
        return "n/a" if known is None else _mib(known)

    words = (f"at mid-run start: pull {stored(pull)}, push {stored(push)} stored; wait per batch: "
             f"pull {med([r.wait_s_median for r in pull]):.3f} s, push {med([r.wait_s_median for r in push]):.3f} s")
    epoch = [median_recorded(runs, "epoch_production_batches_per_s") for runs in (pull, push)]
    if None not in epoch:
        words += f"; decoded over the epoch: pull {epoch[0]:.2f} b/s, push {epoch[1]:.2f} b/s"
    read = [median_recorded(runs, "read_done_at_first_batch") for runs in (pull, push)]
    if None not in read:
        words += f"; files read by the first batch: pull {read[0]:.0%}, push {read[1]:.0%}"
    rates = [[median_recorded(runs, attr) for runs in (pull, push)]
             for attr in ("production_batches_per_s", "consumption_batches_per_s")]
    if None not in rates[0] + rates[1]:
        words += (f"; after the first batch, decoded: pull {rates[0][0]:.2f} b/s, push {rates[0][1]:.2f} b/s; "
                  f"consumed: pull {rates[1][0]:.2f} b/s, push {rates[1][1]:.2f} b/s")
    early = [median_recorded(runs, "early_batches_per_s") for runs in (pull, push)]
    if None not in early:
        words += (f"; before the window: pull {early[0]:.2f} b/s, push {early[1]:.2f} b/s, the first "
                  f"batch after pull {med([r.first_batch_s for r in pull]):.2f} s, push "
                  f"{med([r.first_batch_s for r in push]):.2f} s")
    cfg = push[0].config
    if all(k in cfg for k in ("consumers", "batches_per_consumer", "batch_rows")):
        lo, hi = _midrun_span(cfg["batches_per_consumer"])
        needed = midrun_stock_needed_bytes(med([r.midrun_batches_per_s for r in pull]),
                                           med([r.midrun_batches_per_s for r in push]),
                                           cfg["consumers"] * (hi - lo), cfg["batch_rows"] * ROW_BYTES)
        if needed:
            words += (f"; for {PUSH_THROUGHPUT_MIN} x pull's mid-run rate push needs >= {_mib(needed)} decoded "
                      f"ahead as the window opens ({needed / push[0].budget_bytes:.2f} x the budget)")
    return words


def midrun_stock_needed_bytes(pull_midrun_batches_per_s: float, push_midrun_batches_per_s: float,
                              window_batches: int, batch_bytes: int,
                              fraction: float = PUSH_THROUGHPUT_MIN) -> float:
    """A lower bound on the bytes push must have decoded ahead when the mid-run window opens
    to run that window at ``fraction`` times pull's mid-run rate, in bytes.

    The window holds ``window_batches`` batches (all consumers); at the target rate it lasts
    ``T = window_batches / (fraction * pull rate)`` seconds, during which push's producer makes
    at most ``push rate * T`` batches: push's measured mid-run rate includes draining what it
    had decoded ahead, so it is an upper bound on its producer's. What the consumers take
    beyond that must already be there: ``(window_batches - push rate * T) * batch_bytes``,
    0 when push's rate already suffices. A split held to a budget cannot start the window
    with more than the budget, less what its tasks in flight hold.

    Examples:
        >>> round(midrun_stock_needed_bytes(2.0, 1.5, 24, 32), 1)  # 24 batches in 12.6 s, 18.9 made
        161.7
        >>> midrun_stock_needed_bytes(2.0, 1.9, 24, 32)
        0.0
    """
    target = fraction * pull_midrun_batches_per_s
    if target <= 0 or push_midrun_batches_per_s >= target:
        return 0.0
    return (window_batches - push_midrun_batches_per_s * window_batches / target) * batch_bytes


def believed_where(operators: list[dict]) -> str:
    """Where Ray Data's believed usage sat at its peak, in words (MiB per operator, with the
    running tasks' estimated pending output in parentheses).

    Examples:
        >>> believed_where([{"operator": "ReadFilesParquetV2", "bytes": 383 * 2**20,
        ...                  "pending_bytes": 255 * 2**20, "tasks": 1}])
        'ReadFilesParquetV2 383 (255 pending)'
    """
    return " / ".join(f"{o['operator']} {_mib(o['bytes'])}" +
                      (f" ({_mib(o['pending_bytes'])} pending)" if o.get("pending_bytes") else "")
                      for o in operators)


def format_push_targets(checks: list[dict[str, Any]]) -> str:
    """The checks of :func:`push_targets` as a Markdown table (empty string for none); a
    missed target says where: a peak, push's bytes at the store's fullest sample by holder; a
    throughput, :func:`rate_where` (what each split had stored when the mid-run window opened,
    its wait per batch, its rate before the window and its first batch's wait, and the stock
    push would need); Ray Data's believed usage, where its bytes sat at its peak, by operator."""
    if not checks:
        return ""
    def shown(c):  # enough digits that the shown value agrees with the verdict
        for digits in (3, 4, 6):
            text = f"{c['value']:.{digits}f}"
            if _meets(float(text), c["bound"], c["target"].endswith("<=")) == c["met"]:
                return text
        return text

    body = [[c["variant"], c["target"].rsplit(" ", 1)[0], shown(c),
             f"{c['target'].rsplit(' ', 1)[1]} {c['bound']:.2f}", "met" if c["met"] else "MISSED",
             c.get("where", "") if not c["met"] else ""] for c in checks]
    return markdown_table(["variant", "target", "measured", "bound", "met", "where, when missed (MiB, s)"],
                          body, align="llrrll")
