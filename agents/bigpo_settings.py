"""Named BiGPO/BiPACE settings: at which hidden layer a state is embedded and within which cosine radius two
states share a cluster. ``TrainConfig.bigpo_setting`` picks one by name; ``--hidden_layer`` and
``--eps``, when set, override its layer or radius.

    setting = get_bigpo_setting("paper")
    layer, eps = setting.layer_for("smollm2-135m"), setting.eps_for("smollm2-135m")    # None, 0.05

- ``paper``: BiPACE's published setting (../shared/specs/estimators.md §6): ``hidden_states[-12]`` of a
  28-block model, i.e. 17/28 of the depth, scaled to any model (``models.default_hidden_layer``; the layer is
  None here because the block count is known only once the model is loaded), and cosine radius 0.05.
- ``paper-7b``: the paper's 7B row: ``hidden_states[-8]`` (21 of 28 blocks) and radius 0.10.
- ``anchor-calibrated``: the layer and radius whose clusters reproduce GiGPO's exact anchors on a model's
  warm start (``benchmarks/credit/eps_calibration.py``); only models with a measured calibration have one.

Which setting each preset uses, and the evidence for it: docs/estimators.md ("BiGPO settings").
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Calibration:
    """A model's anchor-calibrated layer and radius, and what measured them."""
    layer: int
    """HF ``hidden_states`` index (negative counts from the last block)."""
    eps: float
    """Cosine-distance radius."""
    source: str
    """The measurement behind them."""


# At 17/28 of SmolLM2-135M's depth the warm start's states lie so close that no radius separates them (eps
# 0.002: 39% of rows share a cluster with another state); the last block's output at 0.002 merges 3% and
# splits 33% of same-state rows (a state reached along different histories).
ANCHOR_CALIBRATIONS: dict[str, Calibration] = {
    "smollm2-135m": Calibration(-1, 0.002,
                                "benchmarks/credit/eps_calibration.py on the TextCraft warm start"),
}


@dataclass(frozen=True)
class BigpoSetting:
    """A named rule giving any model its BiGPO layer and radius."""
    name: str
    doc: str
    layer: int | None = None
    """Fixed HF ``hidden_states`` index, or None: the paper's relative depth scaled to the model."""
    eps: float | None = None
    """Fixed radius, or None: the model's calibration (``ANCHOR_CALIBRATIONS``)."""
    calibrated: bool = False
    """Layer and radius come from the model's calibration."""

    def _calibration(self, model: str) -> Calibration:
        if model not in ANCHOR_CALIBRATIONS:
            raise ValueError(f"bigpo_setting {self.name!r} has no calibration for model {model!r} "
                             f"(calibrated: {sorted(ANCHOR_CALIBRATIONS)}); use bigpo_setting=paper, or "
                             "measure one with benchmarks/credit/eps_calibration.py and pass --hidden_layer "
                             "and --eps")
        return ANCHOR_CALIBRATIONS[model]

    def layer_for(self, model: str) -> int | None:
        """HF ``hidden_states`` index for ``model``, or None for the paper's depth scaled to its blocks."""
        return self._calibration(model).layer if self.calibrated else self.layer

    def eps_for(self, model: str) -> float:
        return self._calibration(model).eps if self.calibrated else float(self.eps)


BIGPO_SETTINGS: dict[str, BigpoSetting] = {s.name: s for s in (
    BigpoSetting("paper", "BiPACE's 1.5B setting: 17/28 of the blocks (hidden_states[-12] of 28), "
                 "radius 0.05", layer=None, eps=0.05),
    BigpoSetting("paper-7b", "BiPACE's 7B setting: hidden_states[-8] (21 of 28 blocks), radius 0.10",
                 layer=-8, eps=0.10),
    BigpoSetting("anchor-calibrated", "the layer and radius whose clusters reproduce GiGPO's exact "
                 "anchors on the model's warm start (ANCHOR_CALIBRATIONS)", calibrated=True),
)}


def get_bigpo_setting(name: str) -> BigpoSetting:
    if name not in BIGPO_SETTINGS:
        raise ValueError(f"unknown bigpo_setting {name!r}; named settings: {sorted(BIGPO_SETTINGS)}")
    return BIGPO_SETTINGS[name]
