"""The judge's checks for data04 (grader only; never copied into exercises/ or the student bundle).

Each check runs in the grader's process (:mod:`raydata_grader.judge`) and has the student's
functions run in the kernel on image pipelines whose size and speed are chosen here. The
exercise's constants are the release's, held here: a notebook that changes ``ALLOWANCE_BYTES``
or ``BATCH_ROWS`` changes nothing the judge compares with.

Observed from outside the kernel, where it has a sandbox: the hidden runs' object-store peak
is the growth of the sandbox's ``/dev/shm`` (where Ray's object store lives) over a fresh
store, read from the host while the run goes (the judge restarts the kernel's Ray cluster
first, so the store's pages start untouched; see :mod:`raydata_grader.outside`), and spilling
or disk fallback shows as growth of the sandbox's ``/tmp``. The run's length is timed here.
Reported by the kernel: the limit Ray Data's executor reported, the visible run's own
measurements, and what the course's trainer saw (the ids and pixels of each batch, in
:class:`~raydata_course.chapters.ch04_backpressure.SlowTrainer`). The judge cross-checks what
it can: the ids the trainer received (every one of the ids it asked for, once), the object
store's size against what the notebook's set-up requires, a peak of at least one image, and
that each run lasted at least as long as its trainer's sleeps add up to. What each check rests
on is in ``docs/grader/inventory.md``.
"""

import math
import time

import numpy as np

from raydata_course.chapters import ch05_split_checks as split_checks
from raydata_course.chapters.ch04_backpressure import IMAGE_BYTES
from raydata_course.units import MiB
from raydata_grader.facts import observed, recomputed, reported
from raydata_grader.judge import judges, measured, notebook_reported

#: The most ``/dev/shm`` may hold right after the judge restarts the kernel's Ray cluster
#: for the store to count as fresh (Ray places nothing there at start).
FRESH_STORE_BYTES = 8 * MiB
#: ``/tmp`` may grow this much during a run without counting as spilled: Ray's logs (a run of a
#: minute writes well under 1 MiB of them); one spilled block is 8 MiB or more here.
TMP_SLACK_BYTES = 4 * MiB

_TRAINER = reported("every image reached the trainer once, right pixels, full batches",
                    "the course's SlowTrainer records each batch in the kernel; the judge checks the ids it asked for")
_RUN_TIMED = observed("the run lasted at least its trainer's sleeps", "timed by the judge's clock")

#: The release's constants (exercises/data04: ALLOWANCE_BYTES, BATCH_ROWS) and the object
#: store the notebook's set-up cell requires.
ALLOWANCE_BYTES = 192 * MiB
BATCH_ROWS = 8
MIN_STORE_BYTES = 512 * MiB
#: Part D's hidden run: this many images (blocks of 57, 57, 57, 57, 57 and 3 rows), with the
#: measured run's trainer (first step 1.5 s, then 0.15 s per batch). The release says so.
HIDDEN_PEAK_ROWS = 288
_CH04 = "raydata_course.chapters.ch04_backpressure"


def _trainer(k, step_s: float, first_step_s: float = 0.0):
    return k.module(_CH04).SlowTrainer(step_s=step_s, first_step_s=first_step_s)


def _min_seconds(num_rows: int, step_s: float, first_step_s: float) -> float:
    """The least a run can last: its trainer sleeps this long, whatever the pipeline does."""
    batches = math.ceil(num_rows / BATCH_ROWS)
    return first_step_s + max(batches - 1, 0) * step_s


def _check_rows(facts: dict, returned, num_rows: int, what: str) -> None:
    assert not facts["problems"], f"{what}: the trainer received wrong batches: {facts['problems'][0]}"
    ids = np.asarray(facts["ids_seen"], dtype=np.int64)
    counts = np.bincount(ids[(ids >= 0) & (ids < num_rows)], minlength=num_rows)
    missing, repeated = int((counts == 0).sum()), int((counts > 1).sum())
    assert missing == 0 and repeated == 0 and len(ids) == num_rows, (
        f"{what}: the trainer saw {len(ids)} rows; {missing} images never arrived and {repeated} "
        "arrived more than once. Every image must reach the trainer exactly once."
    )
    assert returned == num_rows, f"{what}: train() must return the number of rows it consumed."
    # In any order: with prefetch_batches > 1 the short batch may arrive before full ones.
    assert split_checks.batches_full(facts["batch_rows"], BATCH_ROWS), (
        f"{what}: the trainer must get batches of BATCH_ROWS rows (one may be shorter); "
        "pass batch_size=BATCH_ROWS to iter_batches."
    )


