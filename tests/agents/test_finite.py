"""Finite numbers: bad settings refused when parsed, and a NaN in the advantages, the loss or the weights
stops the run before anything non-finite is stepped into the adapter or saved."""
import numpy as np
import pytest
import torch

from agents.cli import main
from agents.config import TrainConfig
from agents.presets import config_from_args
from agents.trainer import Trainer
from fake_env import FakeCraftEnv


def _cfg(out, **kw):
    base = dict(env="textcraft", estimator="bipace", model="tiny", out_dir=str(out), batch_tasks=2,
                group_size=2, max_new_tokens=6, max_steps=3, iterations=3, eval_every=0, eval_tasks=2,
                eval_batch=2, checkpoint_every=1, lora_rank=4, lora_alpha=8, lr=1e-2, mini_batch_rows=4,
                micro_batch_rows=3, tensorboard=False, progress=False)
    return TrainConfig(**{**base, **kw})


def _trainer(cfg, cls=Trainer):
    return cls(cfg, make_env=lambda: FakeCraftEnv(max_steps=3), train_tasks=list(range(8)), eval_tasks=[8, 9])


@pytest.mark.parametrize("setting, named", [
    ("step_weight=nan", "step_weight must be a finite number"),
    ("invalid_penalty=inf", "invalid_penalty must be a finite number"),
    ("entropy_coef=-inf", "entropy_coef must be a finite number"),
    ('estimator_options={"hca_weight": NaN}', "--estimator-options hca_weight must be finite"),
    ('estimator_options={"epsilon": Infinity}', "--estimator-options epsilon must be finite"),
    ("lr=nan", "lr must be a finite number"),
    ("lr=-1", "lr must be > 0, or auto"),
    ("iterations=0", "iterations must be >= 1"),
    ("group_size=0", "group_size must be >= 1"),
    ("batch_tasks=0", "batch_tasks must be >= 1"),
    ("eval_tasks=-1", "eval_tasks must be >= 0"),
    ("temperature=0", "temperature must be > 0"),
])
def test_a_bad_setting_is_refused_when_parsed_naming_the_field(setting, named, tmp_path, capsys):
    with pytest.raises(ValueError, match=named):
        config_from_args(["--preset", "smoke", "--set", setting])
    assert main(["--preset", "smoke", "--set", setting, "--out-dir", str(tmp_path / "run")]) == 2
    assert named in capsys.readouterr().err and not (tmp_path / "run").exists()
    field, value = setting.split("=", 1)
    if not field.endswith("options"):       # the Python API checks the same way
        with pytest.raises(ValueError, match=named):
            TrainConfig(**{field: float(value) if "." in value or value[-1].isalpha() else int(value)})


def test_lr_auto_is_explicit_and_zero_still_means_auto():
    assert config_from_args(["--preset", "smoke", "--set", "lr=auto"]).lr == 0.0
    assert config_from_args(["--lr", "auto"]).lr == 0.0 == TrainConfig(lr="auto").lr
    auto = TrainConfig(model="tiny", lr="auto")
    assert auto.lr == 0.0 and auto.resolved_lr() == TrainConfig(model="tiny", lr=0.0).resolved_lr() > 0


def test_non_finite_advantages_stop_the_run_naming_the_estimator_its_options_and_rows(tmp_path, monkeypatch):
    from estimators.registry import REGISTRY, Estimator

    def broken(batch, o):
        adv = np.zeros(len(batch))
        adv[1:3] = np.nan
        return adv
    monkeypatch.setitem(REGISTRY, "broken_test", Estimator(broken))
    tr = _trainer(_cfg(tmp_path, estimator="broken_test", step_weight=0.5))
    before = {n: p.detach().clone() for n, p in tr.model.named_parameters() if p.requires_grad}
    named = (r"estimator 'broken_test' with options \{.*'step_weight': 0\.5.* gave 2 non-finite "
             r"advantage\(s\) .*first: row 1 \(group .*row 2")
    with pytest.raises(ValueError, match=named) as stop:
        tr.iteration(1)
    assert type(stop.value).__name__ == "NonFiniteError"
    assert all(torch.equal(p, before[n]) for n, p in tr.model.named_parameters() if p.requires_grad)


class InfiniteAtIteration2(Trainer):
    """Finite advantages too large for float32: the loss of iteration 2 overflows."""

    def advantages(self, ro):
        adv = super().advantages(ro)
        return np.full_like(adv, 1e39) if self.current_iteration == 2 else adv


def test_a_non_finite_loss_stops_before_the_step_and_keeps_the_last_checkpoint(tmp_path):
    tr = _trainer(_cfg(tmp_path), InfiniteAtIteration2)
    with pytest.raises(ValueError, match=r"non-finite loss .* at iteration 2, PPO epoch 1, rows 1-"):
        tr.train()
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["iter_000001", "latest"]
    assert not (tmp_path / "adapter").exists() and not (tmp_path / "summary.json").exists()
    assert all(torch.isfinite(p).all() for p in tr.model.parameters())     # the step was not taken
    resumed = _trainer(_cfg(tmp_path, resume=True))                         # the last good checkpoint
    assert resumed.start_iteration == 2


def test_non_finite_weights_are_never_saved(tmp_path):
    from agents.checkpoints import save_adapter
    from agents.finite import NonFiniteError
    tr = _trainer(_cfg(tmp_path))
    lora = next(p for n, p in tr.model.named_parameters() if "lora_A" in n)
    with torch.no_grad():
        lora[0, 0] = float("nan")
    with pytest.raises(NonFiniteError, match="lora_A.*checkpoint 1 was not saved"):
        tr.save_checkpoint(1)
    with pytest.raises(NonFiniteError, match="was not saved"):
        save_adapter(tr.model, tmp_path / "adapter")
    assert not (tmp_path / "checkpoints").exists() and not (tmp_path / "adapter").exists()
