"""A training step's two clocks in the lab: the GPU stand-in (:func:`gpu_wait`) and the step
timer (:class:`StepTimer`: CUDA events on a GPU, wall and CPU time on the CPU, and each
batch's host-to-device copy).
"""

from __future__ import annotations

import time

__all__ = ["gpu_wait", "StepTimer"]

_CUDA_CYCLES_PER_S: dict = {}


def gpu_wait(seconds: float, device) -> None:
    """The GPU stand-in: keep the device busy for ``seconds`` (a pure wait for the host).

    On a CUDA device it runs ``torch.cuda._sleep`` (a kernel that spins for a number of GPU
    clock cycles), calibrated once per device with CUDA events, and waits for it; elsewhere
    it sleeps.

    Raises:
        RuntimeError: ``device`` is a CUDA device and torch sees no CUDA.
    """
    if seconds <= 0:
        return
    if getattr(device, "type", str(device)) != "cuda":
        time.sleep(seconds)
        return
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError(f"gpu_step_s={seconds} on {device}: torch sees no CUDA device "
                           f"(torch {torch.__version__}); run the CPU variants or use a CUDA build.")
    key = str(device)
    if key not in _CUDA_CYCLES_PER_S:
        cycles = 50_000_000
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        _CUDA_CYCLES_PER_S[key] = cycles / max(start.elapsed_time(end) / 1000.0, 1e-6)
    torch.cuda._sleep(int(seconds * _CUDA_CYCLES_PER_S[key]))
    torch.cuda.synchronize(device)


class StepTimer:
    """Times train steps: CUDA events on a GPU (device-side time), perf_counter on CPU; on
    a GPU it also makes and times each batch's host-to-device copy (:meth:`to_device`)."""

    def __init__(self, device):
        import torch

        self.cuda = getattr(device, "type", str(device)) == "cuda"
        self.device = device
        self.torch = torch
        self.step_s: list[float] = []
        self.step_cpu_s: list[float] = []
        self.wait_s: list[float] = []
        self.h2d_s: list[float] = []
        self.h2d_bytes: list[int] = []

    def to_device(self, batch: dict) -> dict:
        """Copy a batch of CPU tensors to the GPU, timed with CUDA events (seconds and bytes
        per copy in ``h2d_s``, ``h2d_bytes``); a CPU run returns the batch as it is."""
        if not self.cuda:
            return batch
        start, end = self.torch.cuda.Event(enable_timing=True), self.torch.cuda.Event(enable_timing=True)
        start.record()
        out = {k: v.to(self.device, non_blocking=True) for k, v in batch.items()}
        end.record()
        end.synchronize()
        self.h2d_s.append(start.elapsed_time(end) / 1000.0)
        self.h2d_bytes.append(sum(int(v.numel() * v.element_size()) for v in batch.values()))
        return out

    def run(self, fn):
        """Run one training step ``fn()``: its time goes to ``step_s`` (seconds; CUDA events on
        a GPU), the CPU seconds this process used meanwhile, all its threads, to ``step_cpu_s``
        (on CPU a step slower than its CPU seconds waited: for the other rank's gradients, or
        for a core another process held)."""
        c0 = time.process_time()
        if self.cuda:
            start, end = self.torch.cuda.Event(enable_timing=True), self.torch.cuda.Event(enable_timing=True)
            start.record()
            out = fn()
            end.record()
            end.synchronize()
            self.step_s.append(start.elapsed_time(end) / 1000.0)
        else:
            t0 = time.perf_counter()
            out = fn()
            self.step_s.append(time.perf_counter() - t0)
        self.step_cpu_s.append(time.process_time() - c0)
        return out
