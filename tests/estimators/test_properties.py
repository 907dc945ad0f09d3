"""Property tests: the vectorised library equals the per-row loop of the benchmark, and no estimator
ever returns NaN or inf."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.speed.estimator_speed import batch_to_rows, loop_advantages
from estimators import StepBatch, available_estimators, compute_advantages

from .helpers import random_batch


@st.composite
def batches(draw):
    n_traj = draw(st.integers(1, 7))
    g, t, s, r, v, a, k, e = [], [], [], [], [], [], [], []
    dim = draw(st.integers(1, 4))
    reward = st.one_of(st.just(0.0), st.just(10.0), st.floats(-1e3, 1e3, allow_nan=False, width=32))
    vec = st.lists(st.sampled_from([0.0, 1.0, -1.0, 0.5, 1e-30, 1e6]), min_size=dim, max_size=dim)
    for traj in range(n_traj):
        group = draw(st.integers(0, 2))
        for step in range(draw(st.integers(1, 5))):
            g.append(group), t.append(traj), s.append(step), r.append(draw(reward))
            v.append(draw(st.booleans())), a.append(draw(st.sampled_from(["x", "y", "z"])))
            k.append(draw(st.sampled_from(["p", "q"]))), e.append(draw(vec))
    n = len(g)
    length = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    nll = draw(st.lists(st.sampled_from([0.0, 1e-9, 0.5, 3.0, 40.0]), min_size=n, max_size=n))
    hind = draw(st.lists(st.sampled_from([0.0, 2.0, 30.0, 1e3]), min_size=n, max_size=n))
    return StepBatch(np.array(g), np.array(t), np.array(s), np.array(r), np.array(v),
                     anchor=np.array(a, dtype=object), action_key=np.array(k, dtype=object),
                     embedding=np.array(e, dtype=np.float32), resp_len=length,
                     old_logp_sum=-np.array(nll) * np.array(length),
                     hind_logp_sum=-np.array(hind) * np.array(length))


OPTIONS = st.fixed_dictionaries({
    "gamma": st.sampled_from([0.0, 0.5, 0.95, 1.0]),
    "mode": st.sampled_from(["mean_norm", "mean_std_norm"]),
    "eps": st.sampled_from([0.0, 0.05, 0.5, 2.0]),
    "pace": st.sampled_from(["q_style", "diff_peer"]),
    "cross_steps": st.booleans(),
    "singleton_episode": st.sampled_from(["raw", "zero"]),
    "pace_std_norm": st.booleans(),
})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches(), OPTIONS, st.sampled_from(available_estimators()))
def test_never_nan_or_inf(batch, options, name):
    adv = compute_advantages(batch, name, **options)
    assert adv.shape == (len(batch),)
    assert np.all(np.isfinite(adv))


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("name", available_estimators())
@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
def test_library_equals_per_row_loop(seed, name, mode):
    rng = np.random.default_rng(seed)
    b = random_batch(rng, groups=3, rollouts=5, max_len=8)
    opts = dict(gamma=float(rng.choice([0.5, 0.95, 1.0])), mode=mode,
                pace=str(rng.choice(["q_style", "diff_peer"])),
                cross_steps=bool(seed % 2), history_length=int(seed % 3), base_group=bool(seed % 4 == 1),
                eps=0.05)
    expected = loop_advantages(batch_to_rows(b), name, **opts)
    np.testing.assert_allclose(compute_advantages(b, name, **opts), expected, rtol=1e-9, atol=1e-9)


def test_similarity_mode_equals_exact_mode_for_dissimilar_texts():
    b = random_batch(np.random.default_rng(3))
    # anchors are "obs 0".."obs 3": ratio 0.8 between any two, so thresh 0.9 separates all of them
    apart = compute_advantages(b, "gigpo", enable_similarity=True, similarity_thresh=0.9)
    np.testing.assert_array_equal(apart, compute_advantages(b, "gigpo"))
    merged = compute_advantages(b, "gigpo", enable_similarity=True, similarity_thresh=0.7, step_weight=1.0)
    assert not np.allclose(merged, compute_advantages(b, "gigpo"))
