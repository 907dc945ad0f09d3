"""The real ALFWorld engine (TextWorld's PDDL env + alfworld's demangler), kept loaded per process.

    from bipace_envs.alfworld.engine import Engine
    eng = Engine(); eng.load("…/game.tw-pddl"); state = eng.reset(); state, _, done = eng.step("look")

Why this wrapper exists: ``textworld.envs.PddlEnv.reset`` re-translates the PDDL problem with Fast
Downward twice (~0.3 s), and ``load`` parses domain and grammar again for every game. ``Engine`` keeps
each loaded game (parsed logic, demangled entity names, the Fast Downward translations) in a small
LRU cache, so switching back to a game or resetting it costs only the state rebuild (~50 ms). Unknown
commands get the engine's "Nothing happens." without re-deriving the unchanged admissible commands.
Game text, admissible commands and dynamics are the engine's own: nothing is re-implemented here.

Fast Downward overwrites ``sys.argv`` on import, so the engine modules are imported lazily through
``import_engine()``, which restores it.

Why the textgen memo: ~85% of a step went into TextWorld's text grammar
(``textworld.envs.pddl.textgen``): ``ContextSensitiveGrammar.derive`` re-parses the same template
(command templates, feedback rules) with tatsu on every call, ~40 times a step, and ``replace`` /
``query`` re-parse the same rule conditions with ``Rule.parse_conjunctive_query``. ``import_engine()``
therefore swaps two names in that module only, once per process: ``_parse_and_convert`` keeps the tatsu
model of each distinct (text, rule) and converts it afresh on every call (the caller mutates the symbols
it gets: contexts, the derivation stack, so each call must get new ones; the model itself is only read),
and ``Rule`` becomes a subclass whose ``parse_conjunctive_query`` keeps each parsed query (the callers
only read it: ``State.all_assignments`` reads its preconditions and placeholders). Texts are the same
as without it (tests/envs/test_alfworld_textgen_memo.py); ``textgen_memo(False)`` turns it off.

Why the command memo: with parses kept, about half of a step (60% of a Monte-Carlo continuation worker's
time) is still the derivation of every admissible command's text (``PddlEnv._gather_infos`` derives each
applicable action's template against a deep copy of its context, ~40 a step). That text is a function of
the game, the template, the action's arguments and the state facts the template reads. A template without
derivation reads the state through conditional queries (``{x | pred(...)}``) and the conditions of the
grammar rules it expands: the nonterminals it names (``#x#``) and those a list (``[...]``) expands into
(``#list_empty#``, ``#list_separator#``, ``#list_last_separator#``), followed through the game's grammar.
Their answers depend only on the facts of the predicates they name (ALFWorld's ``go to`` reads
``receptacleatlocation``); a template with an eval beyond ``{name.attr}`` is taken to read every fact.
``Engine`` keeps each text under (game, template, arguments, the facts it reads), so a replay (Monte-Carlo
continuations replay their prefix from reset, ``agents.replay``) derives nothing and a new state derives
only what it changed. Texts are the same (tests/envs/test_alfworld_textgen_memo.py);
``Engine.command_memo = False`` turns it off for every engine, ``engine.command_memo = False`` for one.
"""
from __future__ import annotations

import contextlib
import functools
import json
import sys
from collections import OrderedDict
from types import SimpleNamespace

_MODULES: SimpleNamespace | None = None
_TEXTGEN: SimpleNamespace | None = None  # textgen's original names and their memoised versions
_MEMO_SIZE = 8192  # distinct strings kept per memo (ALFWorld's grammar needs a few hundred)
_PLAN_MEMO_SIZE = 4096  # Fast Downward answers kept per engine, by (game, state facts)
_COMMAND_MEMO_SIZE = 1 << 16  # command texts an engine keeps (ALFWorld needs a few hundred per game)


def import_engine() -> SimpleNamespace:
    """Import textworld / fast_downward / alfworld lazily (sys.argv saved and restored)."""
    global _MODULES
    if _MODULES is None:
        argv = list(sys.argv)
        try:
            import fast_downward
            import textworld
            from textworld.envs import PddlEnv
            from alfworld.agents.utils.misc import Demangler
        except ImportError as e:  # pragma: no cover - depends on the install
            raise ImportError(
                "ALFWorld needs the engine packages: pip install 'bipace[alfworld]' "
                f"(alfworld==0.4.2, textworld==1.7.0, fast-downward-textworld); import failed: {e}") from e
        finally:
            sys.argv = argv
        _MODULES = SimpleNamespace(textworld=textworld, PddlEnv=PddlEnv, fast_downward=fast_downward,
                                   Demangler=Demangler)
        _install_textgen_memo()
    return _MODULES


