"""Reading ``streaming_split`` iterators under a deadline, and shutting Ray down after them.

A reader blocked at the epoch barrier is given up on and ended; a reader that is only slow
(a busy machine) is not cut off; and ``raydata_course.shutdown()`` after either, or after a
Ray Data loop abandoned mid-epoch, leaves the process alive: Ray ends a process when a
thread calls it after ``ray.shutdown()`` (``raydata_course.ray_threads``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest


def _read_first_split_only(ds):
    first = ds.streaming_split(2)[0]
    return sum(len(b["id"]) for b in first.iter_batches())


def _read_slowly(ds, pause_s: float):
    """Both splits at once, one thread each, pausing ``pause_s`` after every batch."""
    from concurrent.futures import ThreadPoolExecutor

    def read(split):
        rows = 0
        for batch in split.iter_batches(batch_size=25):
            rows += len(batch["id"])
            time.sleep(pause_s)
        return rows

    with ThreadPoolExecutor(max_workers=2) as pool:
        return list(pool.map(read, ds.streaming_split(2, equal=True)))


def test_a_reader_blocked_at_the_barrier_is_given_up_on_and_ended(ray_cluster):
    import ray

    from raydata_course.chapters.ch05_split_checks import run_split_readers
    from raydata_course.ray_threads import tracked_alive

    start = time.monotonic()
    with pytest.raises(TimeoutError, match=r"received no block and no batch for 3 s; its 1 streaming_split coordinator"):
        run_split_readers(_read_first_split_only, 3, ray.data.range(100))
    assert time.monotonic() - start < 3 + 25  # the wait, and the blocked reader's end
    assert not [t for t in tracked_alive() if t.name.startswith("run_split_readers")]
    from ray.data._internal.iterator.stream_split_iterator import StreamSplitDataIterator

    # the progress watch is gone: both methods are Ray's own again
    assert "_create_batch_iterator" not in StreamSplitDataIterator.__dict__
    assert StreamSplitDataIterator._to_ref_bundle_iterator.__qualname__ == \
        "StreamSplitDataIterator._to_ref_bundle_iterator"


@pytest.mark.slow
def test_a_slow_reader_that_keeps_receiving_blocks_is_not_cut_off(ray_cluster):
    """Each batch takes 2 s, the whole read about 8 s: well past the 5 s without a block that
    would give up on it, which only a reader that receives nothing reaches."""
    import ray

    from raydata_course.chapters.ch05_split_checks import run_split_readers

    start = time.monotonic()
    rows = run_split_readers(_read_slowly, 5, ray.data.range(200, override_num_blocks=8), 2.0)
    assert sorted(rows) == [100, 100] and time.monotonic() - start > 5


def test_the_wait_from_the_barrier_to_the_first_block_is_start_up_not_a_stall(ray_cluster):
    """Past the barrier, both readers wait 4 s for the epoch's first block (the executor's
    first tasks; on a loaded machine, their worker processes starting): twice the 2 s without
    a block that gives up on a reader blocked at the barrier, and not cut off."""
    import ray

    from raydata_course.chapters.ch05_split_checks import run_split_readers

    def first_block_slow(batch):  # local, so that Ray's workers get it by value
        time.sleep(4)
        return batch

    ds = ray.data.range(20, override_num_blocks=2).map_batches(first_block_slow, batch_size=None)
    start = time.monotonic()
    rows = run_split_readers(_read_slowly, 2, ds, 0.0)
    assert sorted(rows) == [10, 10] and time.monotonic() - start > 4


_DRIVER = textwrap.dedent("""
    import sys, threading, time
    import ray
    import raydata_course as rc
    from raydata_course.chapters.ch05_split_checks import run_split_readers
    from raydata_course.ray_threads import track

    rc.setup()
    ds = ray.data.range(2000, override_num_blocks=20).map_batches(lambda b: b)
    for _ in range(2):  # loops abandoned mid-epoch by an error, their tracebacks kept
        try:
            for batch in ds.iter_batches(batch_size=10, prefetch_batches=4):
                raise ValueError("a failed check")
        except ValueError:
            kept = sys.exc_info()
    def first_only(ds):
        return sum(len(b["id"]) for b in ds.streaming_split(2)[0].iter_batches())
    try:
        run_split_readers(first_only, 2, ds)
    except TimeoutError as exc:
        print("timed out:", exc, flush=True)
    if sys.argv[1] == "stuck":  # a thread in a Ray call that outlasts the wait
        @ray.remote(num_cpus=0)
        def slow():
            time.sleep(30)
        track(threading.Thread(target=lambda: ray.get(slow.remote()), name="stuck-reader", daemon=True)).start()
    rc.shutdown(wait_s=2)
    print("alive after shutdown", ray.is_initialized(), flush=True)
""")


@pytest.mark.parametrize("case", ["settled", "stuck"])
def test_shutdown_after_readers_and_abandoned_loops_keeps_the_process_alive(ray_cluster, tmp_path, case):
    """The kernel of a graded notebook is such a driver: it reaches the grading cluster through
    RAY_ADDRESS, and its last cell calls ``rc.shutdown()``."""
    script = tmp_path / "driver.py"
    script.write_text(_DRIVER)
    env = {**os.environ, "RAY_ADDRESS": ray_cluster.address}
    proc = subprocess.run([sys.executable, str(script), case], capture_output=True, text=True, env=env, timeout=300)
    out = proc.stdout + proc.stderr
    assert "timed out: first_only gave up: its readers received no block and no batch for 2 s" in out, out[-3000:]
    assert "core worker has already been shutdown" not in out, out[-3000:]
    if case == "settled":
        assert "alive after shutdown False" in out and proc.returncode == 0, out[-3000:]
    else:  # still connected: disconnecting with a thread in a Ray call would end the process
        assert "alive after shutdown True" in out, out[-3000:]
        assert "1 thread(s) still in Ray calls (stuck-reader)" in out, out[-3000:]
