"""The launch checks ``agents.verl_bridge.main`` runs before Ray starts: ours, then verl's own.

    from agents.verl_bridge.validation import validate_launch
    validate_launch(cfg, "examples/verl/alfworld_qwen1.5b.yaml", ["trainer.n_gpus_per_node=8"])

``validate_launch`` is what ``main`` runs: ``check_config`` (what the bridge needs: verl's V1 trainer
in ``sync`` mode, the agent-loop yaml, no verl feature our advantage step does not do), then verl
0.9.1's ``validate_config`` with the same arguments as verl's ``main_ppo``. When verl refuses, the
error (``ConfigRejected``) carries verl's message and the lines of the config file, and the
command-line overrides, that set the keys verl's message names, so the user sees which line to change.
"""
from __future__ import annotations

import os
import re

import yaml

from estimators import REGISTRY

AGENT_LOOP_YAML = os.path.join(os.path.dirname(__file__), "config", "agent_loop.yaml")


class ConfigRejected(ValueError):
    """A launch config verl (or the bridge) would refuse; the message names the lines that set it."""


def check_config(config) -> None:
    """The settings the bridge depends on, each refused with what to set instead."""
    from agents.verl_bridge.trainer import check_algorithm
    if not config.trainer.get("use_v1", True):
        raise ValueError("the bipace bridge needs verl's V1 trainer (trainer.use_v1=true): the legacy "
                         "trainer keeps one sample per agent-loop run, ours returns one per step")
    mode = config.trainer.v1.trainer_mode
    if mode != "sync":
        raise ValueError(f"trainer.v1.trainer_mode={mode!r}: the bipace bridge trains with verl's sync "
                         "trainer (its advantage step replaced), so set trainer.v1.trainer_mode=sync; verl "
                         "treats every other mode name as asynchronous training")
    if config.algorithm.adv_estimator in REGISTRY:
        check_algorithm(config.algorithm)     # now, not after the first rollout
    path = config.actor_rollout_ref.rollout.agent.get("agent_loop_config_path")
    if config.actor_rollout_ref.rollout.agent.get("default_agent_loop") == "bipace_env" and not path:
        raise ValueError("the bipace_env agent loop needs actor_rollout_ref.rollout.agent."
                         f"agent_loop_config_path={AGENT_LOOP_YAML} so verl's rollout workers can build it")


def yaml_key_lines(path: str) -> dict[str, tuple[int, str]]:
    """Dotted key -> (1-based line, its text without comment) of every mapping key in a yaml file."""
    with open(path) as f:
        text = f.read()
    lines = text.splitlines()
    out: dict[str, tuple[int, str]] = {}

    def walk(node, prefix):
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                dotted = f"{prefix}{key.value}"
                text = lines[key.start_mark.line].split(" #")[0].strip()      # without its comment
                out[dotted] = (key.start_mark.line + 1, text)
                walk(value, dotted + ".")
    for doc in yaml.compose_all(text):
        walk(doc, "")
    return out


def _named_in(message: str, dotted: str) -> bool:
    """Does verl's message name this key (its last part, or a longer dotted tail of it)?"""
    parts = dotted.split(".")
    for i in range(len(parts)):
        tail = ".".join(parts[i:])
        if i == len(parts) - 1 and len(tail) < 3:     # bare 'n', 'lr': too short to find by name
            return False
        if re.search(rf"(?<![\w.]){re.escape(tail)}(?!\w)", message):
            return True
    return False


def culprit_lines(message: str, config_file: str | None, overrides=()) -> list[str]:
    """'file:line: text' of each key of the config file, and each override, that verl's message names."""
    found = []
    if config_file and os.path.isfile(config_file):
        for dotted, (line, text) in yaml_key_lines(config_file).items():
            if _named_in(message, dotted):
                found.append(f"{config_file}:{line}: {text}    ({dotted})")
    for override in overrides:
        key = override.split("=", 1)[0].lstrip("+~")
        if _named_in(message, key):
            found.append(f"command line: {override}")
    return found


def validate_launch(config, config_file: str | None = None, overrides=()) -> None:
    """Our checks, then verl's ``validate_config`` exactly as verl's ``main_ppo`` calls it; raises
    ``ConfigRejected`` with verl's message and the lines that cause it."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config
    try:
        check_config(config)
        validate_config(config=config, use_reference_policy=need_reference_policy(config),
                        use_critic=need_critic(config))
    except (AssertionError, ValueError) as exc:
        message = str(exc)
        lines = culprit_lines(message, config_file, overrides)
        where = ("\n".join(f"  {ln}" for ln in lines) if lines else
                 f"  (no line of {config_file or 'the config'} or of the overrides names these keys: "
                 "verl's defaults apply; set them in the config)")
        raise ConfigRejected(f"{message}\nset by:\n{where}") from exc