def _fresh_store(k) -> bool:
    """Restart the kernel's Ray cluster (same settings, empty store); True when the host then sees
    an untouched ``/dev/shm``, so that its growth during the next run is that run's peak."""
    k.call(k.module("raydata_course.cluster").restart)
    used = k.outside.used_bytes("/dev/shm")
    return used is not None and used <= FRESH_STORE_BYTES


def _measured(k, num_rows: int, step_s: float, first_step_s: float, what: str, fresh: bool = False):
    """``measure_configured_run`` of the student's functions in the kernel, with its trainer's facts.

    Where the sandbox can be observed, the run is watched from the host (``run["observed"]``:
    ``shm_growth_bytes``, ``tmp_growth_bytes``, ``fresh``); with ``fresh`` the kernel's Ray
    cluster is restarted first, so that the store's growth is the run's peak.
    """
    trainer = _trainer(k, step_s, first_step_s)
    watch, is_fresh = None, False
    if k.observable():
        is_fresh = _fresh_store(k) if fresh else False
        watch = k.outside.watch()
        watch.__enter__()
    start = time.monotonic()
    try:
        run = k.call(k.module(_CH04).measure_configured_run, k.student("configure"), k.student("build_pipeline"),
                     k.student("train"), num_rows=num_rows, trainer=trainer)
    finally:
        if watch is not None:
            watch.__exit__(None, None, None)
    elapsed_s = time.monotonic() - start
    assert isinstance(run, dict) and elapsed_s >= _min_seconds(num_rows, step_s, first_step_s), (
        f"{what}: the measured run came back faster than its trainer can consume the images: the "
        "measurement cannot be right.")
    _check_rows(k.call(k.helper("trainer_facts"), trainer), run.get("rows"), num_rows, what)
    if watch is not None:
        run["observed"] = {"shm_growth_bytes": watch.shm_growth_bytes(), "tmp_growth_bytes": watch.tmp_growth_bytes(),
                           "fresh": is_fresh}
    return run


# ------------------------------------------------------------------------------ part A


@judges("pipeline_visible", facts=[_TRAINER, recomputed("train() returned the rows it consumed")])
def visible_pipeline(k):
    _check_rows(k.call(k.helper("trainer_facts"), k.student("trainer_a")), k.value("rows_a"), 64,
                "On the visible test's 64 images")


@judges("pipeline_hidden", facts=[
    reported("build_pipeline returns a lazy Dataset, not a MaterializedDataset",
             "the kernel looks the classes up in the object's type's MRO, by identity"),
    _TRAINER, recomputed("train() returned the rows it consumed")])
def check_pipeline(k):
    """A row count that is not a multiple of 64 (blocks of 50 rows); lazy; every image once, correct."""
    num_rows = 3 * 64 + 8
    ds = k.remote_call("build_pipeline", num_rows)
    assert k.is_instance(ds, "ray.data.dataset.Dataset"), (
        f"build_pipeline must return a ray.data.Dataset, got {ds.type.qualname}.")
    assert not k.is_instance(ds, "ray.data.dataset.MaterializedDataset"), (
        "build_pipeline returned a materialized dataset: it decoded every image into the object store "
        "before training started. Return the lazy dataset and let the consumer stream it."
    )
    trainer = _trainer(k, 0.0)
    returned = k.call("train", ds, trainer)
    _check_rows(k.call(k.helper("trainer_facts"), trainer), returned, num_rows, "On a dataset whose size is not a multiple of 64 images")


# ------------------------------------------------------------------------------ part B


def _budget(k) -> int:
    budget = k.value("BUDGET_BYTES")
    assert isinstance(budget, (int, np.integer)) and not isinstance(budget, bool) and 0 < budget <= ALLOWANCE_BYTES, (
        "BUDGET_BYTES must be a positive number of bytes no larger than ALLOWANCE_BYTES."
    )
    return int(budget)


@judges("budget_visible", facts=[
    recomputed("BUDGET_BYTES is a positive number of bytes within the allowance"),
    recomputed("configure() sets the limit on the context it is given", "the context's limit, read back as a plain value")])
