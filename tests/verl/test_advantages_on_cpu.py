"""Our estimators in verl's advantage step (CPU): on a DataProto of step samples, the token advantages equal
``estimators.compute_advantages`` on the same rows spread over each response, for every estimator; the
``bipace_sync`` trainer's hook does the same through (an in-memory stand-in of) the TransferQueue."""
from __future__ import annotations

import types

import numpy as np
import pytest

pytest.importorskip("verl", reason="needs the [verl] extra: pip install -e \".[verl]\"")
import torch  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from verl.protocol import DataProto  # noqa: E402
from verl.trainer.ppo import core_algos  # noqa: E402
from verl.trainer.ppo.v1.trainer_base import get_trainer_cls  # noqa: E402
from verl.utils.tensordict_utils import list_of_dict_to_tensordict  # noqa: E402

from agents.hindsight import HIND_KEY  # noqa: E402
from agents.verl_bridge import trainer as bridge_trainer  # noqa: E402
from agents.verl_bridge.steps import (EMBEDDING_KEY, anchor_hash, compute_data_advantages,  # noqa: E402
                                      step_fields)
from estimators import REGISTRY, StepBatch, available_estimators, compute_advantages  # noqa: E402

T = 7   # padded response width


def make_rows(seed=0):
    """3 tasks x 3 rollouts of 2-5 steps over a few shared states, wins and invalid answers, shuffled."""
    rng = np.random.default_rng(seed)
    rows = []
    for g in range(3):
        for k in range(3):
            n = int(rng.integers(2, 6))
            won = rng.random() < 0.5
            for t in range(n):
                rows.append(dict(group=f"task{g}", traj=f"task{g}_{k}", step=t,
                                 reward=10.0 if (won and t == n - 1) else 0.0,
                                 valid=bool(rng.random() < 0.85),
                                 anchor=f"room {g}-{min(t, int(rng.integers(0, 3)))}",
                                 key=f"go to {int(rng.integers(0, 2))}"))
    order = rng.permutation(len(rows))
    rows = [rows[i] for i in order]
    lengths = rng.integers(1, T + 1, size=len(rows))
    mask = (torch.arange(T)[None, :] < torch.as_tensor(lengths)[:, None]).long()
    emb = torch.as_tensor(rng.normal(size=(len(rows), 2)) + np.array([[3.0, 0.0]]), dtype=torch.float32)
    emb[::4] = torch.tensor([0.0, 3.0])     # a few identical states so BiGPO clusters hold several rows
    logp = -torch.as_tensor(rng.random((len(rows), T)), dtype=torch.float32)
    return rows, mask, emb, logp


def hind_sums(mask, logp):
    """HCAPO/RELACE's hindsight sums: the old sums moved by a per-row amount (every row scored)."""
    return (logp * mask).sum(1).double() + torch.linspace(-1.0, 1.0, len(mask), dtype=torch.float64)


def make_proto(rows, mask, emb, logp):
    extra = np.empty(len(rows), dtype=object)
    extra[:] = [step_fields(r["group"], r["traj"], r["step"], r["reward"], r["valid"], r["anchor"], r["key"])
                for r in rows]
    return DataProto.from_dict(tensors={"response_mask": mask, "old_log_probs": logp, EMBEDDING_KEY: emb,
                                        HIND_KEY: hind_sums(mask, logp)},
                               non_tensors={"extra_fields": extra})


def expected_tokens(rows, mask, emb, logp, name, **opts):
    anchors = np.empty(len(rows), dtype=object)
    anchors[:] = [anchor_hash(r["anchor"]) for r in rows]
    keys = np.empty(len(rows), dtype=object)
    keys[:] = [r["key"] for r in rows]
    batch = StepBatch(group_id=[r["group"] for r in rows], traj_id=[r["traj"] for r in rows],
                      step_idx=[r["step"] for r in rows], reward=[r["reward"] for r in rows],
                      action_valid=[r["valid"] for r in rows], anchor=anchors, action_key=keys,
                      embedding=emb.numpy(), resp_len=mask.sum(1).numpy(),
                      old_logp_sum=(logp * mask).sum(1).numpy(), hind_logp_sum=hind_sums(mask, logp).numpy())
    adv = compute_advantages(batch, name, **opts)
    return torch.as_tensor(adv, dtype=torch.float32)[:, None] * mask


@pytest.mark.parametrize("name", available_estimators())
def test_token_advantages_equal_compute_advantages_on_the_same_rows(name):
    rows, mask, emb, logp = make_rows()
    want = expected_tokens(rows, mask, emb, logp, name, gamma=0.9)
    out = compute_data_advantages(make_proto(rows, mask, emb, logp), name, gamma=0.9)
    torch.testing.assert_close(out.batch["advantages"], want)
    torch.testing.assert_close(out.batch["returns"], want)
    assert (out.batch["advantages"][mask == 0] == 0).all()
    if name in ("gigpo", "bipace", "grpo"):
        assert out.batch["advantages"].abs().sum() > 0     # the data gives these estimators something to say


