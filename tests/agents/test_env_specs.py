"""Per-env agent settings: reward maps read the env's info, split-bound envs say what they need, and
the trainer builds one env per split for them."""
import pytest

from agents.envs import get_env_spec


def test_webshop_reward_is_ten_only_for_a_perfect_score():
    spec = get_env_spec("webshop")
    assert spec.reward_map(1.0, True, {"score": 1.0}) == 10.0
    assert spec.reward_map(10.0, True, {"score": 1.0}) == 10.0      # env made with reward_mode=verl_agent
    assert spec.reward_map(0.9, True, {"score": 0.9}) == 0.0
    assert spec.reward_map(1.0, False, {"score": 1.0}) == 0.0


def test_split_bound_env_lists_own_split_and_explains_the_other():
    spec = get_env_spec("webshop")
    env = spec.make()
    try:
        tasks = spec.tasks(env, "train")
        assert len(tasks) > 1000 and tasks[0] == 500                 # verl_agent split: train from 500
        with pytest.raises(ValueError, match="made for split 'train'.*'test'"):
            spec.tasks(env, "test")
    finally:
        env.close()


def test_split_tasks_makes_lists_and_closes_an_env():
    import functools
    import gymnasium as gym
    closed = []

    class Closing(gym.Wrapper):
        def close(self):
            closed.append(self)
            super().close()

    spec = get_env_spec("textcraft")
    make = functools.partial(spec.make, preset="agentgym", depths=(1,))
    test = spec.split_tasks(lambda: Closing(make()), "test")
    assert test == list(spec.tasks(make(), "test")) and len(test) > 3      # the same list the env gives
    assert spec.split_tasks(lambda: Closing(make()), "test", limit=3) == test[:3]
    assert len(closed) == 2
    webshop = get_env_spec("webshop")
    with pytest.raises(ValueError, match="made for split 'train'.*'test'"):
        webshop.split_tasks(lambda: Closing(webshop.make(split="train")), "test")
    assert len(closed) == 3                                             # closed on the error too


def test_unknown_env_name():
    with pytest.raises(ValueError, match="unknown env 'minecraft'"):
        get_env_spec("minecraft")


def test_trainer_builds_one_webshop_env_per_split(tmp_path, capsys):
    import json
    from agents.config import TrainConfig
    from agents.trainer import Trainer
    cfg = TrainConfig(env="webshop", estimator="gigpo", model="tiny", out_dir=str(tmp_path), batch_tasks=1,
                      group_size=2, max_steps=2, max_new_tokens=4, iterations=1, eval_every=0, eval_tasks=2,
                      eval_batch=2, checkpoint_every=0, lora_rank=4, lora_alpha=8, tensorboard=False,
                      progress=False,
                      sft_steps=2, sft_episodes=2, sft_batch=2)
    tr = Trainer(cfg)
    assert min(tr.train_tasks) == 500 and max(tr.eval_tasks) < 500     # verl_agent: test = goals [0, 500)
    assert (tmp_path / "warm_start" / "config.json").exists()          # warm start from the oracle
    assert "warm start: 4 expert steps from 1 x 2 episodes" in capsys.readouterr().out   # 2-step cap
    summary = tr.train()
    assert 0.0 <= summary["eval_after"] <= 1.0
    assert json.loads((tmp_path / "config.json").read_text())["env"] == "webshop"
    with pytest.raises(ValueError, match="--train-split"):
        Trainer(TrainConfig(env="webshop", env_kwargs='{"split": "test"}', out_dir=str(tmp_path / "b")))


def _replay_wins(spec, make_env, task, actions, **reset_options) -> bool:
    env = make_env()
    try:
        env.reset(seed=0, options={"task_id": task, **reset_options})
        for a in actions:
            _, _, term, trunc, info = env.step(a)
            if term or trunc:
                return bool(info.get("won", False)) or spec.reward_map(0.0, term, info) > 0
        return False
    finally:
        env.close()


def _expert_data(env_name, split_kwargs, n_tasks, max_steps):
    from agents.models import load_policy
    from agents.prompts import PromptSettings, make_prompter
    from agents.sft import expert_examples
    spec = get_env_spec(env_name)
    make_env = lambda: spec.make(max_steps=max_steps, **split_kwargs)   # noqa: E731
    probe = make_env()
    tasks = spec.tasks(probe, split_kwargs["split"])[:n_tasks]
    probe.close()
    _, tok = load_policy("tiny")
    prompter = make_prompter(env_name, PromptSettings(history_length=2, require_think=False))
    examples = expert_examples(spec, make_env, tasks, prompter, tok, max_steps=max_steps)
    return spec, make_env, tasks, examples