def _install_textgen_memo() -> SimpleNamespace:
    """Build the memoised textgen names (once) and switch them on; see the module docstring."""
    global _TEXTGEN
    if _TEXTGEN is None:
        from textworld.envs.pddl import textgen
        parse_orig, rule_orig = textgen._parse_and_convert, textgen.Rule
        parser, converter = textgen._PARSER, textgen._Converter

        @functools.lru_cache(maxsize=_MEMO_SIZE)
        def model(text: str, rule_name: str):
            return parser.parse(text, rule_name=rule_name)

        def parse_and_convert(*args, **kwargs):
            """textgen's ``_parse_and_convert`` with the tatsu parse kept per (text, rule_name)."""
            if (len(args) == 1 and isinstance(args[0], str) and isinstance(kwargs.get("rule_name"), str)
                    and set(kwargs) <= {"rule_name", "trace"} and not kwargs.get("trace")):
                return converter().walk(model(args[0], kwargs["rule_name"]))  # new symbols every call
            return parse_orig(*args, **kwargs)  # TW_CSG_TRACE prints the parse: not cached

        @functools.lru_cache(maxsize=_MEMO_SIZE)
        def query(expr: str):
            return rule_orig.parse_conjunctive_query(expr)

        class Rule(rule_orig):
            """textworld's ``Rule`` as textgen sees it: parsed conjunctive queries are shared."""

            @classmethod
            def parse_conjunctive_query(cls, expr: str):
                return query(expr) if isinstance(expr, str) else rule_orig.parse_conjunctive_query(expr)

        _TEXTGEN = SimpleNamespace(module=textgen, off=(parse_orig, rule_orig), on=(parse_and_convert, Rule),
                                   models=model, queries=query)
        _set_textgen_memo(True)
    return _TEXTGEN


def _set_textgen_memo(enabled: bool) -> bool:
    """Switch the textgen memo on or off; returns whether it was on."""
    tg = _TEXTGEN
    was_on = tg.module._parse_and_convert is tg.on[0]
    tg.module._parse_and_convert, tg.module.Rule = tg.on if enabled else tg.off
    return was_on


@contextlib.contextmanager
def textgen_memo(enabled: bool):
    """Run a block with TextWorld's textgen memo on or off (tests and benchmarks compare the two)."""
    import_engine()
    was_on = _set_textgen_memo(enabled)
    try:
        yield _TEXTGEN
    finally:
        _set_textgen_memo(was_on)


@contextlib.contextmanager
def _memo_pddl2sas(store: dict):
    """Serve Fast Downward translations of the current game from ``store`` (filled on first use).
    Patched only for the duration of a load/reset so other users of fast_downward are untouched."""
    fd = import_engine().fast_downward
    original = fd.pddl2sas

    def cached(domain, problem, verbose=False, optimize=False):
        key = (hash(domain), hash(problem), bool(optimize))  # per-process key; store is per game
        if key not in store:
            store[key] = original(domain, problem, verbose=verbose, optimize=optimize)
        return store[key]

    fd.pddl2sas = cached
    try:
        yield
    finally:
        fd.pddl2sas = original


# the nonterminals a ``[...]`` list derives into (textgen.display_list): an empty list, and between items
LIST_RULES = ("list_empty", "list_separator", "list_last_separator")


def state_reads(template: str, grammar) -> frozenset | None:
    """The predicates whose facts deriving ``template`` with ``grammar`` reads, or None if it may read any
    fact (an eval other than ``{name.attr}`` may run any expression). Kept per grammar: a game's grammar
    never changes once parsed."""
    kept = grammar.__dict__.setdefault("_bipace_state_reads", {})
    if template not in kept:
        kept[template] = _state_reads(template, grammar)
    return kept[template]


