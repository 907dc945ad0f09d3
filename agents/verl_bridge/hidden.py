"""BiGPO's hidden state from the actor's old-log-prob forward, without a forward of its own.

    tap = HiddenStateTap(actor_module, layer=None)          # None: BiPACE's layer -12 of 28, scaled
    with tap.capture(last_prompt_positions(prompts.shape[1], n_rows)):
        logits = actor_module(input_ids=..., attention_mask=..., position_ids=...).logits   # verl's forward
    embedding = tap.value                                    # (n_rows, d) float32 -> "bipace_embedding"

The state kept is the chosen decoder block's output at each sample's last prompt token: the state the
policy answered from, the same vector ``agents.capture.HiddenCapture`` keeps from ``generate``'s
prefill in our own trainer. A forward hook reads it during the forward verl runs anyway (the old
log-probs), so no extra pass is made; micro-batches append in call order. Positions: with a
left-padded prompt + right-padded response layout the last prompt token of every row sits at column
``prompt_width - 1`` (``last_prompt_positions``); in verl's padding-free packed layout
(``use_remove_padding``) row i starts at ``cu_seqlens[i]`` (``packed_last_prompt_positions``). Under
Ulysses sequence parallelism each rank holds one slice of the packed sequence: ``capture(..., shard=
(rank, group))`` keeps the positions in this rank's slice and sums the (zero elsewhere) rows over the
group, so every rank ends with all of them. ``agents.verl_bridge.worker`` wires the tap into verl's
actor worker.
"""
from __future__ import annotations

from contextlib import contextmanager

import torch

from agents.models import decoder_layers, default_hidden_layer, layer_module_index


def last_prompt_positions(prompt_width: int, n_rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, columns) of each row's last prompt token in verl's padded (B, prompt + response) layout."""
    if prompt_width < 1:
        raise ValueError(f"prompt_width must be >= 1 (the padded prompt length); got {prompt_width}")
    return torch.arange(n_rows), torch.full((n_rows,), prompt_width - 1, dtype=torch.long)


def packed_last_prompt_positions(cu_seqlens: torch.Tensor, prompt_lens: torch.Tensor) -> tuple:
    """(rows, columns) in a padding-free (1, total) batch: row i starts at ``cu_seqlens[i]`` and its
    unpadded prompt has ``prompt_lens[i]`` tokens."""
    cu, lens = torch.as_tensor(cu_seqlens).long(), torch.as_tensor(prompt_lens).long()
    if cu.ndim != 1 or cu.numel() != lens.numel() + 1:
        raise ValueError(f"cu_seqlens needs one entry more than prompt_lens; got {cu.numel()} and "
                         f"{lens.numel()}")
    if (lens < 1).any() or (lens > cu.diff()).any():
        raise ValueError("every prompt must have between 1 token and its whole sequence's length")
    return torch.zeros(lens.numel(), dtype=torch.long), cu[:-1] + lens - 1


class HiddenStateTap:
    """Forward hook on one decoder block of ``model`` (an HF causal LM, peft- or FSDP-wrapped blocks
    alike) that, inside ``capture``, keeps the block's output at the given (row, column) positions."""

    def __init__(self, model, layer: int | None = None):
        layers = decoder_layers(model)
        self.layer = default_hidden_layer(len(layers)) if layer is None else layer
        self.handle = layers[layer_module_index(self.layer, len(layers))].register_forward_hook(self._hook)
        self.positions, self.shard, self.parts = None, None, []

    def _hook(self, module, args, output):
        if self.positions is None:
            return
        h = output[0] if isinstance(output, tuple) else output
        rows, cols = (p.to(h.device) for p in self.positions)
        if self.shard is None:
            self.parts.append(h[rows, cols].detach().float().cpu())
            return
        # sequence parallel: this rank holds columns [start, start + width) of the (padded) sequence
        rank, group = self.shard
        width = h.shape[1]
        start = rank * width
        mine = (cols >= start) & (cols < start + width)
        picked = torch.zeros(rows.numel(), h.shape[-1], dtype=torch.float32, device=h.device)
        picked[mine] = h[rows[mine], cols[mine] - start].detach().float()
        if group is not None:
            torch.distributed.all_reduce(picked, group=group)
        self.parts.append(picked.cpu())

    @contextmanager
    def capture(self, positions, shard: tuple | None = None):
        """Record during the forward(s) run inside the block; ``value`` then holds them, in call order.
        ``shard=(rank, group)``: the block sees rank's equal slice of the sequence dimension (Ulysses);
        the rows are summed over ``group`` (None: keep this rank's part, zero elsewhere)."""
        self.positions, self.shard, self.parts = positions, shard, []
        try:
            yield self
        finally:
            self.positions, self.shard = None, None

    @property
    def value(self) -> torch.Tensor:
        if not self.parts:
            raise RuntimeError("no forward ran through the tapped layer inside capture()")
        return torch.cat(self.parts)

    def remove(self) -> None:
        self.handle.remove()
