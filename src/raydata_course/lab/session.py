"""Run lab variants: the engine behind ``make lab``.

One *run* = one variant on the lab's local cluster, with :class:`~raydata_course.measure.store.PlasmaSampler`
polling the raylets at 10 Hz and :class:`LabProbe` (the course's :class:`~raydata_course.measure.raydata.RayDataProbe`,
at 10 Hz) recording what Ray Data believes. :mod:`raydata_course.lab.epoch` turns each epoch's
samples into a :class:`~raydata_course.lab.epoch.RunResult`; the tables and checks built on
these results are :mod:`raydata_course.lab.report`.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict
from pathlib import Path

from raydata_course.lab.epoch import RunResult, measure_epoch
from raydata_course.lab.workload import LabConfig
from raydata_course.measure.raydata import RayDataProbe
from raydata_course.units import MiB

__all__ = ["LabProbe", "LabSession", "PROBE_FLUSH_WAIT_S", "PLASMA_MIN_OBJECT_BYTES"]

#: seconds to wait after a run so that the probes' last samples reach the recorder.
PROBE_FLUSH_WAIT_S = 1.0
#: the smallest object the lab classifies, in bytes: objects up to Ray's
#: ``max_direct_call_object_size`` (100 KiB, ``ray_config_def.h``) are returned inline to
#: their owner and never occupy plasma, so counting them would overstate referenced bytes.
PLASMA_MIN_OBJECT_BYTES = 100 * 1024 + 1


class LabProbe(RayDataProbe):
    """The course's Ray Data probe at the lab's rate: 10 samples a second, like the lab's
    plasma sampler (a module-level class, so that Ray can ship it to the coordinator)."""

    interval_s = 0.1


class LabSession:
    """Owns the lab's local cluster, its recorder and the probes, across runs.

    Args:
        out_dir: folder for data, Ray Train results and outputs.
        object_store_bytes: size of the cluster's object store.
        num_cpus: logical CPUs of the cluster.
        system_config: Ray system settings, e.g. ``{"free_objects_period_milliseconds": 0}``.
        warm_up: run a tiny dataset first so that worker start-up does not land in the first
            variant's time to first batch (memory numbers do not depend on it).
    """

    def __init__(self, out_dir: str | Path, *, object_store_bytes: int = 2048 * MiB, num_cpus: int = 4,
                 system_config: dict | None = None, warm_up: bool = True):
        self.free_objects_period_ms = (system_config or {}).get("free_objects_period_milliseconds")
        import ray.data

        import raydata_course as rc
        from raydata_course.measure.raydata import start_recorder

        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        # setup() itself retries a start that misses Ray's start-up wait on a busy machine.
        self.session = rc.setup(num_cpus=num_cpus, object_store_memory_bytes=object_store_bytes,
                                require_object_store_bytes=int(object_store_bytes * 0.9),
                                system_config=system_config)
        self.recorder = start_recorder()
        ctx = ray.data.DataContext.get_current()
        if LabProbe not in ctx.custom_execution_callback_classes:
            ctx.custom_execution_callback_classes.append(LabProbe)
        ctx.enable_progress_bars = False
        if warm_up:
            ray.data.range(64, override_num_blocks=4).map_batches(lambda b: b).materialize()

    def close(self) -> None:
        import raydata_course as rc

        rc.shutdown()

    def __enter__(self) -> LabSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def data_dir(self, config: LabConfig) -> Path:
        from raydata_course.lab.photos import build_image_parquet
        from raydata_course.lab.workload import ENCODED_SIDE

        rows_per_file = config.batch_rows  # one batch per file: see raydata_course.lab.workload
        files = -(-config.num_rows // rows_per_file)
        return build_image_parquet(self.out_dir / "data" / f"rows{config.batch_rows}-b1", files * rows_per_file,
                                   encoded_side=ENCODED_SIDE, rows_per_file=rows_per_file)

    def time_tasks(self, config: LabConfig, repeats: int = 3) -> dict[str, float]:
        """Seconds one block's producer work takes in a task on this cluster, nothing else running.

        Reads the first Parquet file of ``config``'s data and decodes ``config.batch_rows``
        of its rows with :func:`~raydata_course.lab.workload.decode_and_augment`, ``repeats``
        times, inside one Ray task (1 CPU), timed there with ``time.perf_counter``.

        Returns:
            ``{"read_block_s", "decode_block_s", "read_block_cpu_s", "decode_block_cpu_s",
            "read_block_bytes"}``: medians in seconds per block of ``config.batch_rows`` rows
            (the read is the file's read over its blocks), as wall time (``*_block_s``, what
            the machine's load at that moment allowed) and as the task's CPU time
            (``*_cpu_s``, ``time.process_time``: the work itself), and the encoded block's
            bytes. The playground's simulator (:mod:`raydata_course.lab.model_check`) takes
            these as its operators, at both speeds, beside the run's own seconds per block
            (``RunResult.operator_generation``).
        """
        import ray

        path = sorted(self.data_dir(config).glob("part-*.parquet"))[0]
        return ray.get(ray.remote(num_cpus=1)(_time_block_tasks).remote(str(path), config.batch_rows, repeats))

    def time_push_send(self, config: LabConfig, repeats: int = 5) -> float:
        """Seconds a push split's delivery takes on this cluster: an actor call that carries one
        block's ref as a top-level argument, as the coordinator's sender makes it
        (``host.__ray_call__.remote(deliver, ..., ref)``, :mod:`raydata_course.push_split.sender`),
        timed from the call to its reply in the driver, median over ``repeats``. The block is
        ``config.batch_bytes`` bytes, already in the object store. The simulator's ``send_s``
        (:mod:`raydata_course.sim.push`).
        """
        import numpy as np
        import ray

        host = ray.remote(num_cpus=0)(_DeliveryHost).remote()
        try:
            ray.get(host.__ray_call__.remote(_block_bytes, None))
            ref = ray.put(np.zeros(config.batch_bytes, dtype=np.uint8))
            times = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                ray.get(host.__ray_call__.remote(_block_bytes, ref))
                times.append(time.perf_counter() - t0)
            del ref
        finally:
            ray.kill(host)
        return statistics.median(times)

    def producer_rate(self, config: LabConfig) -> dict[str, float]:
        """The producer alone: drain ``config``'s dataset in the driver under its budget with no
        training, as fast as it comes (``iter_batches``, one epoch).

        Returns:
            ``{"producer_batches_per_s", "first_batch_s", "batches"}``: batches per second after
            the first batch, the seconds to the first batch, and the batches drained.
        """
        import ray.data

        from raydata_course.lab.workload import build_dataset

        ctx = ray.data.DataContext.get_current()
        ctx.execution_options.resource_limits = ctx.execution_options.resource_limits.copy(
            object_store_memory=config.budget_bytes)
        ds = build_dataset(config, self.data_dir(config))
        t0 = time.perf_counter()
        first, batches = None, 0
        for _ in ds.iter_batches(batch_size=config.batch_rows, batch_format="numpy",
                                 prefetch_batches=config.prefetch_batches):
            batches += 1
            if first is None:
                first = time.perf_counter()
        end = time.perf_counter()
        rate = (batches - 1) / (end - first) if first is not None and end > first else 0.0
        return {"producer_batches_per_s": round(rate, 3), "first_batch_s": round((first or end) - t0, 3),
                "batches": batches}

    def run(self, config: LabConfig) -> list[RunResult]:
        """Run one variant (``config.epochs`` epochs) and measure each epoch as a repeat."""
        import ray
        import ray.data

        from raydata_course.measure.store import PlasmaSampler, settle_store, time_probe_cost_s
        from raydata_course.lab.workload import build_dataset, consume_in_driver

        data_dir = self.data_dir(config)
        settle_store(empty_bytes=8 * MiB, timeout_s=30.0, quiet_s=None)  # earlier runs' blocks are gone
        ray.get(self.recorder.drain.remote())
        ray.get(self.recorder.drain_windows.remote())
        ctx = ray.data.DataContext.get_current()
        ctx.execution_options.resource_limits = ctx.execution_options.resource_limits.copy(
            object_store_memory=config.budget_bytes)

        # Classify every object that lives in plasma: the decoded blocks, and the smaller
        # encoded ones upstream. Anything larger than Ray's inline limit goes to plasma.
        sampler = PlasmaSampler(interval_s=0.1, classify_every=3, min_object_bytes=PLASMA_MIN_OBJECT_BYTES)
        probe_cost = time_probe_cost_s(sampler)
        spilled0 = sampler.sample().spilled_bytes_total
        wall_start = time.perf_counter()
        sampler.start()
        t_wall0 = time.time()
        try:
            ds = build_dataset(config, data_dir)
            if config.mode == "driver":
                records = consume_in_driver(ds, config)
            else:
                self._run_trainer(ds, config)
                records = []
        finally:
            samples = sampler.stop()
        wall_s = time.perf_counter() - wall_start
        time.sleep(PROBE_FLUSH_WAIT_S)
        probe_samples, worker_records = ray.get(self.recorder.drain.remote())
        windows = ray.get(self.recorder.drain_windows.remote())
        records = records or worker_records
        if not records:
            raise RuntimeError(f"{config.name}: no consumer reported its epochs; see the Ray Train logs above.")
        results = []
        for epoch in range(config.epochs):
            epoch_records = [r for r in records if r["epoch"] == epoch]
            start = min(r["t_start_wall_s"] for r in epoch_records) - t_wall0
            end = max(r["t_end_wall_s"] for r in epoch_records) - t_wall0
            in_window = [x for x in samples if start <= x.t_s <= end]
            probes = [p for p in probe_samples if start <= p["t_wall_s"] - t_wall0 <= end]
            result = measure_epoch(config, epoch, in_window, probes, epoch_records, t_wall0,
                                   end - start, spilled0, probe_cost, total_wall_s=wall_s,
                                   windows=[w for w in windows if start <= w["t"] - t_wall0 <= end])
            result.free_objects_period_ms = self.free_objects_period_ms
            results.append(result)
        return results

    def _run_trainer(self, ds, config: LabConfig) -> None:
        from ray.train import RunConfig, ScalingConfig
        from ray.train.torch import TorchConfig, TorchTrainer

        from raydata_course.lab.workload import train_loop_per_worker

        from raydata_course.push_split.train import PushDataConfig

        use_gpu = config.device == "cuda"
        dataset_config = PushDataConfig(window=config.push_window, steer_on_store=config.push_steer_on_store) \
            if config.split == "push" else None
        trainer = TorchTrainer(
            train_loop_per_worker,
            train_loop_config=asdict(config),
            torch_config=TorchConfig(backend="nccl" if use_gpu else "gloo"),
            scaling_config=ScalingConfig(num_workers=config.consumers, use_gpu=use_gpu,
                                         resources_per_worker={"CPU": config.cpus_per_worker}),
            datasets={"train": ds},
            dataset_config=dataset_config,
            run_config=RunConfig(storage_path=str((self.out_dir / "ray_results").resolve()),
                                 name=f"{config.name}-{int(time.time() * 1000)}"),
        )
        trainer.fit()


class _DeliveryHost:
    """An actor that stands for the process hosting a push split (:meth:`LabSession.time_push_send`)."""


def _block_bytes(host, block) -> int:
    """The body of a timed delivery: the block arrives resolved; its bytes (0 for none)."""
    return 0 if block is None else int(block.nbytes)


def _time_block_tasks(path: str, batch_rows: int, repeats: int) -> dict[str, float]:
    """Body of the task behind :meth:`LabSession.time_tasks` (median seconds per block)."""
    import pyarrow.parquet as pq

    from raydata_course.lab.workload import decode_and_augment

    reads, decodes, read_cpu, decode_cpu, read_bytes = [], [], [], [], 0
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        table = pq.read_table(path)
        share = batch_rows / max(1, table.num_rows)
        reads.append((time.perf_counter() - t0) * share)
        read_cpu.append((time.process_time() - c0) * share)
        read_bytes = table.nbytes * batch_rows // max(1, table.num_rows)
        batch = {"image": table.column("image").to_numpy(zero_copy_only=False)[:batch_rows],
                 "label": table.column("label").to_numpy()[:batch_rows]}
        t0, c0 = time.perf_counter(), time.process_time()
        decode_and_augment(batch)
        decodes.append(time.perf_counter() - t0)
        decode_cpu.append(time.process_time() - c0)
    return {"read_block_s": statistics.median(reads), "decode_block_s": statistics.median(decodes),
            "read_block_cpu_s": statistics.median(read_cpu), "decode_block_cpu_s": statistics.median(decode_cpu),
            "read_block_bytes": read_bytes}
