"""GSPO/DAPO loss options on tiny tensors against hand values, dynamic sampling, and their trainer wiring."""
import math

import numpy as np
import pytest
import torch

from agents.config import TrainConfig
from agents.dynamic_sampling import concat_rollouts, dynamic_sample, informative_groups, select_envs
from agents.ppo import agg_loss, check_loss_options, log_ratio, ppo_terms, row_logp_sums
from agents.rollout import Rollout
from estimators import StepBatch


# ---------------------------------------------------------------- ratio level (GSPO)
def test_sequence_ratio_is_the_length_normalised_mean_and_trains_like_gspo():
    old = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, 0.0, 0.0]])
    logp = torch.tensor([[-0.8, -2.4, -7.0], [-0.2, 0.0, 0.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    lr = log_ratio(logp, old, mask, "sequence")
    # row 0: mean(0.2, -0.4) = -0.1 on every token (padding included; it is masked later); row 1: 0.3
    torch.testing.assert_close(lr.detach(), torch.tensor([[-0.1, -0.1, -0.1], [0.3, 0.3, 0.3]]))
    torch.testing.assert_close(log_ratio(logp, old, mask, "token").detach(), (logp - old).detach())
    # gradient of the row-mean of ratio * A (A = 1) at token k is exp(-0.1) / 2: GSPO's d s_i / d logp
    adv = torch.ones(2, 3)
    pg = ppo_terms(logp, old, adv, mask, clip_low=10.0, clip_high=10.0, ratio_level="sequence")["pg"]
    agg_loss(pg, mask, "seq_mean_token_mean").backward()
    expected = torch.tensor([[-math.exp(-0.1) / 2 / 2] * 2 + [0.0], [-math.exp(0.3) / 2, 0.0, 0.0]])
    torch.testing.assert_close(logp.grad, expected)


def test_sequence_ratio_clips_whole_responses():
    old = torch.zeros(1, 2)
    logp = torch.log(torch.tensor([[2.0, 0.5]]))          # token ratios 2 and 0.5, sequence ratio 1
    mask = torch.ones(1, 2)
    t = ppo_terms(logp, old, torch.ones(1, 2), mask, ratio_level="sequence")
    torch.testing.assert_close(t["ratio"], torch.ones(1, 2))
    assert not t["clipped"].any()
    assert ppo_terms(logp, old, torch.ones(1, 2), mask)["clipped"].any()     # token level clips token 0


# ---------------------------------------------------------------- asymmetric clip (DAPO clip-higher)
def test_clip_higher_and_lower():
    old = torch.zeros(1, 2)
    logp = torch.log(torch.tensor([[1.5, 0.5]]))
    mask = torch.ones(1, 2)
    adv = torch.tensor([[2.0, -1.0]])
    # A = 2, ratio 1.5: -2 * min(1.5, 1 + clip_high); A = -1, ratio 0.5: max(0.5, 1 - clip_low)
    torch.testing.assert_close(ppo_terms(logp, old, adv, mask, clip_low=0.2, clip_high=0.28)["pg"],
                               torch.tensor([[-2.56, 0.8]]))
    torch.testing.assert_close(ppo_terms(logp, old, adv, mask, clip_low=0.4, clip_high=0.2)["pg"],
                               torch.tensor([[-2.4, 0.6]]))


# ---------------------------------------------------------------- loss aggregation
def test_loss_aggregation_modes_and_micro_batches():
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, 9.0, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    assert agg_loss(values, mask, "token_mean").item() == pytest.approx(10 / 4)
    assert agg_loss(values, mask, "seq_mean_token_sum").item() == pytest.approx((6 + 4) / 2)
    assert agg_loss(values, mask, "seq_mean_token_mean").item() == pytest.approx((2 + 4) / 2)
    for mode in ("token_mean", "seq_mean_token_sum", "seq_mean_token_mean"):
        parts = sum(agg_loss(values[k:k + 1], mask[k:k + 1], mode, total_tokens=4, total_rows=2)
                    for k in (0, 1))
        assert parts.item() == pytest.approx(agg_loss(values, mask, mode).item())
    with pytest.raises(ValueError, match="loss_agg must be one of"):
        agg_loss(values, mask, "sum")


def test_defaults_keep_todays_loss():
    cfg = TrainConfig()
    assert (cfg.ratio_level, cfg.loss_agg, cfg.clip_range(), cfg.dynamic_sampling) == \
        ("token", "token_mean", (0.2, 0.2), False)
    assert TrainConfig(clip_ratio=0.3, clip_high=0.28).clip_range() == (0.3, 0.28)
    g = torch.Generator().manual_seed(0)
    logp, old = torch.randn(3, 5, generator=g), torch.randn(3, 5, generator=g)
    adv, mask = torch.randn(3, 5, generator=g), (torch.rand(3, 5, generator=g) > 0.3).float()
    t = ppo_terms(logp, old, adv, mask, None, 0.2, 0.2, 3.0)
    ratio = torch.exp((logp - old).clamp(-20, 20))
    pg = torch.maximum(-adv * ratio, -adv * ratio.clamp(0.8, 1.2))
    pg = torch.where(adv < 0, torch.minimum(pg, -adv * 3.0), pg)
    assert torch.equal(t["pg"], pg)
    T = float(mask.sum())
    assert torch.equal(agg_loss(t["pg"], mask, "token_mean", T, 3), (t["pg"] * mask).sum() / T)


def test_bad_loss_options():
    with pytest.raises(ValueError, match="ratio_level"):
        check_loss_options("seq", "token_mean", 0.2, 0.2)
    with pytest.raises(ValueError, match="loss_agg"):
        check_loss_options("token", "mean", 0.2, 0.2)
    with pytest.raises(ValueError, match="clip_low"):
        check_loss_options("token", "token_mean", 1.0, 0.2)


def test_row_logp_sums():
    out = row_logp_sums([[5, 6], [], [7]], [torch.tensor([-0.5, -1.0]), torch.zeros(0), torch.tensor([-2.0])])
    assert out["resp_len"].tolist() == [2, 0, 1] and out["old_logp_sum"].tolist() == [-1.5, 0.0, -2.0]


# ---------------------------------------------------------------- dynamic sampling (DAPO)
def fake_rollout(groups, returns, steps=2):
    """One env per entry; each env plays `steps` rows; row k of env e has prompt id [e, k]."""
    n = len(groups)
    env = np.repeat(np.arange(n), steps)
    batch = StepBatch(np.asarray(groups)[env], env, np.tile(np.arange(steps), n), np.zeros(len(env)),
                      np.ones(len(env), bool), anchor=[f"a{e}" for e in env])
    rows = range(len(env))
    return Rollout(batch=batch, prompt_ids=[[int(env[r]), r % steps] for r in rows],
                   response_ids=[[1]] * len(env), old_logprobs=[None] * len(env),
                   responses=[""] * len(env), actions=[""] * len(env), env_index=env,
                   prefix_keys=[f"task{g}" for g in np.asarray(groups)[env]], admissible=env % 2 == 0,
                   success=np.asarray(returns) > 0, score=np.asarray(returns, float) / 10,
                   episode_return=np.asarray(returns, float),
                   episode_length=np.full(n, steps), renamed=np.zeros(n, bool), gen_seconds=1.0,
                   env_seconds=2.0)


def test_informative_groups_keep_order_of_appearance():
    assert informative_groups(np.array([5, 5, 1, 1, 3, 3]), np.array([1, 0, 2, 2, 0, 10])).tolist() == [5, 3]
    assert informative_groups(np.array([0, 0]), np.array([10.0, 10.0])).tolist() == []


def test_select_and_concat_keep_rows_aligned():
    ro = fake_rollout([0, 0, 1, 1], [1, 0, 0, 0])
    sel = select_envs(ro, np.array([False, True, True, False]))
    assert sel.env_index.tolist() == [0, 0, 1, 1]
    assert [p[0] for p in sel.prompt_ids] == [1, 1, 2, 2] and sel.episode_return.tolist() == [0.0, 0.0]
    assert sel.batch.group_id.tolist() == [0, 0, 1, 1] and len(sel.batch) == 4
    # every per-row and per-env field follows the kept rows (prefix keys: else prefix sharing turns off)
    assert sel.prefix_keys == ["task0", "task0", "task1", "task1"]
    assert sel.admissible.tolist() == [False, False, True, True] and sel.score.tolist() == [0.0, 0.0]
    other = fake_rollout([7, 7], [1, 0])
    both = concat_rollouts([sel, other])
    assert both.env_index.tolist() == [0, 0, 1, 1, 2, 2, 3, 3] and len(both.success) == 4
    assert both.batch.group_id.tolist() == [0, 0, 1, 1, 7, 7, 7, 7] and both.gen_seconds == 2.0
    assert [p[0] for p in both.prompt_ids] == [1, 1, 2, 2, 0, 0, 1, 1]
    assert both.prefix_keys == ["task0", "task0", "task1", "task1"] + ["task7"] * 4
    assert len(both.admissible) == 8 and both.score.tolist() == [0.0, 0.0, 0.1, 0.0]


def test_dynamic_sampling_refills_and_trims():
    first = fake_rollout([0, 0, 1, 1, 2, 2], [1, 1, 0, 1, 1, 0])          # group 0 is uninformative
    second = fake_rollout([10, 10, 11, 11, 12, 12], [0, 0, 1, 0, 0, 1])
    calls = []

    def more(r):
        calls.append(r)
        return second
    ro, stats = dynamic_sample(first, more, want_groups=3, max_rounds=3)
    assert calls == [1] and stats == {"ds_rounds": 2, "ds_kept_groups": 3}
    assert np.unique(ro.batch.group_id).tolist() == [1, 2, 11]              # 12 is trimmed away
    assert ro.episode_return.tolist() == [0, 1, 1, 0, 1, 0] and len(ro.prompt_ids) == len(ro.batch) == 12


def test_dynamic_sampling_is_bounded():
    flat = fake_rollout([0, 0, 1, 1], [1, 1, 0, 0])
    ro, stats = dynamic_sample(flat, lambda r: flat, want_groups=2, max_rounds=3)
    assert stats == {"ds_rounds": 3, "ds_kept_groups": 0} and ro is flat   # nothing informative: first batch
    some = fake_rollout([0, 0, 1, 1], [1, 0, 0, 0])
    ro, stats = dynamic_sample(some, lambda r: flat, want_groups=2, max_rounds=2)
    assert stats == {"ds_rounds": 2, "ds_kept_groups": 1} and np.unique(ro.batch.group_id).tolist() == [0]
    with pytest.raises(ValueError, match="max_rounds"):
        dynamic_sample(some, lambda r: flat, want_groups=2, max_rounds=0)


# ---------------------------------------------------------------- trainer wiring
def test_trainer_runs_gspo_dapo_options_with_gaca(tmp_path):
    from test_trainer import _cfg, _trainer
    tr = _trainer(_cfg(tmp_path, estimator="gaca", ratio_level="sequence", clip_high=0.28,
                       loss_agg="seq_mean_token_mean", dynamic_sampling=True, dynamic_sampling_rounds=2,
                       estimator_options='{"crit_norm": "minmax"}'))
    m = tr.iteration(1)
    assert m["rows"] > 0 and 1 <= m["ds_rounds"] <= 2 and np.isfinite(m["loss"])
    with pytest.raises(ValueError, match="use their own flags"):
        _trainer(_cfg(tmp_path, estimator_options='{"gamma": 0.9}'))
    with pytest.raises(ValueError, match="unknown estimator option"):
        _trainer(_cfg(tmp_path, estimator_options='{"lambda": 0.9}'))
    with pytest.raises(ValueError, match="ratio_level"):
        _trainer(_cfg(tmp_path, ratio_level="seq"))


@pytest.mark.parametrize("name", ["rloo", "reinforce_pp", "gagpo", "graphhca", "gaca"])
def test_compare_trainer_runs_every_new_estimator(tmp_path, name):
    from benchmarks.learning.compare import make_trainer_class
    from fake_env import FakeCraftEnv
    from test_trainer import _cfg
    tr = make_trainer_class()(_cfg(tmp_path, estimator=name), make_env=lambda: FakeCraftEnv(max_steps=3),
                              train_tasks=list(range(8)), eval_tasks=[8, 9])
    m = tr.iteration(1)
    assert m["rows"] > 0 and np.isfinite(m["loss"]) and np.isfinite(m["adv_std"])
    assert ("singleton_rate" in m) and (np.isnan(m["singleton_rate"]) == (name in ("rloo", "reinforce_pp")))
