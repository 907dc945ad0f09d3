"""Helpers shared by every bipace environment: observation hashing and the text spaces."""
from __future__ import annotations

import hashlib

from gymnasium import spaces

# Long enough for any page we render and any action an LLM writes; gymnasium's Text space
# needs a bound, and check_env samples from it.
MAX_TEXT_LENGTH = 200_000


class UnicodeText(spaces.Text):
    """A Text space that accepts any str up to ``max_length`` (gymnasium's default charset is
    alphanumeric, which would reject real observations such as 'Got 1 oak log.')."""

    def __init__(self, max_length: int = MAX_TEXT_LENGTH, seed=None):
        super().__init__(max_length=max_length, min_length=0, seed=seed)

    def contains(self, x) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length


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
