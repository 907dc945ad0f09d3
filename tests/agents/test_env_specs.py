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


def test_unknown_env_name():
    with pytest.raises(ValueError, match="unknown env 'minecraft'"):
        get_env_spec("minecraft")


def test_trainer_builds_one_webshop_env_per_split(tmp_path):
    import json
    from agents.config import TrainConfig
    from agents.trainer import Trainer
    cfg = TrainConfig(env="webshop", estimator="gigpo", model="tiny", out_dir=str(tmp_path), batch_tasks=1,
                      group_size=2, max_steps=2, max_new_tokens=4, iterations=1, eval_every=0, eval_tasks=2,
                      eval_batch=2, checkpoint_every=0, lora_rank=4, lora_alpha=8, tensorboard=False, progress=False)
    tr = Trainer(cfg)
    assert min(tr.train_tasks) == 500 and max(tr.eval_tasks) < 500     # verl_agent: test = goals [0, 500)
    summary = tr.train()
    assert 0.0 <= summary["eval_after"] <= 1.0
    assert json.loads((tmp_path / "config.json").read_text())["env"] == "webshop"
    with pytest.raises(ValueError, match="--train-split"):
        Trainer(TrainConfig(env="webshop", env_kwargs='{"split": "test"}', out_dir=str(tmp_path / "b")))
