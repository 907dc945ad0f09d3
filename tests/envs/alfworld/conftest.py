"""Fixtures for the ALFWorld tests: the shared real games and a per-session cache of generated games."""
from __future__ import annotations

import pytest

pytest.importorskip("alfworld")
pytest.importorskip("textworld")


@pytest.fixture(scope="session")
def alfworld_data(shared_dir):
    path = shared_dir / "data" / "alfworld"
    if not (path / "json_2.1.1").is_dir():
        raise FileNotFoundError(f"expected the real ALFWorld validation games under {path}/json_2.1.1")
    return path


@pytest.fixture(scope="session")
def gen_cache(tmp_path_factory):
    """Generated games of this test session (never the user's ~/.cache)."""
    return tmp_path_factory.mktemp("alfworld-gen")
