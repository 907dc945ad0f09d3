import json

import numpy as np
import pytest
import torch

from agents.config import TrainConfig
from agents.envs import get_env_spec, reward_webshop, reward_won
from agents.ppo import low_var_kl, ppo_terms
from agents.train_log import mixed_group_share
from agents.trainer import Trainer
from fake_env import FakeCraftEnv


def _cfg(tmp_path, **kw):
    base = dict(env="textcraft", estimator="bipace", model="tiny", out_dir=str(tmp_path), batch_tasks=2,
                group_size=2, max_new_tokens=6, max_steps=3, iterations=2, eval_every=0, eval_tasks=2,
                eval_batch=2, checkpoint_every=1, lora_rank=4, lora_alpha=8, lr=1e-2, mini_batch_rows=4,
                micro_batch_rows=3, tensorboard=False, progress=False)
    base.update(kw)
    return TrainConfig(**base)


def _trainer(cfg):
    return Trainer(cfg, make_env=lambda: FakeCraftEnv(max_steps=3), train_tasks=list(range(8)),
                   eval_tasks=[8, 9])


def test_one_iteration_changes_lora_weights_and_nothing_else(tmp_path):
    tr = _trainer(_cfg(tmp_path))
    before = {n: p.detach().clone() for n, p in tr.model.named_parameters()}
    m = tr.iteration(1)
    assert m["rows"] > 0 and m["grad_norm"] > 0
    changed = {n for n, p in tr.model.named_parameters() if not torch.equal(before[n], p.detach())}
    lora = {n for n in before if "lora_" in n}
    assert changed and changed <= lora
    assert any("lora_B" in n for n in changed)   # B starts at zero, so the adapter really moved


def test_resume_after_checkpoint_gives_the_same_next_iteration(tmp_path):
    straight = _trainer(_cfg(tmp_path / "a"))
    straight.iteration(1)
    expected = straight.iteration(2)

    first = _trainer(_cfg(tmp_path / "b"))
    first.iteration(1)
    first.save_checkpoint(1)
    del first                                    # "killed" after the checkpoint
    resumed = _trainer(_cfg(tmp_path / "b", resume=True))
    assert resumed.start_iteration == 2
    got = resumed.iteration(2)
    assert expected["loss"] != 0.0
    assert got["loss"] == pytest.approx(expected["loss"], rel=1e-6, abs=1e-9)
    assert got["rows"] == expected["rows"] and got["pg_loss"] == pytest.approx(expected["pg_loss"], abs=1e-9)


def test_resume_without_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        _trainer(_cfg(tmp_path, resume=True))


