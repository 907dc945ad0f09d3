"""verl bridge fixtures: an isolated model cache for the tiny model. Each test module skips itself without
verl (``pytest.importorskip``; verl lives in the [verl] extra), so the main suite runs without it."""
from __future__ import annotations

import pytest

from tests.conftest import isolated_bipace_cache


@pytest.fixture(scope="session", autouse=True)
def _verl_cache(tmp_path_factory):
    with isolated_bipace_cache(tmp_path_factory.mktemp("bipace_cache")):
        yield


@pytest.fixture(scope="session")
def tiny():
    import torch
    from agents.models import load_policy
    torch.set_num_threads(1)
    return load_policy("tiny")
