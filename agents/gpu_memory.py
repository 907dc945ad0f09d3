"""Peak GPU memory of each training phase (rollout, old log-probs, update) for train.csv and the progress
line. nvidia-smi shows what PyTorch's caching allocator holds, which grows to whatever was ever free to
take; these figures say what a phase needed at its peak (allocated) and what it made the allocator hold
(reserved). Off CUDA nothing is recorded and no columns are added.

    memory = PhaseMemory("cuda")
    with memory.phase("rollout"):
        ...
    memory.take()   # {"mem_rollout_alloc_gib": 9.7, "mem_rollout_reserved_gib": 12.0}, then cleared
"""
from __future__ import annotations

from contextlib import contextmanager

import torch

GIB = 2 ** 30


class PhaseMemory:
    """Peak allocated/reserved GiB per named phase since the last ``take``. Phases must not nest: each
    resets the device's peak counters when it starts."""

    def __init__(self, device):
        self.device = torch.device(device)
        self.on = self.device.type == "cuda"
        self.peaks: dict[str, tuple[float, float]] = {}

    @contextmanager
    def phase(self, name: str):
        if not self.on:
            yield
            return
        torch.cuda.synchronize(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        try:
            yield
        finally:
            torch.cuda.synchronize(self.device)
            self.peaks[name] = (torch.cuda.max_memory_allocated(self.device) / GIB,
                                torch.cuda.max_memory_reserved(self.device) / GIB)

    def take(self) -> dict:
        """The recorded phases as log columns (``mem_<phase>_alloc_gib``, ``mem_<phase>_reserved_gib``);
        clears them."""
        out = {}
        for name, (alloc, reserved) in self.peaks.items():
            out[f"mem_{name}_alloc_gib"] = round(alloc, 3)
            out[f"mem_{name}_reserved_gib"] = round(reserved, 3)
        self.peaks = {}
        return out


def progress_text(metrics: dict) -> str | None:
    """'<peak allocated>/<peak reserved>G' over an iteration's phases, for the progress bar (None off
    CUDA)."""
    alloc = [v for k, v in metrics.items() if k.startswith("mem_") and k.endswith("_alloc_gib")]
    reserved = [v for k, v in metrics.items() if k.startswith("mem_") and k.endswith("_reserved_gib")]
    return f"{max(alloc):.1f}/{max(reserved):.1f}G" if alloc else None


def prefer_expandable_segments() -> None:
    """Ask PyTorch's CUDA allocator for expandable segments unless the user chose allocator settings: the
    rollout's KV caches grow by a token each step and the update's batches change shape, which leaves the
    default allocator holding many odd-sized blocks (what nvidia-smi then reports). It only takes effect
    before CUDA's first allocation, so call it before loading the model."""
    import os
    if "PYTORCH_CUDA_ALLOC_CONF" not in os.environ and "PYTORCH_ALLOC_CONF" not in os.environ \
            and not torch.cuda.is_initialized():
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
