"""The textgen and command memos of ``bipace_envs.alfworld.engine`` change no text: episodes played with
them and without them (fresh envs, the same actions) give the same observations, commands, rewards and
wins, and a replay of a kept state derives no command again."""
from __future__ import annotations

import random

import gymnasium as gym
import pytest

pytest.importorskip("alfworld")
pytest.importorskip("textworld")

import bipace_envs  # noqa: E402,F401  (registers bipace/ALFWorld-v0)
from bipace_envs.alfworld import engine  # noqa: E402


@pytest.fixture(scope="module")
def gen_cache(tmp_path_factory):
    """Generated games of this module (never the user's ~/.cache)."""
    return tmp_path_factory.mktemp("alfworld-gen-memo")


def make_env(cache):
    return gym.make("bipace/ALFWorld-v0", split="train", games_per_task=2, max_steps=15, cache_dir=str(cache))


def play(env, task_id, seed, actions=None):
    """One episode: expert actions mixed with random admissible ones (seeded), or ``actions`` replayed.
    Returns the per-step record and the actions taken."""
    rng = random.Random(seed)
    obs, info = env.reset(seed=seed, options={"task_id": task_id, "expert": True})
    record = [(obs, info["admissible_actions"], 0.0, info["won"], info["expert_action"])]
    taken, done = [], False
    while not done:
        if actions is not None:
            action = actions[len(taken)]
        elif rng.random() < 0.6 and info["expert_action"] is not None:
            action = info["expert_action"]
        else:
            action = rng.choice(info["admissible_actions"])
        taken.append(action)
        obs, reward, term, trunc, info = env.step(action)
        record.append((obs, info["admissible_actions"], reward, info["won"], info["expert_action"]))
        done = term or trunc
    return record, taken


def test_memo_is_installed_once_and_can_be_switched_off():
    m = engine.import_engine()
    assert engine.import_engine() is m
    tg = engine._TEXTGEN
    assert engine._install_textgen_memo() is tg  # idempotent: no wrapper around the wrapper
    parse_orig, rule_orig = tg.off
    assert tg.module._parse_and_convert is tg.on[0] and tg.module.Rule is tg.on[1]
    assert issubclass(tg.module.Rule, rule_orig)
    with engine.textgen_memo(False):
        assert tg.module._parse_and_convert is parse_orig and tg.module.Rule is rule_orig
        with engine.textgen_memo(True):
            assert tg.module._parse_and_convert is tg.on[0]
        assert tg.module._parse_and_convert is parse_orig
    assert tg.module._parse_and_convert is tg.on[0] and tg.module.Rule is tg.on[1]


def symbols(items):
    """Every symbol object of a parsed list, nested ones (conditional, list) included."""
    for s in items:
        yield s
        inner = getattr(s, "expression", None) if type(s).__name__ == "ConditionalSymbol" else (
            s.symbol if type(s).__name__ == "ListSymbol" else None)
        if inner is not None:
            yield from symbols([inner])


def test_memo_hands_out_fresh_symbols_and_shares_queries():
    engine.import_engine()
    tg = engine._TEXTGEN
    text = "You put the {o.name} in the {r.name}.#x# [{#y#|inreceptacle(o:object, r:receptacle)}]"
    a = tg.module._parse_and_convert(text, rule_name="symbols")
    b = tg.module._parse_and_convert(text, rule_name="symbols")
    assert repr(a) == repr(tg.off[0](text, rule_name="symbols")) == repr(b)
    assert a is not b and not {id(s) for s in symbols(a)} & {id(s) for s in symbols(b)}
    assert len(list(symbols(a))) == 12  # 8 at the top, 4 nested
    q = "inreceptacle(o:object, r:receptacle) & openable(r:receptacle)"
    assert tg.module.Rule.parse_conjunctive_query(q) is tg.module.Rule.parse_conjunctive_query(q)
    assert tg.module.Rule.parse_conjunctive_query(q) == tg.off[1].parse_conjunctive_query(q)


