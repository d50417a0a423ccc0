"""Kernel-side glue the judge calls: inputs to build, loops to run, measurements to take.

The judge (:mod:`raydata_grader.judge`) builds most inputs itself and sends them as data; a
few need code in the kernel: a pipeline that sleeps at random, a folder to write into, a
read-only batch, a loop over ``iter_torch_batches``, a measured run. They live here, in the
student package, because they hold nothing secret: no expected value, no check. Whatever one
of them returns, the judge decides from the data it gets back.

Some of them measure (object-store bytes, model loads per actor, timings). The judge has to
trust those measurements, since they are made in the kernel; its checks say so, and cross-check
what they can (row counts and ids that the judge chose, durations it timed itself).
"""

from __future__ import annotations

import contextlib
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Callable
from unittest import mock

import numpy as np

__all__ = [
    "scratch_folder",
    "write_file",
    "remove_folder",
    "parquet_folder",
    "call_without_driver_parquet_writes",
    "jittered_range",
    "readonly_batch",
    "repeat_table",
    "dataset_from_pandas",
    "getitem",
    "same_object",
    "is_instance",
    "call_capturing_warnings",
    "compute_strategy_facts",
    "run_with_min_actor_wait",
    "classifier_arrays",
    "trainer_facts",
    "budget_probe_run",
    "collect",
    "collect_torch_batches",
    "predict_classes",
    "best_time_s",
    "vectorized_baseline_s",
    "vectorized_baseline",
]


# ------------------------------------------------------------------------------ files


def scratch_folder(prefix: str = "judge-") -> str:
    """A new empty folder under the kernel's temp folder; its path."""
    return tempfile.mkdtemp(prefix=prefix)


def write_file(data: bytes, name: str) -> str:
    """Write ``data`` to a new file called ``name`` in a new scratch folder; its resolved path."""
    path = Path(scratch_folder()) / Path(name).name
    path.write_bytes(data)
    return str(path.resolve())


def remove_folder(path: str) -> None:
    """Delete ``path`` and everything in it (no error if it is gone)."""
    shutil.rmtree(path, ignore_errors=True)


