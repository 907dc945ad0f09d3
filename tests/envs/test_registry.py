"""Every registered bipace env passes gymnasium's checker and the common contract of the spec."""
import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import bipace_envs
from bipace_envs.common import obs_hash

CONTRACT_KEYS = {"admissible_actions", "task_id", "won", "anchor", "obs_hash"}


def test_registry_is_what_we_document():
    ours = sorted(env_id for env_id in gym.registry if env_id.startswith("bipace/"))
    assert ours == sorted(bipace_envs.ENV_IDS)


@pytest.mark.parametrize("env_id", bipace_envs.ENV_IDS)
def test_check_env_and_contract(env_id):
    env = gym.make(env_id)
    try:
        check_env(env.unwrapped, skip_render_check=True)
        obs, info = env.reset(seed=0)
        assert isinstance(obs, str) and CONTRACT_KEYS <= set(info)
        assert info["obs_hash"] == obs_hash(info["anchor"])
        assert isinstance(info["admissible_actions"], list) and info["admissible_actions"]
        obs, reward, terminated, truncated, info = env.step(info["admissible_actions"][0])
        assert CONTRACT_KEYS | {"action_valid"} <= set(info)
        assert isinstance(reward, float) and isinstance(info["won"], bool)
    finally:
        env.close()


def test_async_vector_env_with_shared_memory_says_how_to_fix():
    from gymnasium.vector import AsyncVectorEnv
    with pytest.raises(TypeError, match="shared_memory=False"):
        AsyncVectorEnv([lambda: gym.make("bipace/TextCraft-v0")], shared_memory=True)
