"""What a rollout records from inside ``generate`` without an extra forward pass or full-vocabulary logits:
the BiGPO embedding (``HiddenCapture``, a hook on one decoder block at the prefill) and the sampled
tokens' log-probs PPO needs (``SampledLogprobs``, gathered step by step). ``agents.rollout`` arms both
around each step's ``generate``; ``agents.verl_bridge.hidden`` reads the same embedding inside verl.
"""
from __future__ import annotations

import time

import torch
from transformers import StoppingCriteria

from agents.models import decoder_layers, default_hidden_layer, layer_module_index
from agents.ppo import logit_terms


class HiddenCapture:
    """Forward hook on one decoder block that keeps its output at the last position of the next forward
    call only (the prefill of ``generate``), then stays idle for the decoding steps."""

    def __init__(self, model, layer: int | None):
        layers = decoder_layers(model)
        self.layer = default_hidden_layer(len(layers)) if layer is None else layer
        self.handle = layers[layer_module_index(self.layer, len(layers))].register_forward_hook(self._hook)
        self.armed, self.value = False, None
        self.seconds = 0.0          # time spent capturing (hook + normalisation), for the benchmark

    def _hook(self, module, args, output):
        t0 = time.perf_counter()
        if self.armed:
            h = output[0] if isinstance(output, tuple) else output
            self.value = h[:, -1, :].detach().float()
            self.armed = False
        self.seconds += time.perf_counter() - t0

    def arm(self) -> None:
        self.armed, self.value = True, None

    def remove(self) -> None:
        self.handle.remove()


class SampledLogprobs(StoppingCriteria):
    """Log-prob of each sampled token, gathered step by step during ``generate`` instead of keeping every
    step's full-vocabulary logits (``output_logits``: steps x rows x vocab floats, GiBs for a 150k vocab).

    A forward hook on the causal LM copies the last position's raw logits of each forward call, as
    ``generate`` itself reads them before any logits processor; ``generate`` then calls its stopping
    criteria with the token it just sampled appended, where this one gathers that token's log-prob at
    the rollout temperature and drops the logits. It never stops generation. Armed for one ``generate``."""

    def __init__(self, model, temperature: float):
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        self.handle = base.register_forward_hook(self._hook)
        self.temperature, self.armed = temperature, False
        self.pending, self.steps = None, []

    def _hook(self, module, args, output):
        if self.armed:
            self.pending = output.logits[:, -1]

    def __call__(self, input_ids, scores, **kwargs):
        if self.pending is not None:
            self.steps.append(logit_terms(self.pending, input_ids[:, -1], self.temperature, False)[0])
            self.pending = None
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    def arm(self) -> None:
        self.armed, self.pending, self.steps = True, None, []

    def take(self, n_tokens: int) -> torch.Tensor:
        """(rows, n_tokens) log-probs of the sampled tokens (``generate`` may have sampled steps it then
        dropped), and disarm."""
        self.armed, self.pending = False, None
        steps, self.steps = self.steps[:n_tokens], []
        if len(steps) < n_tokens:
            raise RuntimeError(f"recorded {len(steps)} sampled tokens' log-probs for {n_tokens} generated; "
                               "was generate() called through another module than the hooked causal LM?")
        return torch.stack(steps, 1)

    def remove(self) -> None:
        self.handle.remove()