def _state_reads(template: str, grammar) -> frozenset | None:
    import re
    import_engine()                         # installs the textgen memo whose module holds the symbols
    tg = _TEXTGEN.module
    preds: set = set()
    followed: set = set()                   # nonterminals whose rules are on the stack already

    def follow(name: str) -> None:
        if name not in followed:
            followed.add(name)
            for rule in grammar._rules.get(name, ()):    # an unknown one fails in derive itself
                if rule.condition:
                    query = tg.Rule.parse_conjunctive_query(rule.condition)
                    preds.update(p.name for p in query.preconditions)
                stack.extend(rule.rhs)

    stack = list(tg._parse_and_convert(template, rule_name="symbols"))
    while stack:
        sym = stack.pop()
        if isinstance(sym, tg.TerminalSymbol):
            continue
        if isinstance(sym, tg.EvalSymbol) and re.fullmatch(r"\s*\w+(\.\w+)*\s*", sym.expression):
            continue
        if isinstance(sym, tg.NonterminalSymbol):
            follow(sym.symbol)
            continue
        if isinstance(sym, tg.ListSymbol):
            stack.append(sym.symbol)
            for name in LIST_RULES:
                follow(name)
            continue
        if isinstance(sym, tg.ConditionalSymbol):
            if sym.given:
                preds |= {p.name for p in tg.Rule.parse_conjunctive_query(sym.given).preconditions}
            stack.append(sym.expression)
            continue
        return None     # an eval that may read anything
    return frozenset(preds)


class CommandTexts:
    """Command texts kept under (game, template, arguments, the facts the template reads): the command
    memo of the module docstring, apart from the engine so that any grammar and state can be checked."""

    def __init__(self, size: int = _COMMAND_MEMO_SIZE):
        self.texts: OrderedDict = OrderedDict()
        self.size = size

    def deriver(self, game: str, grammar, facts):
        """A ``grammar.derive`` stand-in for one state (its ``facts``) of ``game``."""
        read: dict = {}     # predicates read -> the state's facts of those predicates (None: all facts)

        def derive(start, context={}):
            preds = state_reads(start, grammar)
            if preds not in read:
                read[preds] = frozenset(str(f) for f in facts if preds is None or f.name in preds)
            key = (game, start, tuple((ph.name, v.name) for ph, v in context["mapping"].items()), read[preds])
            text = self.texts.get(key)
            if text is None:
                text = self.texts[key] = type(grammar).derive(grammar, start, context)   # not the stand-in
                while len(self.texts) > self.size:
                    self.texts.popitem(last=False)
            return text
        return derive


