"""Action parsing: LLM response text -> (action sent to the env, format validity), as verl-agent projects.

    from agents.parsing import parse_action
    parse_action("<think>need logs</think><action>get 1 oak log</action>")   # ('get 1 oak log', True)

Rules (spec §7, ``alfworld_projection`` / ``webshop_projection``): lower-case the text, take the body
between the first ``<action>`` and the first ``</action>``, stripped. Without both tags the action is
the last ``fallback_chars`` characters of the lower-cased text and invalid (it is still sent to the
env, which answers with its no-op message). Also invalid: ``<think>`` or ``</think>`` missing (checked
case-sensitively on the original text; switch off with ``require_think=False`` for tiny models that
answer with the action only) or any CJK character. Reversed tags give ``''`` and stay valid, as
upstream. Admissibility is never checked here: that is the env's ``action_valid``.
"""
from __future__ import annotations

import re

_CJK = re.compile(r"[\u4e00-\u9fff]")


def parse_action(text: str, require_think: bool = True, fallback_chars: int = 30) -> tuple[str, bool]:
    if not isinstance(text, str):
        raise TypeError(f"parse_action expects the response text (str), got {type(text).__name__}")
    low = text.lower()
    start, end = low.find("<action>"), low.find("</action>")
    if start == -1 or end == -1:
        return low[-fallback_chars:], False
    action = low[start + len("<action>"):end].strip()
    valid = True
    if require_think and (text.find("<think>") == -1 or text.find("</think>") == -1):
        valid = False
    if _CJK.search(text):
        valid = False
    return action, valid


def parse_actions(texts, require_think: bool = True,
                  fallback_chars: int = 30) -> tuple[list[str], list[bool]]:
    """Vector version: lists of actions and validity flags."""
    out = [parse_action(t, require_think, fallback_chars) for t in texts]
    return [a for a, _ in out], [v for _, v in out]
