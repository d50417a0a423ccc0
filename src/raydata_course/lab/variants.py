"""The lab's variants: slow and fast consumers, in the driver and under Ray Train, on CPU or GPU.

Examples:
    >>> [v.name for v in variants_for("cpu", quick=True, push=True)]
    ['driver-slow', 'train-slow', 'train-slow-push']
"""

from __future__ import annotations

from raydata_course.lab.workload import ROW_BYTES, LabConfig
from raydata_course.units import MiB

__all__ = ["variants_for", "GPU_STEP_S", "CPU_STEP_ROWS", "FAST_STEP_ROWS"]

#: the consumer-bound Train variant's GPU stand-in: seconds of pure wait per step
#: (``LabConfig.gpu_step_s``), long enough that the producer alone outruns two consumers on
#: two cores (``make lab`` prints both rates)
GPU_STEP_S = 0.6
#: ... and the rows of each batch its real training step runs on (a CPU part of a few ms)
CPU_STEP_ROWS = 8
#: the producer-bound Train variant's step: a real training step on this many rows of each
#: batch, with no wait, so that the two consumers alone take batches faster than the
#: producer alone makes them (``make lab`` prints both rates). Trained on whole 32 MiB
#: batches instead, each step takes about 0.35 s of the two cores the decode needs too: the
#: producer then outruns its consumers and decodes ahead (pull: 605 MiB stored as the epoch's
#: middle opened, lab run 20261206T022813Z-222213), and the variant is bound by neither side.
FAST_STEP_ROWS = 32


def variants_for(device: str, quick: bool, push: bool = False, fast_step_rows: int = FAST_STEP_ROWS) -> list[LabConfig]:
    """The lab's variants: slow and fast consumers, in the driver and under Ray Train.

    CPU: 32 MiB batches, ``prefetch_batches=4``, a 256 MiB Ray Data budget in a 2 GiB store,
    2 TorchTrainer workers (gloo), 20 batches per consumer and 3 epochs (each epoch is a
    fresh execution, measured as one repeat). GPU: 96 MiB batches (a batch must stay one
    block, under the 128 MiB ``target_max_block_size``), real host-to-device copies, a 1 GiB
    budget in an 8 GiB store, one DDP (NCCL) worker per GPU (NCCL allows one rank per GPU).
    ``driver-slow`` sleeps 0.25 s after each real step; ``train-slow`` stands for a GPU job:
    each step is ``GPU_STEP_S`` of pure wait (a CUDA kernel on a GPU) and a real step on
    ``CPU_STEP_ROWS`` rows; ``driver-fast`` trains on whole batches with no wait;
    ``train-fast`` is producer-bound: a real step on ``fast_step_rows`` rows (default
    ``FAST_STEP_ROWS``; 0: the whole batch, as the variant was before), no wait.
    ``quick`` keeps only the slow variants, one epoch of 12 (driver) or 8 (Train) batches.
    ``push`` adds, after each Train variant, the same variant sharded by the push-based
    split (``<name>-push``).
    """
    if device == "cuda":
        import torch

        gpus = max(1, torch.cuda.device_count())
        base = LabConfig(name="", device="cuda", batch_rows=(96 * MiB) // ROW_BYTES,
                         budget_bytes=1024 * MiB, object_store_bytes=8192 * MiB, num_cpus=8,
                         batches_per_consumer=32, cpus_per_worker=1.0)
        train_consumers = gpus
    else:
        base = LabConfig(name="", batches_per_consumer=20)
        train_consumers = 2
    slow, fast = 0.25, 0.0
    variants = [
        base.with_(name="driver-slow", mode="driver", consumers=1, step_delay_s=slow),
        # consumer-bound, a GPU job: each step is a pure wait of GPU_STEP_S and a tiny CPU part
        base.with_(name="train-slow", mode="train", consumers=train_consumers, step_delay_s=0.0,
                   gpu_step_s=GPU_STEP_S, cpu_step_rows=CPU_STEP_ROWS),
    ]
    if not quick:
        variants += [
            base.with_(name="driver-fast", mode="driver", consumers=1, step_delay_s=fast),
            # producer-bound: the consumers alone outrun the producer alone
            base.with_(name="train-fast", mode="train", consumers=train_consumers, step_delay_s=fast,
                       cpu_step_rows=fast_step_rows),
        ]
    if push:
        variants = [w for v in variants
                    for w in ([v, v.with_(name=f"{v.name}-push", split="push")] if v.mode == "train" else [v])]
    if quick:
        # Enough batches for each buffer to fill once (the driver needs more: its producer
        # has all the CPUs), few enough to finish in about 90 s on two cores.
        return [v.with_(batches_per_consumer=12 if v.mode == "driver" else 8, epochs=1) for v in variants]
    return [v.with_(epochs=3) for v in variants]
