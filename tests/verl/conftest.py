"""verl bridge fixtures: skip the folder without verl (it lives in the [verl] extra), an isolated model
cache for the tiny model, and the fake async LLM server the agent loop talks to."""
from __future__ import annotations

import os

import pytest

pytest.importorskip("verl", reason="the verl bridge tests need `pip install -e \".[verl]\"`")


@pytest.fixture(scope="session", autouse=True)
def _verl_cache(tmp_path_factory):
    old = os.environ.get("BIPACE_CACHE")
    os.environ["BIPACE_CACHE"] = str(tmp_path_factory.mktemp("bipace_cache"))
    yield
    if old is None:
        os.environ.pop("BIPACE_CACHE", None)
    else:
        os.environ["BIPACE_CACHE"] = old


@pytest.fixture(scope="session")
def tiny():
    import torch
    from agents.models import load_policy
    torch.set_num_threads(1)
    return load_policy("tiny")
