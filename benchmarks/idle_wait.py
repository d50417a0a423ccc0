"""What a budget-bound executor's spin costs, and what the push split's idle wait saves: one run.

    .venv/bin/python benchmarks/idle_wait.py [--rounds 3] [--epochs 3]

Two consumer actors read the two push splits of a dataset whose executor is held at its
object-store budget (4 MiB blocks under a 24 MiB budget) by consumers slower than the
producer: each batch is followed by a training step that keeps the CPU busy for
``--step-s`` seconds (a NumPy loop, not a sleep: the trainers need the cores, as in the lab).
Each round runs the same epochs twice, once with ``push_split(..., idle_wait=False)`` (a
``LoopMeter`` only measures Ray Data's own loop) and once with ``idle_wait=True``, in turn
(off on off on ...), so that a machine whose speed drifts affects both alike.

Per epoch it reads the executor's loop figures from the split's ``debug_state()``
(``raydata_course.push_split.idle``): the CPU seconds of its scheduling thread, the steps
that were stuck (quick, and changing nothing), the waits and the seconds waited. It also
times the epoch and the consumers' training steps (wall seconds, median). The table gives
the medians over rounds and epochs per setting, and the ratio of the idle wait's loop CPU to
the spin's: the cost the idle wait removes from the process that runs the executor.

Every figure is measured on this machine in this run; compare the ratios, not the seconds,
across machines.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

MiB = 1 << 20


def _dataset(blocks: int, budget_bytes: int):
    """``blocks`` blocks of 4 MiB (8 rows of 512 KiB) with an ``id`` column, under an
    object-store budget of ``budget_bytes``."""
    import numpy as np
    import ray

    def decode(batch):
        return {"id": batch["id"], "data": np.ones((len(batch["id"]), 512 * 1024), dtype=np.uint8)}

    ds = ray.data.range(blocks * 8, override_num_blocks=blocks).map_batches(decode, batch_size=None)
    ds.context.execution_options.resource_limits = ray.data.ExecutionResources(object_store_memory=budget_bytes)
    return ds


def _consumer_class():
    import ray

    @ray.remote(num_cpus=0, max_concurrency=4)  # a host must accept deliveries while it iterates
    class Trainer:
        def epoch(self, split, batch_rows: int, step_s: float) -> dict:
            """One epoch: rows seen, the epoch's wall seconds and each step's wall seconds."""
            import numpy as np

            rows, steps_s = 0, []
            start = time.monotonic()
            work = np.ones((256, 256))
            for batch in split.iter_batches(batch_size=batch_rows, prefetch_batches=2):
                rows += len(batch["id"])
                del batch
                t0 = time.monotonic()
                while time.monotonic() - t0 < step_s:  # a training step that needs a core
                    work = work @ work / 256.0
                steps_s.append(time.monotonic() - t0)
            return {"rows": rows, "epoch_s": time.monotonic() - start, "steps_s": steps_s}

    return Trainer


def run_setting(idle_wait: bool, epochs: int, blocks: int, step_s: float, trainers) -> list[dict]:
    """``epochs`` epochs of fresh push splits; one dict per epoch with its loop figures."""
    import ray

    from raydata_course.push_split import push_split

    splits = push_split(_dataset(blocks, 24 * MiB), 2, equal=True, idle_wait=idle_wait)
    out = []
    for epoch in range(epochs):
        results = ray.get([t.epoch.remote(s, 8, step_s) for t, s in zip(trainers, splits)], timeout=600)
        if sum(r["rows"] for r in results) != blocks * 8:
            raise RuntimeError(f"epoch {epoch}: {sum(r['rows'] for r in results)} rows, expected {blocks * 8}")
        out.append({"epoch_s": max(r["epoch_s"] for r in results),
                    "step_s": statistics.median(s for r in results for s in r["steps_s"])})
    state = splits[0].debug_state()
    idles = [e["idle"] for e in state["finished_epochs"]] + [state["idle"]]
    for row, idle in zip(out, idles[-epochs:]):
        row.update(idle)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--blocks", type=int, default=40, help="4 MiB blocks per epoch")
    parser.add_argument("--step-s", type=float, default=0.15, help="CPU seconds of each training step")
    args = parser.parse_args(argv)

    import raydata_course as rc

    rc.setup(num_cpus=4, object_store_memory_bytes=512 * MiB)
    try:
        trainers = [_consumer_class().remote() for _ in range(2)]
        rows: dict[bool, list[dict]] = {False: [], True: []}
        for r in range(args.rounds):
            for idle_wait in (False, True):
                epochs = run_setting(idle_wait, args.epochs, args.blocks, args.step_s, trainers)
                rows[idle_wait].extend(epochs)
                print(f"round {r + 1}/{args.rounds}, idle_wait={idle_wait}: loop CPU s per epoch "
                      + ", ".join(f"{e['loop_cpu_s']:.2f}" for e in epochs)
                      + "; stuck steps " + ", ".join(str(e["stuck_steps"]) for e in epochs), flush=True)
    finally:
        rc.shutdown()

    med = statistics.median
    print(f"\n{args.rounds} rounds x {args.epochs} epochs per setting, {args.blocks} blocks of 4 MiB, 24 MiB budget, "
          f"2 consumers, {args.step_s:.2f} CPU-s per step; medians per epoch\n")
    print("| idle wait | loop CPU s | stuck steps | waits | waited s | epoch s | step s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for idle_wait, name in ((False, "off (spin)"), (True, "on")):
        e = rows[idle_wait]
        print(f"| {name} | {med(x['loop_cpu_s'] for x in e):.2f} | {med(x['stuck_steps'] for x in e):.0f} | "
              f"{med(x['waits'] for x in e):.0f} | {med(x['waited_s'] for x in e):.2f} | "
              f"{med(x['epoch_s'] for x in e):.2f} | {med(x['step_s'] for x in e):.3f} |")
    off, on = (med(x["loop_cpu_s"] for x in rows[w]) for w in (False, True))
    epoch_off, epoch_on = (med(x["epoch_s"] for x in rows[w]) for w in (False, True))
    print(f"\nloop CPU, on / off: {on / off:.2f}; epoch time, on / off: {epoch_on / epoch_off:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