@pytest.mark.parametrize("env_name", ["webshop", "alfworld"])
def test_expert_hook_gives_winning_sft_episodes(env_name, shared_dir, capsys):
    """The SFT expert hook works beyond TextCraft: each rendered episode, replayed, wins its task."""
    import re
    kwargs = ({"split": "test"} if env_name == "webshop"
              else {"split": "valid_seen", "data_dir": str(shared_dir / "data" / "alfworld"),
                    "task_types": [1]})
    spec, make_env, tasks, examples = _expert_data(env_name, kwargs, n_tasks=2, max_steps=30)
    assert "note: the expert won" not in capsys.readouterr().out
    # split the examples back into episodes: each episode's first prompt is a no-history prompt
    episodes: list[list[str]] = []
    for e in examples:
        if "Prior to this step" not in e.prompt:
            episodes.append([])
        episodes[-1].append(re.search(r"<action>(.*)</action>", e.response).group(1))
    assert len(episodes) == len(tasks) and all(len(a) >= 2 for a in episodes)
    opts = spec.expert_reset_options
    assert all(_replay_wins(spec, make_env, t, acts, **opts) for t, acts in zip(tasks, episodes))
    if env_name == "webshop":
        assert all(a[0].startswith("search[") and a[-1] == "click[buy now]" for a in episodes)


def test_alfworld_trainer_warm_starts_and_trains_on_real_games(tmp_path, shared_dir):
    """``bipace-train --env alfworld --sft-steps N`` on the real validation games: split per env, expert
    warm start, one RL iteration that changes the adapter."""
    import json
    import torch
    from agents.config import TrainConfig
    from agents.trainer import Trainer
    data = str(shared_dir / "data" / "alfworld")
    cfg = TrainConfig(env="alfworld", env_kwargs=json.dumps({"data_dir": data, "task_types": [1]}),
                      train_split="valid_seen", eval_split="valid_unseen", estimator="gigpo", model="tiny",
                      out_dir=str(tmp_path), batch_tasks=1, group_size=2, max_steps=3, max_new_tokens=6,
                      iterations=1, eval_every=0, eval_tasks=1, eval_batch=1, checkpoint_every=0, lora_rank=4,
                      lora_alpha=8, tensorboard=False, progress=False, sft_steps=2, sft_episodes=1,
                      sft_batch=2,
                      require_think="no")
    tr = Trainer(cfg)
    assert set(tr.train_tasks).isdisjoint(tr.eval_tasks) and tr.train_tasks and tr.eval_tasks
    assert (tmp_path / "warm_start" / "config.json").exists()
    before = {n: p.detach().clone() for n, p in tr.model.named_parameters() if "lora_" in n}
    summary = tr.train()
    assert 0.0 <= summary["eval_after"] <= 1.0
    assert any(not torch.equal(before[n], p) for n, p in tr.model.named_parameters() if n in before)


def _kind(value) -> str:
    """The type gymnasium's vector info merge keys its arrays on: numbers go to an array of the first
    value's dtype (a float landing in an int array is truncated), dicts are merged key by key (a None
    meeting one crashed the WebShop evaluation), anything else goes to an object array, where a text and
    a None (no value, e.g. ALFWorld's expert_action once the game is over) sit together safely."""
    import numpy as np
    if isinstance(value, np.generic):
        value = value.item()
    return "object" if value is None or isinstance(value, (str, list, tuple)) else type(value).__name__


@pytest.mark.parametrize("env_name", ["textcraft", "webshop", "alfworld"])
def test_every_info_key_keeps_one_type_through_an_episode(env_name):
    """Vector envs merge infos key by key across envs at different points of their episodes, so a key
    must hold one type at reset, after a refused action, mid-episode and at the winning step (WebShop's
    reward_details was None until the purchase and crashed the held-out evaluation)."""
    spec = get_env_spec(env_name)
    kwargs = {"split": "train"} if spec.split_kwarg else {}
    env = spec.make(max_steps=40, **kwargs)
    kinds: dict[str, set] = {}

    def record(info, when):
        for key, value in info.items():
            kinds.setdefault(key, set()).add((_kind(value), when))
    try:
        task = spec.tasks(env, "train")[0]
        _, info = env.reset(seed=0, options={"task_id": task, **spec.expert_reset_options})
        record(info, "reset")
        _, _, _, _, info = env.step("fly to the moon")
        record(info, "refused")
        done, steps = False, 0
        while not done:
            plan = spec.expert(env)
            assert plan, f"{env_name}: the expert gave up on {task!r} after {steps} steps"
            _, _, term, trunc, info = env.step(plan[0])
            steps += 1
            done = term or trunc
            record(info, "end" if done else "step")
        assert info.get("won") or spec.reward_map(0.0, term, info) > 0
    finally:
        env.close()
    mixed = {k: sorted(v) for k, v in kinds.items() if len({kind for kind, _ in v}) > 1}
    assert {"won", "admissible_actions"} <= set(kinds)
    assert not mixed, f"{env_name} info keys change type within an episode: {mixed}"
