"""Bad input gets a ValueError naming the field and what was expected."""
import numpy as np
import pytest

from estimators import StepBatch, available_estimators, compute_advantages

from .helpers import make_batch


def base(**over):
    kw = dict(group_id=[0, 0], traj_id=[0, 1], step_idx=[0, 0], reward=[1.0, 0.0], action_valid=[True, True])
    kw.update(over)
    return kw


def test_registry_lists_all_estimators():
    assert available_estimators() == ["bigpo", "bipace", "ecpo", "gaca", "gagpo", "gated_bepo", "gigpo",
                                      "gigpo_goal", "graphhca", "grpo", "hcapo", "hgpo", "pace", "pace_goal",
                                      "progpo", "reinforce_pp", "relace", "rloo"]


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_reward_names_the_rows(bad):
    with pytest.raises(ValueError, match=r"reward must be finite; rows \[1\]"):
        StepBatch(**base(reward=[0.0, bad]))


def test_length_mismatch_names_the_field():
    with pytest.raises(ValueError, match="traj_id has 3 rows"):
        StepBatch(**base(traj_id=[0, 1, 2]))


@pytest.mark.parametrize("emb,msg", [
    (np.ones((2,)), r"shape \(N, d\)"),
    (np.ones((3, 4)), r"shape \(N, d\)"),
    (np.array([[1.0, np.nan], [0.0, 1.0]]), "NaN or inf in rows \\[0\\]"),
])
def test_bad_embedding(emb, msg):
    with pytest.raises(ValueError, match=msg):
        StepBatch(**base(embedding=emb))


def test_non_integer_step_and_bad_valid():
    with pytest.raises(ValueError, match="step_idx must hold integers"):
        StepBatch(**base(step_idx=[0.5, 0]))
    with pytest.raises(ValueError, match="action_valid must be bool"):
        StepBatch(**base(action_valid=[2, 1]))
    with pytest.raises(ValueError, match="step_idx must be >= 0"):
        StepBatch(**base(step_idx=[-1, 0]))


def test_duplicate_rows_are_rejected_with_advice():
    with pytest.raises(ValueError, match="duplicate rows .* unpadded batch"):
        StepBatch(**base(traj_id=[0, 0]))


@pytest.mark.parametrize("name,field", [("gigpo", "anchor"), ("hgpo", "anchor"), ("bigpo", "embedding"),
                                        ("pace", "action_key"), ("bipace", "embedding"), ("gagpo", "anchor"),
                                        ("graphhca", "anchor"), ("gaca", "anchor"), ("gaca", "resp_len"),
                                        ("gaca", "old_logp_sum"), ("ecpo", "anchor"), ("ecpo", "action_key"),
                                        ("progpo", "anchor"), ("progpo", "action_key"),
                                        ("gated_bepo", "anchor"), ("hcapo", "hind_logp_sum"),
                                        ("hcapo", "old_logp_sum"), ("relace", "hind_logp_sum"),
                                        ("relace", "anchor")])
def test_missing_field_for_estimator(name, field):
    kw = base(anchor=["a", "b"], action_key=["x", "y"], embedding=np.eye(2), resp_len=[1, 2],
              old_logp_sum=[-0.5, -1.0], hind_logp_sum=[-0.4, -1.0])
    kw[field] = None
    with pytest.raises(ValueError, match=f"{name}.*needs StepBatch.{field}"):
        compute_advantages(StepBatch(**kw), name)


def test_unknown_estimator_mode_option_variant():
    b = StepBatch(**base(anchor=["a", "b"]))
    with pytest.raises(ValueError, match="unknown estimator 'ppo'.*available"):
        compute_advantages(b, "ppo")
    with pytest.raises(ValueError, match="unknown mode 'std'"):
        compute_advantages(b, "gigpo", mode="std")
    with pytest.raises(ValueError, match=r"unknown estimator option\(s\) \['gama'\]"):
        compute_advantages(b, "grpo", gama=0.9)
    with pytest.raises(ValueError, match="unknown pace variant"):
        compute_advantages(b, "grpo", pace="q")
    with pytest.raises(ValueError, match="gamma must be in"):
        compute_advantages(b, "gigpo", gamma=1.5)


@pytest.mark.parametrize("thresh", [0.0, 1.0, 1.2])
def test_similarity_threshold_must_be_open_interval(thresh):
    b = StepBatch(**base(anchor=["a", "b"]))
    with pytest.raises(ValueError, match=r"similarity_thresh must be in \(0, 1\)"):
        compute_advantages(b, "gigpo", enable_similarity=True, similarity_thresh=thresh)


def test_options_of_other_estimators_are_accepted():
    b = make_batch([(0, [("s", 1.0)]), (0, [("s", 0.0)])])
    plain = compute_advantages(b, "grpo")
    assert np.array_equal(plain, compute_advantages(b, "grpo", eps=0.3, pace="diff_peer", history_length=4))