def visible_budget(k):
    budget = _budget(k)
    limit = k.student("ctx_b").execution_options.resource_limits.object_store_memory.get()
    assert limit == budget, "configure() must set the object-store limit to BUDGET_BYTES"


@judges("budget_hidden", facts=[
    recomputed("BUDGET_BYTES is a positive number of bytes within the allowance"),
    reported("Ray Data's executor reported BUDGET_BYTES as its limit while running", "read inside the executor, in the kernel"),
    _RUN_TIMED, reported("every row came back", "the kernel's run")])
def check_budget(k):
    """The executor itself must report BUDGET_BYTES as its object-store limit.

    Trusts a measurement made in the kernel: the limit Ray Data's executor reported.
    Cross-checked here: every row came back, and the run lasted at least its trainer's sleeps.
    """
    budget = _budget(k)
    # Ray Data computes its limit when execution starts and refreshes it every second; the
    # first readings are 0 while the cluster autoscaler grants resources. So the run must keep
    # the executor busy for a while: more data than any allowed budget, and a trainer whose
    # first step takes 1.5 s, so that the producer waits on its budget.
    num_rows, step_s, first_step_s = 256, 0.02, 1.5
    start = time.monotonic()
    run = k.call(k.helper("budget_probe_run"), k.student("configure"), num_rows, 8, step_s, first_step_s, 8)
    elapsed_s = time.monotonic() - start
    assert isinstance(run, dict) and run.get("rows") == num_rows, "With your configure(), a small dataset lost rows."
    assert elapsed_s >= first_step_s + (num_rows // 8 - 1) * step_s, (
        "The measured run came back faster than its trainer can consume the images: the measurement cannot be right.")
    limit = run.get("ray_data_limit_bytes")
    assert limit is not None, (
        "While running with your configure(), Ray Data's executor never reported an object-store limit: it "
        "finished producing before its first reading, so no small budget held it back. Set "
        "DataContext.execution_options.resource_limits on the context that configure() receives."
    )
    assert abs(limit - budget) <= MiB, (
        f"While running, Ray Data's executor reported an object-store limit of {limit / MiB:.0f} MiB, not "
        f"BUDGET_BYTES ({budget / MiB:.0f} MiB). Set DataContext.execution_options.resource_limits "
        "on the context that configure() receives."
    )


# ------------------------------------------------------------------------------ part C


def _check_no_spill(run: dict, what: str) -> None:
    spilled, fallback = run.get("spilled_bytes"), run.get("fallback_peak_bytes")
    on_disk = f"{spilled / MiB:.0f} MiB were spilled to disk"
    if fallback:
        on_disk += f" and {fallback / MiB:.0f} MiB allocated on disk"
    assert spilled == 0 and fallback == 0, (
        f"{what}, {on_disk} (as your notebook's own process measured it). A streaming pipeline never needs the "
        "whole dataset in memory: do not materialize it, and keep the budget small."
    )


def _visible_run(k) -> dict:
    """The notebook's own measured run (the ``run`` dict of the visible cells), 256 rows consumed."""
    run = k.value("run")
    assert isinstance(run, dict) and run.get("rows") == 256, "the measured run did not consume 256 rows"
    return run


@judges("no_spill_visible", facts=[reported("nothing spilled in the notebook's measured run",
                                          "the visible run's own measurement, made in the kernel")])
def visible_no_spill(k):
    _check_no_spill(_visible_run(k), "In the measured run")


def _check_no_spill_observed(run: dict, what: str) -> None:
    grew = run["observed"]["tmp_growth_bytes"]
    assert grew is not None and grew <= TMP_SLACK_BYTES, (
        f"{what}, the sandbox's disk grew by {grew / MiB:.0f} MiB while it ran (the grader watched it): objects "
        "were spilled to disk or allocated there. A streaming pipeline never needs the whole dataset in memory: do "
        "not materialize it, and keep the budget small."
    )


@judges("no_spill_hidden", facts=[
    reported("the object store is at least the size the set-up requires", "ray.cluster_resources() in the kernel"),
    observed("nothing spilled or allocated on disk",
             "growth of the sandbox's /tmp read from the host while the run goes (without a sandbox, Ray's own "
             "figures in the kernel, reported)"),
    _TRAINER, _RUN_TIMED])
