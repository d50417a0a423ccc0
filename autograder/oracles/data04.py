"""The judge's checks for data04 (grader only; never copied into exercises/ or the student bundle).

Each check runs in the grader's process (:mod:`raydata_grader.judge`) and has the student's
functions run in the kernel on image pipelines whose size and speed are chosen here. The
exercise's constants are the release's, held here: a notebook that changes ``ALLOWANCE_BYTES``
or ``BATCH_ROWS`` changes nothing the judge compares with.

Trusted measurements: the object-store figures (peak bytes above a settled baseline, spilled
bytes, disk fallback, the limit Ray Data's executor reported) are measured in the kernel by
the course's :func:`~raydata_course.measure.run.measure_streaming_run`, and the pixel checks by
:class:`~raydata_course.chapters.ch04_backpressure.SlowTrainer`. The judge cross-checks what it
can: the ids the trainer received (every one of the ids it asked for, once), the object
store's size against what the notebook's set-up requires, a peak of at least one image, and
that each run lasted at least as long as its trainer's sleeps add up to, timed here.
"""

import math
import time

import numpy as np

from raydata_course.chapters import ch05_split_checks as split_checks
from raydata_course.chapters.ch04_backpressure import IMAGE_BYTES
from raydata_course.units import MiB
from raydata_grader.judge import judges

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


def _measured(k, num_rows: int, step_s: float, first_step_s: float, what: str):
    """``measure_configured_run`` of the student's functions in the kernel, with its trainer's facts."""
    trainer = _trainer(k, step_s, first_step_s)
    start = time.monotonic()
    run = k.call(k.module(_CH04).measure_configured_run, k.student("configure"), k.student("build_pipeline"),
                 k.student("train"), num_rows=num_rows, trainer=trainer)
    elapsed_s = time.monotonic() - start
    assert isinstance(run, dict) and elapsed_s >= _min_seconds(num_rows, step_s, first_step_s), (
        f"{what}: the measured run came back faster than its trainer can consume the images: the "
        "measurement cannot be right.")
    _check_rows(k.call(k.helper("trainer_facts"), trainer), run.get("rows"), num_rows, what)
    return run


# ------------------------------------------------------------------------------ part A


@judges("pipeline_visible")
def visible_pipeline(k):
    _check_rows(k.call(k.helper("trainer_facts"), k.student("trainer_a")), k.value("rows_a"), 64,
                "On the visible test's 64 images")


@judges("pipeline_hidden")
def check_pipeline(k):
    """A row count that is not a multiple of 64 (blocks of 50 rows); lazy; every image once, correct."""
    num_rows = 3 * 64 + 8
    ds = k.remote_call("build_pipeline", num_rows)
    assert ds.type.is_a("ray.data.dataset.Dataset"), (
        f"build_pipeline must return a ray.data.Dataset, got {ds.type.qualname}.")
    assert not ds.type.is_a("MaterializedDataset"), (
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


@judges("budget_visible")
def visible_budget(k):
    budget = _budget(k)
    limit = k.student("ctx_b").execution_options.resource_limits.object_store_memory.get()
    assert limit == budget, "configure() must set the object-store limit to BUDGET_BYTES"


@judges("budget_hidden")
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
        f"{what}, {on_disk}. A streaming pipeline never needs the whole dataset in memory: do not "
        "materialize it, and keep the budget small."
    )


def _visible_run(k) -> dict:
    """The notebook's own measured run (the ``run`` dict of the visible cells), 256 rows consumed."""
    run = k.value("run")
    assert isinstance(run, dict) and run.get("rows") == 256, "the measured run did not consume 256 rows"
    return run


@judges("no_spill_visible")
def visible_no_spill(k):
    _check_no_spill(_visible_run(k), "In the measured run")


@judges("no_spill_hidden")
def check_no_spill(k):
    """More images than the whole object store holds, consumed fast: nothing may spill.

    Trusts measurements made in the kernel: the object store's size, spilled bytes and disk
    fallback. Cross-checked here: the store is at least the size the set-up cell requires,
    every image id came back once.
    """
    store_bytes = k.call(k.helper("getitem"), k.module("ray").cluster_resources(), "object_store_memory")
    assert isinstance(store_bytes, (int, float)) and store_bytes >= MIN_STORE_BYTES, (
        "The object store is smaller than the exercise's set-up cell requires: do not change rc.setup().")
    num_rows = math.ceil(1.1 * store_bytes / IMAGE_BYTES)
    run = _measured(k, num_rows, 0.0, 0.0, "On a dataset larger than the object store")
    _check_no_spill(run, "On a dataset larger than the object store")


# ------------------------------------------------------------------------------ part D


def _check_peak(run: dict, what: str) -> str:
    """Assert the run's peak is under the allowance; return the margin, said for the student."""
    peak = run.get("peak_bytes")
    limit = run.get("ray_data_limit_bytes")
    budget = ("Ray Data's executor reported no limit: nothing was streaming under a budget" if limit is None
              else f"Ray Data's limit was {limit / MiB:.0f} MiB")
    assert isinstance(peak, (int, np.integer)) and peak >= IMAGE_BYTES, (
        f"{what}, the measured peak is below one image: the measurement cannot be right.")
    assert peak <= ALLOWANCE_BYTES, (
        f"{what}, the object store peaked at {peak / MiB:.0f} MiB above its baseline, over the "
        f"{ALLOWANCE_BYTES / MiB:.0f} MiB allowance ({budget}). Remember that tasks already running finish "
        "their blocks whatever the budget: make blocks small and leave room between the budget and the allowance."
    )
    return (f"the store peaked at {peak / MiB:.0f} MiB above its baseline ({what[0].lower()}{what[1:]}), "
            f"{(ALLOWANCE_BYTES - peak) / MiB:.0f} MiB under the {ALLOWANCE_BYTES / MiB:.0f} MiB allowance.")


@judges("peak_visible")
def visible_peak(k):
    _check_peak(_visible_run(k), "In the measured run")


@judges("peak_hidden")
def check_peak(k):
    """A different size and a longer start-up than the visible run: the peak stays under the allowance.

    Trusts a measurement made in the kernel: the object store's peak above its baseline.
    Cross-checked here: at least one image's bytes, every image id back once, and a run at
    least as long as its trainer's sleeps.
    """
    run = _measured(k, HIDDEN_PEAK_ROWS, 0.15, 1.5, "On the hidden run")
    return _check_peak(run, "On the hidden run")