def test_train_writes_logs_adapter_and_summary(tmp_path):
    tr = _trainer(_cfg(tmp_path, iterations=2, eval_every=1, estimator="grpo", kl_coef=0.0))
    s = tr.train()
    assert (tmp_path / "adapter" / "adapter_config.json").exists()
    assert (tmp_path / "checkpoints" / "latest").read_text() == "iter_000002"
    rows = (tmp_path / "train.csv").read_text().splitlines()
    assert len(rows) == 3 and rows[0].startswith("loss,")
    assert len((tmp_path / "eval.csv").read_text().splitlines()) == 4      # header + it 0, 1, 2
    assert json.loads((tmp_path / "summary.json").read_text())["estimator"] == "grpo"
    assert 0.0 <= s["eval_before"] <= 1.0
    by_task = [json.loads(line) for line in (tmp_path / "eval_by_task.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in by_task] == [0, 1, 2]
    assert all(sorted(r["by_task"]) == ["8", "9"] for r in by_task)


def test_eval_repeats_score_each_task_several_times_with_new_seeds(tmp_path, monkeypatch):
    tr = _trainer(_cfg(tmp_path, eval_repeats=3))
    seen = []
    col = tr.collector("eval")
    real = col.collect
    monkeypatch.setattr(col, "collect", lambda tasks, seeds, groups: seen.append((list(tasks), list(seeds)))
                        or real(tasks, seeds, groups))
    out = tr.evaluate()
    assert out["eval_n"] == 6
    # per-goal tallies add up to the pooled figure
    assert {k: n for k, (_, n) in tr.eval_by_task.items()} == {"8": 3, "9": 3}
    assert sum(w for w, _ in tr.eval_by_task.values()) / 6 == pytest.approx(out["eval_success"])
    assert sorted(t for tasks, _ in seen for t in tasks) == [8, 8, 8, 9, 9, 9]
    seeds = [s for _, ss in seen for s in ss]
    assert len(set(seeds)) == len(seeds)
    with pytest.raises(ValueError, match="eval_repeats"):
        _trainer(_cfg(tmp_path, eval_repeats=0)).evaluate()


def test_an_evaluation_stopped_part_way_continues_with_the_chunks_it_kept(tmp_path, monkeypatch):
    cfg = _cfg(tmp_path, eval_repeats=3)                  # 6 episodes in chunks of eval_batch=2
    whole = _trainer(cfg)
    full = whole.evaluate(tmp_path / "full.jsonl")
    records = [json.loads(line) for line in (tmp_path / "full.jsonl").read_text().splitlines()]
    assert [r["start"] for r in records] == [0, 2, 4] and all(r["s"] > 0 for r in records)
    assert full == _trainer(cfg).evaluate()               # keeping chunks changes nothing

    # as if the session had ended after the first chunk
    (tmp_path / "part.jsonl").write_text(json.dumps(records[0]) + "\n")
    resumed, played = _trainer(cfg), []
    col = resumed.collector("eval")
    real = col.collect
    monkeypatch.setattr(col, "collect", lambda tasks, seeds, groups: played.append(list(tasks))
                        or real(tasks, seeds, groups))
    assert resumed.evaluate(tmp_path / "part.jsonl") == full and resumed.eval_by_task == whole.eval_by_task
    assert len(played) == 2                               # only the two missing chunks were played
    again = [json.loads(line) for line in (tmp_path / "part.jsonl").read_text().splitlines()]
    assert [{k: r[k] for k in ("start", "won", "lengths")} for r in again] == [
        {k: r[k] for k in ("start", "won", "lengths")} for r in records]

    # a session stopped while appending: the cut last line is dropped and its chunk played again
    (tmp_path / "cut.jsonl").write_text(json.dumps(records[0]) + "\n" + json.dumps(records[1])[:25])
    assert _trainer(cfg).evaluate(tmp_path / "cut.jsonl") == full
    kept = (tmp_path / "cut.jsonl").read_text().splitlines()
    assert [json.loads(line)["start"] for line in kept] == [0, 2, 4]
    (tmp_path / "bad.jsonl").write_text("not json\n" + json.dumps(records[0]) + "\n")
    with pytest.raises(ValueError, match="line 1 is not a chunk record; delete the file"):
        _trainer(cfg).evaluate(tmp_path / "bad.jsonl")

    other = dict(records[0], tasks=["7", "7"])
    (tmp_path / "other.jsonl").write_text(json.dumps(other) + "\n")
    with pytest.raises(ValueError, match="chunks of another evaluation"):
        _trainer(cfg).evaluate(tmp_path / "other.jsonl")


def test_unknown_estimator_is_reported(tmp_path):
    with pytest.raises(ValueError, match="available"):
        _trainer(_cfg(tmp_path, estimator="ppo"))


def test_dual_clip_and_clip_semantics():
    old = torch.zeros(1, 4)
    logp = torch.log(torch.tensor([[0.5, 1.1, 1.5, 10.0]]))
    mask = torch.ones(1, 4)
    pos = ppo_terms(logp, old, torch.ones(1, 4), mask)["pg"]
    assert torch.allclose(pos, -torch.tensor([[0.5, 1.1, 1.2, 1.2]]))      # upper clip for A > 0
    neg = ppo_terms(logp, old, -torch.ones(1, 4), mask)["pg"]
    assert torch.allclose(neg, torch.tensor([[0.8, 1.1, 1.5, 3.0]]))       # lower clip, dual clip at c=3
    assert torch.all(low_var_kl(logp, logp) == 0) and torch.all(low_var_kl(logp, old) >= 0)


def test_reward_maps_follow_the_papers():
    assert reward_won(1.0, True, {"won": True}) == 10.0 and reward_won(0.0, False, {"won": False}) == 0.0
    assert reward_webshop(1.0, True, {}) == 10.0 and reward_webshop(0.75, True, {}) == 0.0
    assert get_env_spec("webshop").fallback_chars == 20
    with pytest.raises(ValueError, match="registered"):
        get_env_spec("nethack")


def test_recomputed_old_logprobs_match_the_rollout_ones(tmp_path):
    tr = _trainer(_cfg(tmp_path, old_logprobs="recompute"))
    ro, _ = tr.rollout(1)
    fresh = tr._old_logprobs(ro)
    for a, b in zip(fresh, ro.old_logprobs):
        assert torch.allclose(a, b, atol=1e-4)
    assert tr.update(ro, tr.advantages(ro), __import__("numpy").random.default_rng(0))["loss"] != 0.0


def test_update_moves_the_policy_up_the_advantage_weighted_log_likelihood(tmp_path):
    # the sign check the parameter-change test cannot make: a flipped advantage or loss sign fails here.
    # One small optimizer step over all rows is first-order, so the surrogate sum_r A_r * log p(answer_r)
    # must rise; a single row may not, since the rows share parameters.
    import numpy as np
    from agents.ppo import response_logprobs
    tr = _trainer(_cfg(tmp_path, kl_coef=0.0, entropy_coef=0.0, lr=1e-4, ppo_epochs=1, mini_batch_rows=0))
    ro, rng = tr.rollout(1)
    rows = [r for r in range(len(ro.response_ids)) if len(ro.response_ids[r]) > 0]
    adv = np.zeros(len(ro.response_ids))
    adv[rows[0::2]], adv[rows[1::2]] = 1.0, -1.0

    def surrogate():
        with torch.no_grad():
            lp, _, mask = response_logprobs(tr.model, [ro.prompt_ids[r] for r in rows],
                                            [ro.response_ids[r] for r in rows], tr.tok.pad_token_id,
                                            tr.cfg.temperature, with_entropy=False)
        return float((torch.as_tensor(adv[rows], dtype=lp.dtype) * (lp * mask).sum(1)).sum())

    before = surrogate()
    tr.update(ro, adv, rng)
    after = surrogate()
    assert after > before
    tr.update(ro, -adv, rng)        # the opposite advantages push it back down
    assert surrogate() < after


@pytest.mark.parametrize("estimator, mode, expected", [
    ("grpo", None, "mean_std_norm"), ("gigpo", None, "mean_norm"), ("hgpo", None, "mean_std_norm"),
    ("grpo", "mean_norm", "mean_norm")])
def test_mode_none_means_the_estimators_default_and_is_logged(tmp_path, capsys, estimator, mode, expected):
    from estimators import REGISTRY
    tr = _trainer(_cfg(tmp_path, estimator=estimator, mode=mode))
    assert tr.mode == expected
    assert mode is not None or REGISTRY[estimator].default_mode == expected
    assert f"{estimator}: advantage normalisation {expected}" in capsys.readouterr().out


def test_mixed_group_share_counts_groups_whose_returns_differ():
    from types import SimpleNamespace
    # 3 groups of 2 episodes (env 0-5); rows in time-major order, env 4 and 5 finish after one step
    ro = SimpleNamespace(env_index=np.array([0, 1, 2, 3, 4, 5, 0, 1, 2, 3]),
                         batch=SimpleNamespace(group_id=np.array([7, 7, 8, 8, 9, 9, 7, 7, 8, 8])),
                         episode_return=np.array([10.0, 0.0, 0.0, 0.0, 1.0, 1.0]))
    assert mixed_group_share(ro) == pytest.approx(1 / 3)
    ro.episode_return = np.array([10.0, 0.0, 0.0, 0.5, 1.0, 0.0])
    assert mixed_group_share(ro) == 1.0


def test_drift_rows_log_how_far_the_update_moved_the_policy(tmp_path):
    quiet = _trainer(_cfg(tmp_path / "a")).iteration(1)
    assert "drift" not in quiet and 0.0 <= quiet["mixed_groups"] <= 1.0
    m = _trainer(_cfg(tmp_path / "b", drift_rows=4)).iteration(1)
    assert m["drift"] > 1e-3 and np.isfinite(m["drift"])       # lr 1e-2 moves the tiny model


def test_mixed_task_sampling_tallies_each_rollout_and_a_resume_keeps_the_tally(tmp_path):
    tr = _trainer(_cfg(tmp_path, task_sampling="mixed", estimator="grpo"))
    tr.iteration(1)
    tally = tr.task_tally
    assert tally.episodes.sum() == 2 * 2 and set(np.flatnonzero(tally.episodes)) <= set(range(8))
    assert np.all(tally.episodes[tally.episodes > 0] == 2)          # a group: G episodes of one task
    tr.save_checkpoint(1)
    wins, episodes = tally.wins.copy(), tally.episodes.copy()
    resumed = _trainer(_cfg(tmp_path, task_sampling="mixed", estimator="grpo", resume=True))
    assert np.array_equal(resumed.task_tally.wins, wins)
    assert np.array_equal(resumed.task_tally.episodes, episodes)
    resumed.iteration(2)
    assert resumed.task_tally.episodes.sum() == 8


def test_unknown_task_sampling_is_refused_before_any_rollout(tmp_path):
    with pytest.raises(ValueError, match="task_sampling must be one of uniform | mixed"):
        _trainer(_cfg(tmp_path, task_sampling="hardest"))


def test_eval_env_kwargs_reach_only_the_held_out_env_and_evaluation_reports_refused_answers(
        tmp_path, shared_dir):
    fixture = {"data_dir": str(shared_dir / "data" / "webshop-fixture"), "verify_hashes": False}
    cfg = _cfg(tmp_path, env="webshop", eval_env_kwargs=json.dumps(fixture), eval_split="test", eval_tasks=0,
               eval_batch=5, max_steps=2)
    tr = Trainer(cfg)
    assert len(tr.eval_tasks) == 5                  # the fixture's 5 goals ...
    assert len(tr.train_tasks) > 1000               # ... while training stays on the generated catalogue
    chunks = tmp_path / "eval.chunks.jsonl"
    ev = tr.evaluate(chunks)
    assert ev["eval_n"] == 5 and 0.0 <= ev["eval_score"] <= 1.0
    # the untrained tiny model writes no admissible action: counted, and shown as text
    assert ev["eval_inadmissible"] > 0.5
    sample = tr.eval_episodes["inadmissible_samples"][0]
    assert set(sample) == {"response", "action"} and isinstance(sample["response"], str)
    episodes = tr.eval_episodes
    assert episodes["tasks"] == [str(t) for t in tr.eval_tasks]
    # each episode's actions, one a step, and the steps the env refused: the same count as the metric
    assert [len(a) for a in episodes["actions"]] == episodes["lengths"]
    assert all(isinstance(a, str) for ep in episodes["actions"] for a in ep)
    refused = sum(len(r) for r in episodes["refused_steps"])
    assert refused / sum(episodes["lengths"]) == pytest.approx(ev["eval_inadmissible"])
    assert all(0 <= j < n for r, n in zip(episodes["refused_steps"], episodes["lengths"]) for j in r)
    assert tr.evaluate(chunks) == ev                # read back from the kept chunk, not played again
    assert tr.eval_episodes == episodes
    with pytest.raises(ValueError, match="eval-env-kwargs must be a JSON object"):
        Trainer(_cfg(tmp_path / "bad", env="webshop", eval_env_kwargs="[1]"))


def test_an_evaluation_whose_last_chunk_is_padded_says_how_many_episodes_it_discards(tmp_path, capsys):
    def trainer(**kw):
        return Trainer(_cfg(tmp_path, eval_tasks=3, **kw), make_env=lambda: FakeCraftEnv(max_steps=3),
                       train_tasks=list(range(8)), eval_tasks=[7, 8, 9])
    trainer(eval_batch=3, eval_repeats=2).evaluate()                 # 6 episodes in chunks of 3
    assert "last chunk pads" not in capsys.readouterr().out
    out = trainer(eval_batch=2).evaluate()
    assert out["eval_n"] == 3                                        # the padding episode is not scored
    assert "3 episodes in chunks of 2: the last chunk pads 1 of its 2 envs" in capsys.readouterr().out


def test_chunks_kept_before_actions_were_recorded_read_back_as_unknown_episodes(tmp_path):
    tr = Trainer(_cfg(tmp_path, eval_tasks=3, eval_batch=3), make_env=lambda: FakeCraftEnv(max_steps=3),
                 train_tasks=list(range(8)), eval_tasks=[7, 8, 9])
    chunks = tmp_path / "eval.chunks.jsonl"
    ev = tr.evaluate(chunks)
    assert all(isinstance(ep, list) for ep in tr.eval_episodes["actions"])
    old = [{k: v for k, v in json.loads(line).items() if k not in ("actions", "refused_steps")}
           for line in chunks.read_text().splitlines()]
    chunks.write_text("".join(json.dumps(r) + "\n" for r in old))
    assert tr.evaluate(chunks) == ev                # the same scores, read back ...
    assert tr.eval_episodes["actions"] == [None] * 3 == tr.eval_episodes["refused_steps"]   # ... not invented


def test_evaluation_chunks_are_equal_and_count_every_repeat():
    from agents.evaluation import chunk_width
    assert chunk_width(60, 40) == 30              # 2 x 30, not 40 + 20 played padding envs
    assert chunk_width(200, 40) == 40 and chunk_width(61, 40) == 31 and chunk_width(3, 64) == 3
    with pytest.raises(ValueError, match="eval_batch must be >= 1"):
        chunk_width(10, 0)


def test_the_evaluation_width_counts_repeats_so_a_tasks_repeats_run_side_by_side(tmp_path, capsys):
    tr = Trainer(_cfg(tmp_path, eval_tasks=3, eval_batch=8, eval_repeats=2),
                 make_env=lambda: FakeCraftEnv(max_steps=3), train_tasks=list(range(8)), eval_tasks=[7, 8, 9])
    assert tr.collector("eval").n == 6            # 3 tasks x 2 repeats in one chunk, not 2 chunks of 3
    assert tr.evaluate()["eval_n"] == 6 and "last chunk pads" not in capsys.readouterr().out
