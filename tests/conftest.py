"""Shared fixtures: the read-only ``../shared`` folder beside the checkout (specs, real data)."""
from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DIR = Path(os.environ.get("BIPACE_SHARED", REPO_ROOT.parent / "shared"))


@contextmanager
def isolated_bipace_cache(path: Path):
    """BIPACE_CACHE pointed at ``path`` (a model cache of the tests' own: the tiny model is built into
    it), restored afterwards."""
    old = os.environ.get("BIPACE_CACHE")
    os.environ["BIPACE_CACHE"] = str(path)
    try:
        yield path
    finally:
        if old is None:
            os.environ.pop("BIPACE_CACHE", None)
        else:
            os.environ["BIPACE_CACHE"] = old


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not (SHARED_DIR / "specs").is_dir():
        raise FileNotFoundError(
            f"expected the project's shared folder at {SHARED_DIR} (specs/, data/); "
            "set BIPACE_SHARED to its path")
    return SHARED_DIR


@pytest.fixture(scope="session")
def ray_local():
    """A small private Ray instance for the Ray vector-env tests (CI has no cluster); shut down at the end."""
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        ray.shutdown()
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session", autouse=True)
def _no_runs_folder_in_checkout():
    """Tests write under tmp_path; a ``runs/`` left in the checkout means one used a default path."""
    runs = REPO_ROOT / "runs"
    existed = runs.exists()
    yield
    if not existed and runs.exists():
        raise AssertionError(f"the tests created {runs}; give every run an out dir under tmp_path")
