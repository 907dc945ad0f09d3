"""Per-env infos unpacked from gymnasium's merged vector infos, nested dicts with non-string keys included."""
import gymnasium as gym
import numpy as np

from agents.rollout import _info_at


class InfoEnv(gym.Env):
    observation_space = gym.spaces.Discrete(2)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, k: int):
        self.k = k

    def reset(self, seed=None, options=None):
        details = {0: f"option {self.k}", "score": 0.5 * self.k}
        if self.k == 1:
            details[7] = "only env 1"
        return 0, {"score": float(self.k), "details": details}

    def step(self, action):
        return 0, 0.0, True, False, {}


def test_nested_infos_with_integer_keys_unpack_to_each_envs_own():
    vec = gym.vector.SyncVectorEnv([lambda k=k: InfoEnv(k) for k in range(2)])
    _, infos = vec.reset(seed=0)
    assert _info_at(infos, 0) == {"score": 0.0, "details": {0: "option 0", "score": 0.0}}
    one = _info_at(infos, 1)
    assert one["details"] == {0: "option 1", "score": 0.5, 7: "only env 1"}
    assert isinstance(one["score"], (float, np.floating)) and one["score"] == 1.0
    vec.close()
