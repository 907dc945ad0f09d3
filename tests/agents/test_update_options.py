"""Update-cost options: the shared-prefix update (task prefixes and episode histories run once) equals the
plain one, mini-batches can hold whole episodes, zero-advantage rows can be left out, and LoRA can sit on
the top blocks only."""
import numpy as np
import pytest
import torch

from agents.prefix import split_prompts, split_spines
from agents.row_order import by_episode, shuffled_rows
from test_trainer import _cfg, _trainer


def _update(tmp_path, adv_of, **kw):
    tr = _trainer(_cfg(tmp_path, **kw))
    ro, rng = tr.rollout(1)
    adv = adv_of(len(ro.response_ids))
    before = {n: p.detach().clone() for n, p in tr.model.named_parameters() if p.requires_grad}
    out = tr.update(ro, adv, rng)
    moved = {n for n, p in tr.model.named_parameters() if p.requires_grad and not torch.equal(before[n], p)}
    return tr, ro, out, moved


def test_update_with_shared_prefixes_equals_the_plain_update(tmp_path, monkeypatch):
    monkeypatch.setattr("agents.prefix.MIN_TOKEN_SAVING", -np.inf)   # share even where it saves little
    adv = lambda n: np.linspace(-1.0, 1.0, n)   # noqa: E731
    shared, ro, out_s, _ = _update(tmp_path / "a", adv, share_prefix=True)
    plain, _, out_p, _ = _update(tmp_path / "b", adv, share_prefix=False)
    assert len(set(ro.prefix_keys)) < len(ro.prefix_keys)         # rows really shared prefixes
    longest = np.bincount(ro.env_index).argmax()                 # and an episode's rows its history
    rows = np.flatnonzero(ro.env_index == longest)
    split = split_prompts([ro.prompt_ids[r] for r in rows], [ro.prefix_keys[r] for r in rows], 0)
    assert len(rows) > 1 and split_spines(split, [longest] * len(rows)) is not None
    assert out_s["loss"] == pytest.approx(out_p["loss"], rel=1e-4, abs=1e-6)
    for (n, a), (_, b) in zip(shared.model.named_parameters(), plain.model.named_parameters()):
        assert torch.allclose(a, b, atol=1e-4), n   # Adam at lr 1e-2 magnifies float-order noise


def test_episode_minibatches_keep_each_episodes_rows_together_in_step_order(tmp_path):
    tr = _trainer(_cfg(tmp_path))
    assert tr.cfg.compact() and tr.cfg.episode_minibatches()     # auto: episodes with compact prompts
    ro, rng = tr.rollout(1)
    rows = np.arange(len(ro.response_ids))
    order = shuffled_rows(ro, rows, rng, by_episode(tr.cfg, ro))
    assert sorted(order.tolist()) == rows.tolist()
    episode = ro.env_index[order]
    assert np.count_nonzero(episode[1:] != episode[:-1]) == len(np.unique(episode)) - 1
    assert all((np.diff(order[episode == e]) > 0).all() for e in np.unique(episode))
    with pytest.raises(ValueError, match="minibatch_unit"):
        _trainer(_cfg(tmp_path / "bad", minibatch_unit="step"))


def test_zero_advantage_rows_can_be_left_out_of_the_update(tmp_path):
    zeros = lambda n: np.zeros(n)   # noqa: E731
    _, _, kept, moved_kept = _update(tmp_path / "a", zeros, skip_zero_adv=False)
    _, _, skipped, moved_skipped = _update(tmp_path / "b", zeros, skip_zero_adv=True, mini_batch_rows=0)
    assert moved_kept and kept["kl"] >= 0              # KL and entropy terms still move the adapter
    assert not moved_skipped and skipped["loss"] == 0.0  # no row left: no step taken


def test_lora_on_the_top_blocks_only(tmp_path):
    tr = _trainer(_cfg(tmp_path, lora_layers=1))
    blocks = {int(n.split("layers.")[1].split(".")[0]) for n, p in tr.model.named_parameters()
              if p.requires_grad}
    assert blocks == {tr.model.get_base_model().config.num_hidden_layers - 1}
    with pytest.raises(ValueError, match="top_layers"):
        _trainer(_cfg(tmp_path / "bad", lora_layers=99))
