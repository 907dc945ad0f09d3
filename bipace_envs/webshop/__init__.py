"""WebShop (Yao et al. 2022) in pure Python: the reference's text pages, search, goals and reward,
offline by default (a generated catalogue in the reference's raw schema).

    import gymnasium as gym, bipace_envs
    env = gym.make("bipace/WebShop-v0")                              # generated catalogue
    env = gym.make("bipace/WebShop-v0", data_dir="/data/webshop")    # the reference's files

Modules: ``catalogue`` (raw files, cleaning, hash checks), ``generate`` (the default catalogue),
``goals`` (synthetic/human goals, split presets), ``search`` (Lucene-style BM25), ``pages`` (text and
text_rich strings, clickables), ``session`` (browsing rules), ``reward`` (the score), ``env`` (gym),
``oracle`` (goal-buying policy).
"""
from .oracle import oracle_action, oracle_actions

__all__ = ["oracle_action", "oracle_actions"]