def test_zero_norm_embeddings_are_guarded():
    b = make_batch([(0, [("a", 0.0), ("b", 1.0)]), (0, [("a", 0.0), ("c", 0.0)])],
                   embed=lambda a: np.zeros(3) if a == "a" else np.eye(3)[1 if a == "b" else 2])
    for name in ("bigpo", "bipace"):
        assert np.all(np.isfinite(compute_advantages(b, name, eps=0.5)))


def test_empty_batch_gives_empty_advantages():
    b = StepBatch([], [], [], [], [], anchor=[], action_key=[], embedding=np.zeros((0, 3)), resp_len=[],
                  old_logp_sum=[], hind_logp_sum=[])
    for name in available_estimators():
        assert compute_advantages(b, name).shape == (0,)


@pytest.mark.parametrize("field,value,msg", [
    ("resp_len", [1, -1], "resp_len must hold integer token counts >= 0"),
    ("resp_len", [1.5, 2], "resp_len must hold integer token counts"),
    ("old_logp_sum", [-1.0, np.nan], r"old_logp_sum must be finite; rows \[1\]"),
    ("old_logp_sum", [-1.0, -np.inf], r"old_logp_sum must be finite; rows \[1\]"),
    ("hind_logp_sum", [np.inf, -1.0], r"hind_logp_sum must be finite or NaN \(not scored\); rows \[0\]"),
    ("old_logp_sum", [-1.0], "old_logp_sum has 1 rows"),
])
def test_bad_per_row_scores_name_the_field(field, value, msg):
    with pytest.raises(ValueError, match=msg):
        StepBatch(**base(**{field: value}))


def test_unscored_rows_may_be_nan_in_hind_logp_sum():
    b = StepBatch(**base(hind_logp_sum=[np.nan, -2.0]))
    assert np.isnan(b.hind_logp_sum[0]) and b.hind_logp_sum[1] == -2.0


@pytest.mark.parametrize("option,value,msg", [
    ("value_proxy", "median", "unknown value_proxy variant 'median'"),
    ("norm_scope", "task", "unknown norm_scope variant"),
    ("hca_combine", "max", "unknown hca_combine variant"),
    ("crit_norm", "softmax", "unknown crit_norm variant"),
    ("gaca_combine", "sum", "unknown gaca_combine variant"),
    ("max_steps", 0, "max_steps must be a positive integer"),
])
def test_bad_spec2_option_values(option, value, msg):
    b = StepBatch(**base(anchor=["a", "b"]))
    with pytest.raises(ValueError, match=msg):
        compute_advantages(b, "gagpo", **{option: value})


@pytest.mark.parametrize("name,opts,msg", [
    ("graphhca", {"hca_gamma": 1.0}, r"hca_gamma must be in \[0, 1\)"),
    ("graphhca", {"p_min": 0.0}, r"p_min must be in \(0, 1\]"),
    ("graphhca", {"hca_truncation": "drop_edge"}, "drop_edge.*needs max_steps"),
    ("gagpo", {"bootstrap_truncated": True}, "bootstrap_truncated=True needs max_steps"),
    ("gagpo", {"gae_lambda": 1.5}, r"gae_lambda must be in \[0, 1\]"),
    ("gaca", {"crit_norm": "mean_ratio", "crit_cmax": 0.0}, "crit_cmax must be > 0"),
])
def test_bad_spec2_settings_are_errors(name, opts, msg):
    b = StepBatch(**base(anchor=["a", "b"], resp_len=[1, 1], old_logp_sum=[-1.0, -2.0]))
    with pytest.raises(ValueError, match=msg):
        compute_advantages(b, name, **opts)


@pytest.mark.parametrize("option, value", [("gamma", np.nan), ("eps", float("inf")), ("step_weight", -np.inf),
                                           ("equal_tol", np.float32("nan")), ("bepo_min_successors", np.nan)])
@pytest.mark.parametrize("estimator", ["grpo", "gigpo", "bipace"])
def test_non_finite_option_names_the_option(estimator, option, value):
    """Called directly (not through TrainConfig), a NaN option is refused by name, whatever the estimator
    reads: NaN passes every range check (nan < 0 is False) and would make every advantage NaN."""
    batch = make_batch([(0, [("a", 0.0), ("b", 1.0)]), (0, [("a", 0.0)])], embed=lambda x: np.ones(2))
    with pytest.raises(ValueError, match=f"estimator option {option} must be a finite number"):
        compute_advantages(batch, estimator, **{option: value})
    compute_advantages(batch, estimator, **{option: 0.5})      # a finite value of the same option is taken


@pytest.mark.parametrize("option", ["ecpo_kappa", "bepo_min_successors"])
def test_inf_is_taken_only_where_it_is_a_documented_limit(option):
    batch = make_batch([(0, [("a", 0.0), ("b", 1.0)]), (0, [("a", 0.0)])], embed=lambda x: np.ones(2))
    compute_advantages(batch, "grpo", **{option: np.inf})
    with pytest.raises(ValueError, match=f"estimator option {option} must be a finite number \\(or inf: "):
        compute_advantages(batch, "grpo", **{option: np.nan})
    with pytest.raises(ValueError, match="estimator option gamma must be a finite number; got inf"):
        compute_advantages(batch, "grpo", gamma=np.inf)