def test_padding_copies_stay_out_and_get_zero():
    rows, mask, emb, logp = make_rows(1)
    base = compute_data_advantages(make_proto(rows, mask, emb, logp), "gigpo").batch["advantages"]
    padded = make_proto(rows + rows[:2], torch.cat([mask, mask[:2]]), torch.cat([emb, emb[:2]]),
                        torch.cat([logp, logp[:2]]))
    flags = np.r_[np.zeros(len(rows), bool), True, True]
    adv = compute_data_advantages(padded, "gigpo", padding=flags).batch["advantages"]
    torch.testing.assert_close(adv[:len(rows)], base)
    assert (adv[len(rows):] == 0).all()
    with pytest.raises(ValueError, match="duplicate rows"):
        compute_data_advantages(padded, "gigpo")


def test_missing_fields_are_named():
    rows, mask, emb, logp = make_rows()
    proto = make_proto(rows, mask, emb, logp)
    proto.batch.pop(EMBEDDING_KEY)
    with pytest.raises(ValueError, match="bipace_embedding.*agents.verl_bridge.main"):
        compute_data_advantages(proto, "bigpo")
    plain = DataProto.from_dict(tensors={"response_mask": mask})
    with pytest.raises(ValueError, match="bipace_env agent loop"):
        compute_data_advantages(plain, "grpo")
    with pytest.raises(ValueError, match="unknown estimator 'ppo'"):
        compute_data_advantages(proto, "ppo")
    proto.batch.pop(HIND_KEY)
    with pytest.raises(ValueError, match="hind_logp_sum.*bipace_hind_logp_sum.*score_hindsight"):
        compute_data_advantages(proto, "hcapo")


class FakeTQ:
    """The two TransferQueue calls the hook makes, over an in-memory store built by verl's own
    ``list_of_dict_to_tensordict`` (nested response tensors, per-sample extra_fields dicts)."""

    def __init__(self, samples):
        self.store = {f"k{i}": s for i, s in enumerate(samples)}
        self.put = {}

    def kv_batch_get(self, keys, partition_id, select_fields):
        return list_of_dict_to_tensordict([{f: self.store[k][f] for f in select_fields} for k in keys])

    def kv_batch_put(self, keys, partition_id, fields):
        self.put = {k: fields[i] for i, k in enumerate(keys)}
        return types.SimpleNamespace(keys=keys)


@pytest.mark.parametrize("name", ["grpo", "gigpo", "bipace", "gaca"])
def test_trainer_hook_reads_and_writes_the_transfer_queue(monkeypatch, name):
    rows, mask, emb, logp = make_rows(2)
    proto = make_proto(rows, mask, emb, logp)
    samples = [{"response_mask": mask[i][mask[i] > 0], "old_log_probs": logp[i][mask[i] > 0],
                EMBEDDING_KEY: emb[i], "extra_fields": proto.non_tensor_batch["extra_fields"][i]}
               for i in range(len(rows))]
    fake = FakeTQ(samples)
    monkeypatch.setattr(bridge_trainer, "tq", fake)
    trainer = bridge_trainer.BipacePPOTrainer.__new__(bridge_trainer.BipacePPOTrainer)
    trainer.config = OmegaConf.create({"algorithm": {"adv_estimator": name, "use_kl_in_reward": False},
                                       "bipace": {"estimator_options": {"gamma": 0.9}}})
    keys = list(fake.store)
    batch = types.SimpleNamespace(keys=keys, tags=[{} for _ in keys], partition_id="train")
    metrics = {}
    trainer._compute_advantage(batch, metrics)
    want = expected_tokens(rows, mask, emb, logp, name, gamma=0.9)
    for i, k in enumerate(keys):
        got = fake.put[k]["advantages"]
        torch.testing.assert_close(got, want[i][mask[i] > 0])       # one value per response token
    assert metrics["bipace/padding_samples"] == 0


def test_trainer_is_registered_and_refuses_what_it_does_not_do():
    verls = get_trainer_cls("sync")
    with bridge_trainer.sync_mode_trains_with_bipace():
        assert get_trainer_cls("sync") is bridge_trainer.BipacePPOTrainer
    assert get_trainer_cls("sync") is verls and verls is not bridge_trainer.BipacePPOTrainer
    with pytest.raises(ValueError, match="python -m agents.verl_bridge.main"):
        core_algos.get_adv_estimator_fn("gigpo")(token_level_rewards=None, response_mask=None)
    assert set(REGISTRY) - {"grpo", "rloo"} <= set(core_algos.ADV_ESTIMATOR_REGISTRY)
    with pytest.raises(ValueError, match="use_kl_in_reward"):
        bridge_trainer.check_algorithm(OmegaConf.create({"adv_estimator": "gigpo", "use_kl_in_reward": True}))
    with pytest.raises(ValueError, match="bypass_mode"):
        bridge_trainer.check_algorithm(OmegaConf.create(
            {"adv_estimator": "gigpo", "rollout_correction": {"rollout_is": "token", "bypass_mode": False}}))
