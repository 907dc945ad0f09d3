"""PACE action keys (spec §6.3, §10.5) and the token broadcast (§2.8, §10.11)."""
import numpy as np
import pytest

from estimators import EMPTY_KEY, INVALID_KEY, action_key, broadcast_to_tokens


@pytest.mark.parametrize("text,key", [
    ("<think>x</think><action>Go To Desk 1</action>", "go to desk 1"),
    ("<ACTION>  take   apple\n from table </Action>", "take apple from table"),
    ("<action>first</action><action>second</action>", "first"),
    ("no tags at all", INVALID_KEY),
    ("<action>open door", INVALID_KEY),
    ("</action>reversed<action>", INVALID_KEY),
    ("<action>   </action>", EMPTY_KEY),
    ("<action>inventory</action>", "inventory"),
])
def test_action_tag_keys(text, key):
    assert action_key(response_text=text, kind="action_tag") == key


def test_sentinels_cannot_collide_with_bodies():
    assert action_key(response_text="<action><INVALID></action>") != INVALID_KEY
    assert action_key(response_text="<action><empty></action>") != EMPTY_KEY


def test_first_token_keys():
    assert action_key(response_ids=list(range(20)), kind="first_token") == tuple(range(8))
    assert action_key(response_ids=[5, 6, 7], kind="first_token") == (5, 6, 7)
    assert action_key(response_ids=[], kind="first_token") == ()
    assert action_key(response_ids=np.array([1, 2]), kind="first_token") == (1, 2)


def test_projected_key_and_errors():
    assert action_key(projected_action="  Get 1  Oak Log ", kind="projected") == "get 1 oak log"
    with pytest.raises(ValueError, match="unknown action key kind"):
        action_key(response_text="x", kind="tokens")
    with pytest.raises(ValueError, match="needs response_ids"):
        action_key(response_text="x", kind="first_token")


def test_broadcast_to_tokens():
    adv = np.array([2.0, -1.0, 3.0])
    mask = np.array([[1, 1, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]])
    tok = broadcast_to_tokens(adv, mask)
    np.testing.assert_array_equal(tok, [[2, 2, 0, 0], [-1, -1, -1, -1], [0, 0, 0, 0]])
    with pytest.raises(ValueError, match=r"advantages \(N,\) and response_mask \(N, L\)"):
        broadcast_to_tokens(adv, mask[:2])
