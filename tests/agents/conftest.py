"""Agent test fixtures: an isolated model cache (the tiny model is built once per session into it)
and the small fake env of ``fake_env.py``."""
from __future__ import annotations

import os
import sys

import pytest
import torch

from tests.conftest import isolated_bipace_cache

sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture(scope="session", autouse=True)
def _agent_cache(tmp_path_factory):
    torch.set_num_threads(1)
    with isolated_bipace_cache(tmp_path_factory.mktemp("bipace_cache")):
        yield


@pytest.fixture(scope="session")
def tiny():
    from agents.models import load_policy
    return load_policy("tiny")


@pytest.fixture
def fake_env_factory():
    from fake_env import FakeCraftEnv
    return lambda: FakeCraftEnv(max_steps=3)
