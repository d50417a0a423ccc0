"""Hidden tests for data04 (grader only; never copied into exercises/ or the student bundle).

Each ``check_*`` receives the student's functions and raises ``AssertionError`` with a message
that names what went wrong and what to change, never the hidden sizes or speeds.

The checks measure. Figures are object-store bytes above a settled baseline, so objects that
other notebooks left on a shared grading cluster do not count, and the runs are sized so that
the reference answer stays far below the bounds while a pipeline that decodes whole files at
once, materializes, or keeps Ray Data's default budget lands far above them.
"""

import math

import ray
import ray.data
from ray.data.dataset import MaterializedDataset

from raydata_course.chapters.ch04_backpressure import (
    IMAGE_BYTES,
    SlowTrainer,
    decode_images,
    image_source,
    measure_configured_run,
    reset_streaming_knobs,
)
from raydata_course.measure.run import measure_streaming_run
from raydata_course.units import MiB


def _check_rows(trainer: SlowTrainer, returned, num_rows: int, batch_rows: int, what: str) -> None:
    assert not trainer.problems, f"{what}: the trainer received wrong batches: {trainer.problems[0]}"
    missing, repeated = trainer.missing_and_repeated(num_rows)
    assert missing == 0 and repeated == 0 and trainer.num_rows == num_rows, (
        f"{what}: the trainer saw {trainer.num_rows} rows; {missing} images never arrived and {repeated} "
        "arrived more than once. Every image must reach the trainer exactly once."
    )
    assert returned == num_rows, f"{what}: train() must return the number of rows it consumed."
    sizes = trainer.batch_rows
    assert all(n == batch_rows for n in sizes[:-1]) and 0 < sizes[-1] <= batch_rows, (
        f"{what}: the trainer must get batches of BATCH_ROWS rows (the last one may be shorter); "
        "pass batch_size=BATCH_ROWS to iter_batches."
    )


def check_pipeline(build_pipeline, train, batch_rows: int):
    """A file count that does not divide evenly; lazy; every image once, correct."""
    num_rows = 3 * 64 + 8
    ds = build_pipeline(num_rows)
    assert isinstance(ds, ray.data.Dataset), f"build_pipeline must return a ray.data.Dataset, got {type(ds).__name__}."
    assert not isinstance(ds, MaterializedDataset), (
        "build_pipeline returned a materialized dataset: it decoded every image into the object store "
        "before training started. Return the lazy dataset and let the consumer stream it."
    )
    trainer = SlowTrainer(step_s=0.0)
    returned = train(ds, trainer)
    _check_rows(trainer, returned, num_rows, batch_rows, "On a dataset whose last file is short")


def check_budget(configure, budget_bytes: int, allowance_bytes: int):
    """The executor itself must report BUDGET_BYTES as its object-store limit."""
    assert isinstance(budget_bytes, int) and 0 < budget_bytes <= allowance_bytes, (
        "BUDGET_BYTES must be a positive number of bytes no larger than ALLOWANCE_BYTES."
    )
    ctx = ray.data.DataContext.get_current()
    reset_streaming_knobs(ctx)
    configure(ctx)
    # Ray Data computes its limit when execution starts and refreshes it every second; the
    # first readings are 0 while the cluster autoscaler grants resources. So the run must keep
    # the executor busy for a while: more data than any allowed budget, and a trainer whose
    # first step takes 1.5 s, so that the producer waits on its budget.
    num_rows = 256
    trainer = SlowTrainer(step_s=0.02, first_step_s=1.5)

    def consume(ds):
        for batch in ds.iter_batches(batch_size=8):
            trainer.step(batch)
        return trainer.num_rows

    run = measure_streaming_run(
        lambda: image_source(num_rows, rows_per_file=8).map_batches(decode_images), consume, settle=False)
    reset_streaming_knobs(ctx)
    assert run.rows == num_rows, "With your configure(), a small dataset lost rows."
    limit = run.ray_data_limit_bytes
    assert limit is not None, (
        "While running with your configure(), Ray Data's executor never reported an object-store limit: it "
        "finished producing before its first reading, so no small budget held it back. Set "
        "DataContext.execution_options.resource_limits on the context that configure() receives."
    )
    assert abs(limit - budget_bytes) <= MiB, (
        f"While running, Ray Data's executor reported an object-store limit of {limit / MiB:.0f} MiB, not "
        f"BUDGET_BYTES ({budget_bytes / MiB:.0f} MiB). Set DataContext.execution_options.resource_limits "
        "on the context that configure() receives."
    )


def check_no_spill(configure, build_pipeline, train, batch_rows: int):
    """More images than the whole object store holds, consumed fast: nothing may spill."""
    store_bytes = int(ray.cluster_resources().get("object_store_memory", 0))
    num_rows = math.ceil(1.1 * store_bytes / IMAGE_BYTES)
    trainer = SlowTrainer(step_s=0.0)
    run = measure_configured_run(configure, build_pipeline, train, num_rows=num_rows, trainer=trainer)
    _check_rows(trainer, run.rows, num_rows, batch_rows, "On a dataset larger than the object store")
    on_disk = f"{run.spilled_bytes / MiB:.0f} MiB were spilled to disk"
    if run.fallback_peak_bytes:
        on_disk += f" and {run.fallback_peak_bytes / MiB:.0f} MiB allocated on disk"
    assert run.spilled_bytes == 0 and run.fallback_peak_bytes == 0, (
        f"On a dataset larger than the object store, {on_disk}. A streaming pipeline never needs the whole "
        "dataset in memory: do not materialize it, and keep the budget small."
    )


def check_peak(configure, build_pipeline, train, batch_rows: int, allowance_bytes: int):
    """A different size and a longer start-up than the visible run: the peak stays under the allowance."""
    num_rows = 4 * 64 + 32
    trainer = SlowTrainer(step_s=0.15, first_step_s=1.5)
    run = measure_configured_run(configure, build_pipeline, train, num_rows=num_rows, trainer=trainer)
    _check_rows(trainer, run.rows, num_rows, batch_rows, "With a trainer that starts slowly")
    limit = ("Ray Data's executor reported no limit: nothing was streaming under a budget"
             if run.ray_data_limit_bytes is None else f"Ray Data's limit was {run.ray_data_limit_bytes / MiB:.0f} MiB")
    assert run.peak_bytes <= allowance_bytes, (
        f"With a trainer that starts slowly, the object store peaked at {run.peak_bytes / MiB:.0f} MiB above "
        f"its baseline, over the {allowance_bytes / MiB:.0f} MiB allowance ({limit}). Remember that tasks "
        "already running finish their blocks whatever the budget: make blocks small and leave room between "
        "the budget and the allowance."
    )
