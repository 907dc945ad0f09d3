"""Offline, deterministic text environments registered with gymnasium.

    import gymnasium as gym, bipace_envs
    env = gym.make("bipace/TextCraft-v0")

Each environment follows the common contract of ``../shared/specs/envs.md``: ``reset`` returns
``(obs: str, info)``, ``step(action: str)`` returns ``(obs, reward, terminated, truncated, info)``,
and ``info`` always carries ``admissible_actions``, ``task_id``, ``won``, ``anchor`` and
``obs_hash`` (plus ``action_valid`` on step).
"""
from gymnasium.envs.registration import register

register(id="bipace/TextCraft-v0", entry_point="bipace_envs.textcraft.env:TextCraftEnv")
register(id="bipace/WebShop-v0", entry_point="bipace_envs.webshop.env:WebShopEnv")
register(id="bipace/ALFWorld-v0", entry_point="bipace_envs.alfworld.env:ALFWorldEnv")

ENV_IDS = ("bipace/TextCraft-v0", "bipace/WebShop-v0", "bipace/ALFWorld-v0")
