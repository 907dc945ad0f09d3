"""Helpers shared by every bipace environment: observation hashing, the text spaces and the rules all
three envs apply alike (actions of one line, a positive ``max_steps``, no step after the episode ended)."""
from __future__ import annotations

import hashlib

import numpy as np
from gymnasium import spaces

# Long enough for any page we render; gymnasium's Text space needs a bound, and check_env samples from it.
MAX_TEXT_LENGTH = 200_000
# Listed commands are far shorter (TextCraft's longest is 93 characters, a craft of five ingredients):
# an answer longer than this is not one command, and every env answers it as an invalid action.
MAX_ACTION_LENGTH = 1_000


class UnicodeText(spaces.Text):
    """A Text space that accepts any str up to ``max_length`` (gymnasium's default charset is
    alphanumeric, which would reject real observations such as 'Got 1 oak log.')."""

    def __init__(self, max_length: int = MAX_TEXT_LENGTH, seed=None):
        super().__init__(max_length=max_length, min_length=0, seed=seed)

    def contains(self, x) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length


class CommandText(UnicodeText):
    """The action space of every bipace env: one command, a str of at most ``MAX_ACTION_LENGTH``
    characters without a line break inside (see ``is_one_command``). The envs take any str and answer
    the others as invalid actions."""

    def __init__(self, seed=None):
        super().__init__(max_length=MAX_ACTION_LENGTH, seed=seed)

    def contains(self, x) -> bool:
        return isinstance(x, str) and is_one_command(x)


def is_one_command(action: str) -> bool:
    """Whether ``action`` can be a command: at most ``MAX_ACTION_LENGTH`` characters and one line once
    leading and trailing whitespace is set aside: ``"look\\n"`` is one line, ``"look\\ninventory"``
    two, and invalid as a whole (its first line is not executed). A line break is anything
    ``str.splitlines`` splits on (``\\n``, ``\\r``, ``\\u2028``, ...)."""
    return len(action) <= MAX_ACTION_LENGTH and len(action.strip().splitlines()) <= 1


class EpisodeEndedError(RuntimeError):
    """``step()`` after the episode ended (terminated or truncated): raised by every bipace env, which
    neither plays on nor answers with a no-op (vector envs autoreset before stepping again)."""


def episode_ended(env_name: str) -> EpisodeEndedError:
    return EpisodeEndedError(f"{env_name}.step() called after the episode ended (terminated or truncated); "
                             "call reset() to start the next episode")


def positive_int(name: str, value) -> int:
    """``value`` as an int when it is an int (numpy's included, bool not) >= 1; else a TypeError or
    ValueError naming the argument, the value and what it must be."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be a positive int, got {value!r} ({type(value).__name__})")
    if value < 1:
        raise ValueError(f"{name} must be a positive int (>= 1), got {value!r}")
    return int(value)


def obs_hash(text: str) -> str:
    """Stable (PYTHONHASHSEED-independent) hash of an anchor observation."""
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


# AsyncVectorEnv(shared_memory=True), gymnasium's default, reads the shared buffer once at
# construction and expects live numpy views; text observations cannot be views (gymnasium's own
# Text space silently returns stale strings there). Fail at construction with the fix instead.
from gymnasium.vector.utils import shared_memory as _shm  # noqa: E402


@_shm.create_shared_memory.register(UnicodeText)
def _no_shared_memory_for_text(space: UnicodeText, n: int = 1, ctx=None):
    raise TypeError("bipace text environments cannot use shared memory: create the vector env with "
                    "gymnasium.vector.AsyncVectorEnv(env_fns, shared_memory=False)")
