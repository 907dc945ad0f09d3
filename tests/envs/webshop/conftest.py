"""Fixtures for the WebShop tests: the reference fixture folder and a small generated catalogue."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def fixture_dir(shared_dir):
    return shared_dir / "data" / "webshop-fixture"


@pytest.fixture(scope="session")
def specs_dir(shared_dir):
    return shared_dir / "specs"