def check_no_spill(k):
    """More images than the whole object store holds, consumed fast: nothing may spill.

    Observed from the host: the sandbox's ``/tmp`` (where Ray spills and falls back to disk)
    must not grow beyond Ray's logs while the run goes. Reported by the kernel: the object
    store's size (at least what the set-up cell requires), and the images the trainer saw.
    Without a sandbox, Ray's spilled bytes and disk fallback as the kernel measured them.
    """
    store_bytes = k.call(k.helper("getitem"), k.module("ray").cluster_resources(), "object_store_memory")
    assert isinstance(store_bytes, (int, float)) and store_bytes >= MIN_STORE_BYTES, (
        "The object store is smaller than the exercise's set-up cell requires: do not change rc.setup().")
    num_rows = math.ceil(1.1 * store_bytes / IMAGE_BYTES)
    run = _measured(k, num_rows, 0.0, 0.0, "On a dataset larger than the object store")
    if "observed" in run:
        _check_no_spill_observed(run, "On a dataset larger than the object store")
    else:
        _check_no_spill(run, "On a dataset larger than the object store")


# ------------------------------------------------------------------------------ part D


def _check_peak(run: dict, what: str, peak=None):
    """Assert the run's peak (``peak``, else the kernel's own figure) is under the allowance;
    return the margin, said for the student (a :class:`~raydata_grader.judge.Note`)."""
    observed_peak = peak is not None
    peak = run.get("peak_bytes") if peak is None else peak
    limit = run.get("ray_data_limit_bytes")
    budget = ("Ray Data's executor reported no limit: nothing was streaming under a budget" if limit is None
              else f"Ray Data's limit, as the kernel reported it, was {limit / MiB:.0f} MiB")
    assert isinstance(peak, (int, np.integer)) and peak >= IMAGE_BYTES, (
        f"{what}, the measured peak is below one image: the measurement cannot be right.")
    who = "the grader measured" if observed_peak else "your notebook's own process measured"
    assert peak <= ALLOWANCE_BYTES, (
        f"{what}, the object store peaked at {peak / MiB:.0f} MiB above its baseline ({who}), over the "
        f"{ALLOWANCE_BYTES / MiB:.0f} MiB allowance ({budget}). Remember that tasks already running finish "
        "their blocks whatever the budget: make blocks small and leave room between the budget and the allowance."
    )
    said = (f"the store peaked at {peak / MiB:.0f} MiB above its baseline ({what[0].lower()}{what[1:]}), "
            f"{(ALLOWANCE_BYTES - peak) / MiB:.0f} MiB under the {ALLOWANCE_BYTES / MiB:.0f} MiB allowance.")
    return measured(said) if observed_peak else notebook_reported(said)


@judges("peak_visible", facts=[reported("the notebook's measured run peaked within the allowance",
                                      "the visible run's own measurement, made in the kernel")])
def visible_peak(k):
    _check_peak(_visible_run(k), "In the measured run")


@judges("peak_hidden", facts=[
    observed("the object store's peak over a fresh store stays within the allowance, and holds at least one image",
             "the judge restarts the kernel's Ray cluster, then reads the growth of the sandbox's /dev/shm from the "
             "host while the run goes (without a sandbox, or if the store was not fresh, the kernel's own figure, "
             "reported)"),
    _TRAINER, _RUN_TIMED])
def check_peak(k):
    """A different size and a longer start-up than the visible run: the peak stays under the allowance.

    Observed from the host: the judge restarts the kernel's Ray cluster (an empty store, whose
    pages start untouched), then the growth of the sandbox's ``/dev/shm`` while the run goes is
    the store's peak, fragmentation included. Without a sandbox, or when the store was not
    fresh after the restart, the kernel's own figure (peak bytes above a settled baseline, a
    reported fact). Cross-checked here: at least one image's bytes, every image id back once,
    and a run at least as long as its trainer's sleeps.
    """
    run = _measured(k, HIDDEN_PEAK_ROWS, 0.15, 1.5, "On the hidden run", fresh=True)
    seen = run.get("observed") or {}
    if seen.get("fresh") and seen.get("shm_growth_bytes") is not None:
        return _check_peak(run, "On the hidden run", peak=int(seen["shm_growth_bytes"]))
    k.took_reported = True
    return _check_peak(run, "On the hidden run")
