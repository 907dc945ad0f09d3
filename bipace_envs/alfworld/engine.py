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
"""
from __future__ import annotations

import contextlib
import json
import sys
from collections import OrderedDict
from types import SimpleNamespace

_MODULES: SimpleNamespace | None = None


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
    return _MODULES


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


class Engine:
    """One TextWorld ``PddlEnv`` that can hold several parsed ALFWorld games and switch between them.

    Args:
        cache_size: how many parsed games to keep in memory (each a few MB).
    """

    def __init__(self, cache_size: int = 32):
        m = import_engine()
        infos = m.textworld.EnvInfos(admissible_commands=True, won=True)
        self._env = m.PddlEnv(infos)
        self._games: OrderedDict[str, tuple] = OrderedDict()
        self._cache_size = max(1, int(cache_size))
        self._sas: dict = {}
        self.gamefile: str | None = None
        self.timed_out = False          # whether the last replan() hit its timeout
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

    def human_facts(self, state) -> list:
        """Facts with demangled names, as alfworld's handcoded expert reads them."""
        return [self._env._get_human_readable_fact(f) for f in state["_facts"]]

    def replan(self, timeout_s: float | None = None) -> list[str]:
        """Fast Downward plan (commands) from the current state to the goal; [] if none found.

        Fast Downward is a C library called in-process, so a signal cannot stop it; with ``timeout_s``
        it runs in a forked child (which inherits the game state) and is killed after that many
        seconds, and the answer is then [] as for an unsolvable state. ``timed_out`` says which."""
        self.timed_out = False
        if timeout_s is None:
            return list(self._env._pddl_state.replan(self._env._entity_infos) or [])
        if timeout_s <= 0:
            raise ValueError(f"planner timeout must be > 0 seconds (or None for no limit), got {timeout_s}")
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
