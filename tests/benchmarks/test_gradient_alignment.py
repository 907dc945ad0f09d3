"""Gradient alignment (benchmarks/credit/gradient_alignment.py): per-row log-prob gradients over the RL
adapter, the cosines to the Monte-Carlo gradient with intervals, and the refusals."""
import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from benchmarks.credit import gradient_alignment as ga


def test_row_gradients_weighted_equal_one_backward_of_the_weighted_objective():
    from agents.config import TrainConfig
    from agents.models import tiny_model_path
    from agents.ppo import response_logprobs
    cfg = TrainConfig(model="tiny", lora_rank=4, lora_alpha=8)
    model, tok = ga.rl_adapter(str(tiny_model_path()), cfg)
    rng = np.random.default_rng(0)
    prompts = [torch.tensor(rng.integers(5, 200, n)) for n in (7, 11, 5)]
    responses = [torch.tensor(rng.integers(5, 200, n)) for n in (3, 2, 4)]
    ro = SimpleNamespace(prompt_ids=prompts, response_ids=responses)
    G = ga.row_gradients(model, tok, ro, temperature=1.0, progress=False)
    params = [p for p in model.parameters() if p.requires_grad]
    assert G.shape == (3, sum(p.numel() for p in params)) and np.abs(G).sum() > 0
    w = np.array([0.7, -1.3, 0.4])
    model.zero_grad(set_to_none=True)
    total = 0.0
    for i in range(3):
        lp, _, mask = response_logprobs(model, [prompts[i]], [responses[i]], tok.pad_token_id, 1.0,
                                        with_entropy=False)
        total = total + float(w[i]) * (lp * mask).sum()
    total.backward()
    direct = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params])
    np.testing.assert_allclose(w @ G, direct.numpy(), rtol=1e-4, atol=1e-6)


def test_cosines_follow_the_truth_and_a_copy_of_it_scores_one():
    rng = np.random.default_rng(1)
    G = rng.standard_normal((60, 40))
    truth = rng.standard_normal(60)
    goal = np.repeat(np.arange(6), 10).astype(str)
    adv = {"gigpo": truth + 2.0 * rng.standard_normal(60), "exact": truth.copy(), "opposite": -truth}
    rows = {r["estimator"]: r for r in ga.alignment_rows(G, adv, truth, goal)}
    assert rows["exact"]["cos"] == pytest.approx(1.0) and rows["opposite"]["cos"] == pytest.approx(-1.0)
    assert 0 < rows["gigpo"]["cos"] < 1 and rows["gigpo"]["lo"] <= rows["gigpo"]["cos"] <= rows["gigpo"]["hi"]
    assert rows["exact"]["minus_gigpo"] > 0 and rows["exact"]["minus_gigpo_lo"] > 0
    assert rows["gigpo"]["minus_gigpo"] == pytest.approx(0.0)
    # halves: the truth plus independent noise each; the corrected cosine of an exact copy of the truth
    # stays near 1 while the plain one falls with the noise
    n = 3000
    G, truth = rng.standard_normal((n, 2000)), rng.standard_normal(n)      # many directions: g1.g2 sharp
    noise = [rng.standard_normal(n) for _ in range(2)]
    halves = np.stack([truth + noise[0], truth + noise[1]])          # K/2 continuations each
    noisy = halves.mean(axis=0)                                      # the whole truth: half the variance
    goal = np.repeat(np.arange(10), n // 10).astype(str)
    rows = {r["estimator"]: r for r in ga.alignment_rows(G, {"exact": truth}, noisy, goal, halves)}
    assert rows["exact"]["cos"] < 0.9 and abs(rows["exact"]["cos_true"] - 1.0) < 0.08
    with pytest.raises(FloatingPointError, match="'bad'"):
        ga.alignment_rows(G, {"bad": np.full(n, np.nan)}, truth, goal)


def test_a_batch_of_another_policy_or_a_scripted_one_is_refused_naming_what_differs(tmp_path):
    policy = tmp_path / "policy"
    policy.mkdir()
    (policy / "weights.bin").write_bytes(b"one")
    from benchmarks.credit.manifest import fingerprint
    batch = tmp_path / "batch"
    batch.mkdir()
    manifest = {"policy": str(policy), "policy_sha1": fingerprint(str(policy))}
    (batch / "manifest.json").write_text(json.dumps(manifest))
    assert ga.policy_of([batch])[0] == str(policy)
    (policy / "weights.bin").write_bytes(b"two")                # retrained in place
    with pytest.raises(ga.PolicyMismatch, match="fingerprint"):
        ga.policy_of([batch])
    (batch / "manifest.json").write_text(json.dumps({"policy": "scripted:0.5", "policy_sha1": "x"}))
    with pytest.raises(ga.PolicyMismatch, match="not a model folder"):
        ga.policy_of([batch])