def test_episodes_identical_with_and_without_memo(gen_cache):
    task_ids = make_env(gen_cache).unwrapped.task_ids
    # One game of each of the six task types, both indices used.
    episodes = [(tid, 100 + i) for i, tid in enumerate(task_ids) if int(tid[-1]) == (i // 2) % 2]
    assert len(episodes) == 6
    with engine.textgen_memo(False):
        env_off = make_env(gen_cache)
        env_off.unwrapped._get_engine().command_memo = False
        off = [play(env_off, tid, seed) for tid, seed in episodes]
        assert not env_off.unwrapped._engine._commands
    hits = engine._TEXTGEN.models.cache_info().hits
    with engine.textgen_memo(True):
        env_on = make_env(gen_cache)  # a fresh engine: the games are loaded and parsed again
        on = [play(env_on, tid, seed, actions)[0] for (tid, seed), (_, actions) in zip(episodes, off)]
    assert engine._TEXTGEN.models.cache_info().hits > hits  # the memo did serve these episodes
    n_steps = 0
    for (tid, _), (rec_off, actions), rec_on in zip(episodes, off, on):
        assert len(rec_on) == len(rec_off) == len(actions) + 1, tid
        for step, (a, b) in enumerate(zip(rec_off, rec_on)):
            assert a == b, (tid, step)
            n_steps += 1
    assert n_steps > 40
    assert any(rec[-1][3] for rec, _ in off)  # some episode was won on the way


def test_command_memo_replays_derive_no_command(gen_cache, monkeypatch):
    from textworld.envs.pddl.textgen import ContextSensitiveGrammar
    env = make_env(gen_cache)
    eng = env.unwrapped._get_engine()
    tid = env.unwrapped.task_ids[0]
    eng.command_memo = False
    reference, actions = play(env, tid, 7)
    eng.command_memo = True
    derived = []
    real = ContextSensitiveGrammar.derive

    def counting(self, start, context={}):
        derived.append(start)
        return real(self, start, context)
    monkeypatch.setattr(ContextSensitiveGrammar, "derive", counting)
    first = play(env, tid, 7, actions)[0]
    commands = [s for s in derived if not s.startswith("#")]      # feedback rules start with '#'
    kept = dict(eng._commands)
    assert first == reference and len(commands) == len(kept) > 10  # each text derived once, then kept
    # ALFWorld's command templates read at most receptacleatlocation, a fact no action changes: one text
    # per (template, arguments) of the game, whatever the state, and far fewer derivations than commands
    assert len({k[1:3] for k in kept}) == len(kept)
    assert len(commands) < 0.75 * sum(len(r[1]) for r in reference)
    derived.clear()
    again = play(env, tid, 7, actions)[0]
    assert again == reference
    assert [s for s in derived if not s.startswith("#")] == []     # every command text was kept
    assert dict(eng._commands) == kept


def small_grammar(rules: dict):
    import json

    from textworld.envs.pddl.textgen import ContextSensitiveGrammar
    engine.import_engine()
    return ContextSensitiveGrammar.parse(json.dumps(rules))


# a list's hidden separators and a named nonterminal, each conditioned on a fact of its own
GRAMMAR = {"list_separator": [{"rhs": " plus ", "condition": "lit(r:r)"}, {"rhs": ", "}],
           "list_last_separator": [{"rhs": " and "}],
           "list_empty": [{"rhs": "nothing", "condition": "open(r:r)"}, {"rhs": "no idea"}],
           "opened": [{"rhs": "#state#", "condition": "open(r:r)"}, {"rhs": "closed"}],
           "state": [{"rhs": "open", "condition": "wide(r:r)"}, {"rhs": "ajar"}],
           "loop": [{"rhs": "#loop#", "condition": "lit(r:r)"}]}


@pytest.mark.parametrize("template, reads", [
    ("go to [{r.name | receptacleatlocation(r:receptacle, lend:location)}]",
     {"receptacleatlocation", "lit", "open"}),
    ("take {o} from {r}", set()),
    ("look", set()),
    ("{o.name} [{x.name | in(x:object, r:receptacle) & openable(r:receptacle)}]",
     {"in", "openable", "lit", "open"}),
    ("#opened# {r}", {"open", "wide"}),     # a nonterminal's rules, followed through the grammar
    ("#loop#", {"lit"}),                     # a rule that names itself is followed once
    ("{o.name + r.name}", None),            # an eval may run anything
])
def test_command_memo_keys_on_the_facts_a_template_reads(template, reads):
    got = engine.state_reads(template, small_grammar(GRAMMAR))
    assert (got if got is None else set(got)) == reads


def test_command_memo_follows_list_rules_whose_text_changes_during_the_episode():
    """A list's separator that depends on a fact: the kept text changes when the fact does, as the
    grammar's own derivation does (a memo that missed the list's rules kept the first state's text)."""
    from types import SimpleNamespace

    from textworld.logic import GameLogic, Placeholder, Proposition, State, Variable
    logic = GameLogic.parse("type o { predicates { in(o, r); lit(r); open(r); wide(r); } }\ntype r { }")
    grammar = small_grammar(GRAMMAR)
    box, fruit = Variable("box", "r"), [Variable(n, "o") for n in ("apple", "kiwi", "pear")]
    infos = {v.name: SimpleNamespace(name=v.name) for v in [box, *fruit]}
    template = "in {r.name}: [{x.name | in(x:o, r:r)}]"
    memo = engine.CommandTexts()
    texts = []
    for extra in ([], [Proposition("lit", [box])], [], [Proposition("lit", [box])]):   # lit, then not, ...
        facts = [Proposition("in", [f, box]) for f in fruit] + extra
        context = {"state": State(logic, facts), "facts": facts, "variables": {"r": infos["box"]},
                   "mapping": {Placeholder("r", "r"): box}, "entity_infos": infos}
        kept = memo.deriver("game", grammar, facts)(template, context)
        assert kept == grammar.derive(template, context)
        texts.append(kept)
    assert texts[0] != texts[1] and texts[0] == texts[2] and texts[1] == texts[3]
    assert len(memo.texts) == 2         # one text per (template, arguments, facts read): replays derive none


def test_command_memo_switch_on_the_class_turns_off_every_engine(gen_cache, monkeypatch):
    monkeypatch.setattr(engine.Engine, "command_memo", False)
    env = make_env(gen_cache)
    play(env, env.unwrapped.task_ids[0], 3)
    assert not env.unwrapped._get_engine()._commands
    monkeypatch.undo()
    env = make_env(gen_cache)
    play(env, env.unwrapped.task_ids[0], 3)
    assert env.unwrapped._get_engine()._commands
