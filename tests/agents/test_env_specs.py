"""Per-env agent settings: reward maps read the env's info, split-bound envs say what they need."""
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
        with pytest.raises(NotImplementedError, match="made for split 'train'.*'test'"):
            spec.tasks(env, "test")
    finally:
        env.close()


def test_unknown_env_name():
    with pytest.raises(ValueError, match="unknown env 'minecraft'"):
        get_env_spec("minecraft")