def parquet_folder(folder: str) -> dict:
    """What a folder of Parquet files holds, for the judge to compare.

    Returns:
        ``{"paths": sorted paths of the *.parquet files, "schemas": [(names, types)] per file
        (types as ``str(pa.DataType)``, metadata ignored), "table": every file's rows, files
        concatenated in path order (None when there are no files)}``.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    paths = sorted(str(p) for p in Path(folder).glob("*.parquet"))
    schemas, tables = [], []
    for p in paths:
        schema = pq.read_schema(p).remove_metadata()
        schemas.append((tuple(schema.names), tuple(str(t) for t in schema.types)))
        tables.append(pq.read_table(p))
    table = pa.concat_tables(tables, promote_options="permissive") if tables else None
    return {"paths": paths, "schemas": schemas, "table": table}


def _refuse(*args, **kwargs):
    raise RuntimeError("write the files with Ray Data (Dataset.write_parquet), not with pyarrow or pandas")


def call_without_driver_parquet_writes(fn: Callable, *args: Any, **kwargs: Any) -> Any:
    """Call ``fn`` while pyarrow's and pandas' Parquet writers fail in this (the driver's) process.

    Ray Data writes in its worker processes, so an answer that writes with Ray Data is
    unaffected; one that writes the files itself with pyarrow or pandas is caught. The writers
    are replaced down to pyarrow's compiled ``_parquet.ParquetWriter``, which every Python-level
    writer goes through, so a reference to ``write_table`` taken earlier is caught too. This
    runs in the kernel: a submission determined to get round it can (the judge says so where
    it relies on it).
    """
    import pandas as pd
    import pyarrow._parquet as pq_compiled
    import pyarrow.parquet as pq
    import pyarrow.parquet.core as pq_core

    with contextlib.ExitStack() as stack:
        for module in (pq, pq_core):
            stack.enter_context(mock.patch.object(module, "write_table", _refuse))
            stack.enter_context(mock.patch.object(module, "ParquetWriter", _refuse))
        stack.enter_context(mock.patch.object(pq_compiled, "ParquetWriter", _refuse))
        stack.enter_context(mock.patch.object(pd.DataFrame, "to_parquet", _refuse))
        return fn(*args, **kwargs)


# ------------------------------------------------------------------------------ datasets


def _jitter(batch: dict, max_delay_s: float = 0.05) -> dict:
    time.sleep(random.random() * max_delay_s)
    return batch


def jittered_range(num_rows: int, num_blocks: int, max_delay_s: float = 0.05):
    """``ray.data.range(num_rows)`` in ``num_blocks`` blocks, each delayed at random (up to
    ``max_delay_s`` seconds), so that blocks finish out of order. Lazy."""
    import ray

    return ray.data.range(num_rows, override_num_blocks=num_blocks).map_batches(
        _jitter, fn_kwargs={"max_delay_s": max_delay_s})


def readonly_batch(table, extra: dict | None = None) -> dict:
    """A NumPy batch of ``table``'s columns, read-only as Ray Data hands them over.

    Args:
        table: a ``pyarrow.Table``.
        extra: more columns (name -> array), also read-only.
    """
    batch = {name: np.asarray(col.to_numpy()) for name, col in zip(table.column_names, table.columns)}
    for name, values in (extra or {}).items():
        batch[name] = np.array(values)
    for array in batch.values():
        array.setflags(write=False)
    return batch


def repeat_table(table, copies: int):
    """``table`` ``copies`` times over, one table (``pyarrow.concat_tables``)."""
    import pyarrow as pa

    return pa.concat_tables([table] * copies)


def dataset_from_pandas(tables: list):
    """``ray.data.from_pandas`` of each table's DataFrame: one pandas block per table."""
    import ray

    return ray.data.from_pandas([t.to_pandas() for t in tables])


def run_with_min_actor_wait(ds, wait_s: float):
    """``ds.to_pandas()``, with Ray Data waiting up to ``wait_s`` seconds for every actor of a
    fixed pool to start before handing out work (``DataContext.wait_for_min_actors_s``, set on
    the context the dataset was created with, and put back afterwards)."""
    ctx = ds.context
    saved, ctx.wait_for_min_actors_s = ctx.wait_for_min_actors_s, wait_s
    try:
        return ds.to_pandas()
    finally:
        ctx.wait_for_min_actors_s = saved


# ------------------------------------------------------------------------------ facts


def getitem(obj: Any, key: Any) -> Any:
    """``obj[key]``."""
    return obj[key]


def same_object(a: Any, b: Any) -> bool:
    """``a is b``."""
    return a is b


def is_instance(obj: Any, module: str, name: str) -> bool:
    """Whether the class ``module.name`` (imported here) is in the MRO of ``type(obj)``.

    By identity, not by name: a class that only calls itself ``ray.data.collate_fn.CollateFn``
    (its ``__module__`` and ``__qualname__`` set) is not it, and ``type()`` is asked, not the
    object's ``__class__``.

    Raises:
        ImportError, AttributeError: if there is no such class.
    """
    import importlib

    cls = getattr(importlib.import_module(module), name)
    return any(c is cls for c in type.__getattribute__(type(obj), "__mro__"))


def best_time_s(fn: Callable, *args: Any, repeats: int = 5) -> float:
    """The fastest of ``repeats`` calls of ``fn(*args)``, in seconds (a measurement the judge trusts)."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn(*args)
        best = min(best, time.perf_counter() - start)
    return best


def vectorized_baseline(batch: dict) -> dict:
    """One vectorized NumPy operation over a batch: the first two float columns divided, added
    to a copy of the batch. The judge times calls of it from outside the kernel, as a yardstick
    for how fast a UDF on this batch can be.

    Raises:
        ValueError: if the batch has fewer than two float columns.
    """
    names = [n for n, v in batch.items() if getattr(v, "dtype", None) is not None and v.dtype.kind == "f"][:2]
    if len(names) < 2:
        raise ValueError("vectorized_baseline needs a batch with two float columns")
    a, b = names
    return {**batch, "baseline": batch[a] / batch[b]}


def vectorized_baseline_s(batch: dict, repeats: int = 5) -> float:
    """Seconds for one vectorized NumPy operation over a batch: the first two float columns
    divided, added to a copy of the batch (the fastest of ``repeats``). A yardstick for how
    fast a UDF on this batch can be, measured on the same machine at the same moment."""
    names = [n for n, v in batch.items() if getattr(v, "dtype", None) is not None and v.dtype.kind == "f"][:2]
    if len(names) < 2:
        raise ValueError("vectorized_baseline_s needs a batch with two float columns")
    a, b = names
    return best_time_s(lambda: {**batch, "baseline": batch[a] / batch[b]}, repeats=repeats)


#: A logger's methods on the way from a record to its handlers (replaced on one logger, they drop records).
_LOGGER_METHODS = ("handle", "callHandlers", "isEnabledFor", "getEffectiveLevel", "makeRecord", "filter", "_log",
                   "warning", "log")


def call_capturing_warnings(fn: Callable, *args: Any, logger_name: str = "ray.data", **kwargs: Any) -> dict:
    """Call ``fn`` while collecting the WARNING records of ``logger_name`` and its children.

    Returns:
        ``{"result": what fn returned, "messages": the records' messages}``.
    """
    import logging

    messages: list[str] = []

    class _Capture(logging.Handler):
        def emit(self, record):
            messages.append(record.getMessage())

    handler = _Capture(logging.WARNING)
    logger = logging.getLogger(logger_name)
    # Whatever the notebook did to logging (a level raised, a logger disabled or cut off from its
    # parent, a filter added, a method replaced on a logger, logging.disable), the warnings of
    # logger_name and its children are recorded while fn runs, then the settings go back.
    family = [logger] + [v for k, v in list(logging.root.manager.loggerDict.items())
                         if k.startswith(logger_name + ".") and isinstance(v, logging.Logger)]
    saved = [(lg, lg.level, lg.disabled, lg.propagate, list(lg.filters),
              {k: lg.__dict__.pop(k) for k in [k for k in vars(lg) if k in _LOGGER_METHODS]}) for lg in family]
    saved_disable = logging.root.manager.disable
    for lg in family:
        lg.setLevel(logging.WARNING if lg is logger else logging.NOTSET)
        lg.disabled = False
        lg.propagate = True if lg is not logger else lg.propagate
        lg.filters = []
    logging.disable(logging.NOTSET)
    logger.addHandler(handler)
    try:
        result = fn(*args, **kwargs)
    finally:
        logger.removeHandler(handler)
        for lg, level, disabled, propagate, filters, methods in saved:
            lg.setLevel(level)
            lg.disabled, lg.propagate, lg.filters = disabled, propagate, filters
            lg.__dict__.update(methods)
        logging.disable(saved_disable)
    return {"result": result, "messages": messages}


def compute_strategy_facts(ds) -> list[dict]:
    """Each map-like operator's compute strategy in ``ds``'s plan, as facts (nothing runs).

    Returns:
        ``[{"operator", "strategy" (class name), "min_size", "max_size", "initial_size"}]``,
        from the source towards the output (see
        :func:`raydata_course.chapters.ch03_actor_pools.compute_strategies`).
    """
    from raydata_course.chapters.ch03_actor_pools import compute_strategies

    return [{"operator": name, "strategy": type(s).__name__, "min_size": getattr(s, "min_size", None),
             "max_size": getattr(s, "max_size", None), "initial_size": getattr(s, "initial_size", None)}
            for name, s in compute_strategies(ds)]


def classifier_arrays(classifier) -> dict:
    """A :class:`~raydata_course.chapters.ch03_classifier.Classifier` as arrays: its layers'
    weights and biases, its scaling and its names (what the file holds, without pickling)."""
    state = {k: v.detach().cpu().numpy() for k, v in classifier.model.state_dict().items()}
    return {"state": state, "mean": np.asarray(classifier.mean), "std": np.asarray(classifier.std),
            "feature_names": list(classifier.feature_names), "class_names": list(classifier.class_names)}


# ------------------------------------------------------------------------------ streaming and torch


def trainer_facts(trainer) -> dict:
    """What a :class:`~raydata_course.chapters.ch04_backpressure.SlowTrainer` saw:
    ``{"problems", "num_rows", "batch_rows", "ids_seen"}`` (the ids in arrival order)."""
    return {"problems": list(trainer.problems), "num_rows": trainer.num_rows, "batch_rows": trainer.batch_rows,
            "ids_seen": trainer.ids_seen}


def budget_probe_run(configure: Callable, num_rows: int, rows_per_file: int, step_s: float, first_step_s: float,
                     batch_size: int):
    """Run the course's image pipeline under ``configure(ctx)`` and measure what the executor reports.

    Resets the streaming knobs of the current ``DataContext``, calls ``configure`` on it, then
    streams ``num_rows`` decoded images (``rows_per_file`` per file) into a
    :class:`~raydata_course.chapters.ch04_backpressure.SlowTrainer` (``step_s``,
    ``first_step_s``) in batches of ``batch_size``, under
    :func:`~raydata_course.measure.run.measure_streaming_run`; resets the knobs again.

    Returns:
        The :class:`~raydata_course.measure.run.StreamingRun` (``rows``: rows the trainer got).
    """
    import ray.data

    from raydata_course.chapters.ch04_backpressure import SlowTrainer, decode_images, image_source, reset_streaming_knobs
    from raydata_course.measure.run import measure_streaming_run

    ctx = ray.data.DataContext.get_current()
    reset_streaming_knobs(ctx)
    configure(ctx)
    trainer = SlowTrainer(step_s=step_s, first_step_s=first_step_s)

    def consume(ds):
        for batch in ds.iter_batches(batch_size=batch_size):
            trainer.step(batch)
        return trainer.num_rows

    try:
        return measure_streaming_run(
            lambda: image_source(num_rows, rows_per_file=rows_per_file).map_batches(decode_images), consume,
            settle=False)
    finally:
        reset_streaming_knobs(ctx)


def collect(iterable) -> list:
    """``list(iterable)``: every batch an iterator yields."""
    return list(iterable)


def collect_torch_batches(ds, limit: int | None = None, **kwargs: Any) -> list:
    """Batches of ``ds.iter_torch_batches(**kwargs)`` (the first ``limit``, or all), without
    torch's "not writable" warning."""
    import warnings

    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for batch in ds.iter_torch_batches(**kwargs):
            out.append(batch)
            if limit is not None and len(out) >= limit:
                break
    return out


def predict_classes(model, features: np.ndarray) -> np.ndarray:
    """The model's top class per row of ``features`` (``float32`` ``(n, d)``), on the CPU, in eval mode."""
    import torch

    model = model.cpu()
    model.eval()
    with torch.no_grad():
        logits = model(torch.from_numpy(np.ascontiguousarray(features, dtype=np.float32)))
    return logits.argmax(dim=1).numpy().astype(np.int64)