class Engine:
    """One TextWorld ``PddlEnv`` that can hold several parsed ALFWorld games and switch between them.

    Args:
        cache_size: how many parsed games to keep in memory (each a few MB).
    """

    command_memo: bool = True
    """Keep command texts (module docstring); set False on the class for every engine, or on one engine."""

    def __init__(self, cache_size: int = 32):
        m = import_engine()
        infos = m.textworld.EnvInfos(admissible_commands=True, won=True)
        self._env = m.PddlEnv(infos)
        self._games: OrderedDict[str, tuple] = OrderedDict()
        self._cache_size = max(1, int(cache_size))
        self._sas: dict = {}
        self.gamefile: str | None = None
        self.timed_out = False          # whether the last replan() hit its timeout
        self._plans: OrderedDict = OrderedDict()   # (gamefile, facts) -> (plan, timed out, timeout)
        self._command_texts = CommandTexts()
        self._env._gather_infos = self._gather_infos   # the instance's own: see the module docstring
        self.loads = 0  # how many times a game file was actually parsed (tests check reuse)

    def load(self, gamefile: str) -> None:
        gamefile = str(gamefile)
        env = self._env
        if gamefile in self._games:
            self._games.move_to_end(gamefile)
            data, logic, infos, sas = self._games[gamefile]
            env._game_data, env._logic, env._entity_infos, env._game_file = data, logic, infos, gamefile
            env.walkthrough = data.get("walkthrough")
        else:
            with open(gamefile) as f:
                data = json.load(f)
            sas: dict = {}
            with _memo_pddl2sas(sas):
                env.load(data)
            env._game_file = gamefile
            # Same naming as alfworld's AlfredDemangler (shuffle=False): "Apple_bar_..." -> "apple 1".
            demangler = import_engine().Demangler(game_infos=env._entity_infos, shuffle=False)
            for info in env._entity_infos.values():
                info.name = demangler.demangle_alfred_name(info.id)
            self._games[gamefile] = (data, env._logic, env._entity_infos, sas)
            self.loads += 1
            while len(self._games) > self._cache_size:
                self._games.popitem(last=False)
        self._sas = self._games[gamefile][3]
        self.gamefile = gamefile

    def forget(self, gamefile: str) -> None:
        """Drop a cached game (its file changed or moved)."""
        self._games.pop(str(gamefile), None)
        if self.gamefile == str(gamefile):
            self.gamefile = None

    def reset(self):
        if self.gamefile is None:
            raise RuntimeError("Engine.reset() before load(gamefile)")
        with _memo_pddl2sas(self._sas):
            return self._env.reset()

    def step(self, command: str):
        env = self._env
        command = command.strip()
        if command in env.state["_valid_commands"]:
            return env.step(command)
        # The engine answers an unknown command with "Nothing happens." and an unchanged state, but
        # only after re-deriving every admissible command (~30-80 ms). Same answer, without that work:
        state = env.state.__class__(env.state)
        state.update(feedback="Nothing happens.", raw="Nothing happens.", last_command=command,
                     _last_action=None, score=int(bool(state["won"])), done=bool(state["won"]))
        env.prev_state, env.state, env._last_action = env.state, state, None
        return state, state["score"], state["done"]

    def _facts_key(self) -> tuple:
        return self.gamefile, frozenset(map(str, self._env._pddl_state.facts))

    @property
    def _commands(self) -> OrderedDict:
        """The kept command texts (tests read them)."""
        return self._command_texts.texts

    def _gather_infos(self) -> None:
        """TextWorld's ``_gather_infos`` with each command text kept (module docstring)."""
        env = self._env
        gather = type(env)._gather_infos
        if not self.command_memo:
            return gather(env)
        grammar = env._logic.grammar
        # _gather_infos derives command templates only, so the instance's derive stands in for the call
        grammar.derive = self._command_texts.deriver(self.gamefile, grammar, env._pddl_state.facts)
        try:
            gather(env)
        finally:
            del grammar.derive

    def human_facts(self, state) -> list:
        """Facts with demangled names, as alfworld's handcoded expert reads them."""
        return [self._env._get_human_readable_fact(f) for f in state["_facts"]]

    def replan(self, timeout_s: float | None = None) -> list[str]:
        """Fast Downward plan (commands) from the current state to the goal; [] if none found.

        Fast Downward is a C library called in-process, so a signal cannot stop it; with ``timeout_s``
        it runs in a forked child (which inherits the game state) and is killed after that many
        seconds, and the answer is then [] as for an unsolvable state. ``timed_out`` says which."""
        self.timed_out = False
        if timeout_s is not None and timeout_s <= 0:
            raise ValueError(f"planner timeout must be > 0 seconds (or None for no limit), got {timeout_s}")
        # Fast Downward is deterministic given the game and the state's facts, and a replay re-plans the
        # same states again and again (one search took seconds): keep each state's answer. A timeout is
        # kept with its limit and reused only under a limit no longer than it.
        key = self._facts_key()
        known = self._plans.get(key)
        if known is not None and (not known[1] or (timeout_s is not None and timeout_s <= known[2])):
            self._plans.move_to_end(key)
            self.timed_out = known[1]
            return list(known[0])
        plan = self._replan(timeout_s)
        self._plans[key] = (tuple(plan), self.timed_out, timeout_s)
        while len(self._plans) > _PLAN_MEMO_SIZE:
            self._plans.popitem(last=False)
        return plan

    def _replan(self, timeout_s: float | None) -> list[str]:
        if timeout_s is None:
            return list(self._env._pddl_state.replan(self._env._entity_infos) or [])
        import multiprocessing as mp
        try:
            ctx = mp.get_context("fork")
        except ValueError as e:
            raise RuntimeError("a planner timeout needs os.fork (Linux/macOS); "
                               "use planner_timeout=None") from e
        receiver, sender = ctx.Pipe(duplex=False)

        def child():
            try:
                sender.send(list(self._env._pddl_state.replan(self._env._entity_infos) or []))
            finally:
                sender.close()
        proc = ctx.Process(target=child, daemon=True)
        proc.start()
        sender.close()
        try:
            if receiver.poll(timeout_s):
                return receiver.recv()
            self.timed_out = proc.is_alive()
            return []
        except EOFError:        # the child died without an answer (a crash in the planner)
            return []
        finally:
            receiver.close()
            if proc.is_alive():
                proc.kill()
            proc.join()
