"""HCAPO and RELACE (spec-2 sections 4-5), the pure functions over hind_logp_sum: reductions, the mask,
self-normalisation and the errors of unscored rows."""
import numpy as np
import pytest

from estimators import StepBatch, compute_advantages, resolve_options
from estimators.hcapo import hindsight_ratio, smooth

from .helpers import make_batch, random_batch


def shifted(batch, rng, scale=1.0):
    """The batch with hindsight scores that move every row's log-prob by a random per-token amount."""
    shift = rng.normal(0, scale, len(batch)) * batch.resp_len
    return batch.with_fields(hind_logp_sum=batch.old_logp_sum + shift)


def test_omega_zero_is_grpo():
    b = random_batch(np.random.default_rng(0))
    np.testing.assert_allclose(compute_advantages(b, "hcapo", step_weight=0.0),
                               compute_advantages(b, "grpo"))
    np.testing.assert_allclose(compute_advantages(b, "relace", step_weight=0.0),
                               compute_advantages(b, "grpo", mode="mean_norm"))


@pytest.mark.parametrize("seed", range(5))
def test_hcapo_with_no_hindsight_effect_is_grpo_plus_its_mean_norm_term(seed):
    b = random_batch(np.random.default_rng(seed), p_invalid=0.0)
    b = b.with_fields(hind_logp_sum=b.old_logp_sum)                   # l = 0 everywhere: rho = 1
    expected = compute_advantages(b, "grpo") + compute_advantages(b, "grpo", mode="mean_norm")
    np.testing.assert_allclose(compute_advantages(b, "hcapo"), expected, atol=1e-12)


def test_hcapo_group_without_success_gets_the_episode_term():
    b = make_batch([(0, [("s", 0.0), ("x", 0.0)]), (0, [("s", 0.0), ("y", 0.0)])], invalid=(1,),
                   hind_nll=[np.nan] * 4)                            # failures need no score
    np.testing.assert_allclose(compute_advantages(b, "hcapo"), compute_advantages(b, "grpo"))


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("name", ["hcapo", "relace"])
def test_mask_leaves_no_negative_step_term_on_successful_rows(seed, name):
    rng = np.random.default_rng(seed)
    b = shifted(random_batch(rng), rng)
    mode = resolve_options(name).mode
    step = compute_advantages(b, name) - compute_advantages(b, "grpo", mode=mode)
    view = b.view
    won = np.bincount(view.traj, weights=b.reward)[view.traj] > 0
    assert np.all(step[won] >= -1e-12)
    assert np.any(step[~won] < 0)


@pytest.mark.parametrize("seed", range(5))
def test_ratio_is_self_normalised_within_each_scored_trajectory(seed):
    rng = np.random.default_rng(seed)
    b = shifted(random_batch(rng), rng, scale=0.2)
    rho, success = hindsight_ratio(b, resolve_options("relace"), "relace", scored_failures=True)
    view = b.view
    mean = np.bincount(view.traj, weights=rho) / np.bincount(view.traj)
    np.testing.assert_allclose(mean, 1.0)
    assert np.any(np.abs(rho - 1) > 1e-3)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
def test_relace_with_unit_factor_is_gigpo(seed, mode):
    b = random_batch(np.random.default_rng(seed))
    b = b.with_fields(hind_logp_sum=b.old_logp_sum)
    plain = compute_advantages(b, "relace", smooth="none", success_mask=False, mode=mode)
    np.testing.assert_allclose(plain, compute_advantages(b, "gigpo", mode=mode), atol=1e-12)
    # with the mask: GiGPO whose negative step terms on successful rows are zeroed
    masked = compute_advantages(b, "relace", smooth="none", mode=mode)
    step = compute_advantages(b, "gigpo", mode=mode) - compute_advantages(b, "grpo", mode=mode)
    view = b.view
    won = np.bincount(view.traj, weights=b.reward)[view.traj] > 0
    expected = compute_advantages(b, "grpo", mode=mode) + np.where(won, np.maximum(step, 0), step)
    np.testing.assert_allclose(masked, expected, atol=1e-12)


def test_smoothing_kernel_renormalised_at_the_ends():
    b = make_batch([(0, [("a", 0.0), ("b", 0.0), ("c", 0.0)]), (0, [("a", 0.0)])])
    np.testing.assert_allclose(smooth(b, np.array([4.0, 0.0, 8.0, 5.0]), "kernel3"),
                               [4 * 0.5 / 0.75, (4 + 8) * 0.25, 8 * 0.5 / 0.75, 5.0])


def test_clip_bounds_the_ratio():
    b = make_batch([(0, [("a", 0.0), ("b", 10.0)]), (0, [("a", 0.0)])], nll=[1.0, 1.0, 1.0],
                   hind_nll=[-1e6, 1e6, np.nan])
    rho, _ = hindsight_ratio(b, resolve_options("hcapo"), "hcapo")
    np.testing.assert_allclose(rho[:2], 2 * np.exp([5.0, -5.0]) / (np.exp(5.0) + np.exp(-5.0)))
    for name in ("hcapo", "relace"):
        assert np.all(np.isfinite(compute_advantages(b, name)))


@pytest.mark.parametrize("name", ["hcapo", "relace"])
def test_unscored_successful_row_is_an_error_not_a_zero(name):
    b = make_batch([(0, [("a", 0.0), ("b", 10.0)]), (0, [("a", 0.0)])], hind_nll=[1.0, np.nan, np.nan])
    with pytest.raises(ValueError, match=rf"{name}: rows \[1\] belong to successful trajectories"):
        compute_advantages(b, name)


@pytest.mark.parametrize("name", ["hcapo", "relace"])
def test_missing_hindsight_scores_name_the_field_and_the_pass(name):
    b = make_batch([(0, [("a", 0.0), ("b", 10.0)])])
    b = StepBatch(b.group_id, b.traj_id, b.step_idx, b.reward, b.action_valid, anchor=b.anchor,
                  resp_len=b.resp_len, old_logp_sum=b.old_logp_sum)
    with pytest.raises(ValueError, match=rf"'{name}' needs StepBatch.hind_logp_sum.*agents.hindsight"):
        compute_advantages(b, name)


def test_bad_options():
    b = random_batch(np.random.default_rng(0))
    for opts, msg in [(dict(ratio_clip=0.0), "ratio_clip"), (dict(relace_f_max=0.0), "relace_f_max"),
                      (dict(smooth="ema"), "unknown smooth"),
                      (dict(ratio_unit="token"), "unknown ratio_unit")]:
        with pytest.raises(ValueError, match=msg):
            compute_advantages(b, "relace", **opts)
