"""Deterministic generator of ALFWorld games for the six task types, checked solvable on the real engine.

    python -m bipace_envs.alfworld.generator --split train --per-task 100 [--cache-dir DIR] [--workers 2]

A game is ``(split, task_type, index)``; everything about it is drawn from ``random.Random(f"{VERSION}/
{split}/{task_type}/{index}")`` (string seeds hash with SHA-512, so no PYTHONHASHSEED or dict-order
dependence). Built only from what ships in ``alfworld``:
  - the room: one of the 120 ALFRED floor plans (``alfworld/gen/layouts``: object types present and
    receptacle instances), kitchens / living rooms / bedrooms / bathrooms as ``constants.GOALS_VALID``
    allows for the task; split ``train`` uses ALFRED's train scenes, ``test`` its held-out scenes;
  - which receptacle can hold what (``VAL_RECEPTACLE_OBJECTS``), openable receptacles, heat/cool/clean
    affordances (``VAL_ACTION_OBJECTS``), goal PDDL and sentence templates (``goal_library``), PDDL
    domain and grammar (``alfworld/data``).
Object placements are random but respect ``VAL_RECEPTACLE_OBJECTS``; no target object starts in a target
receptacle. Texts, command grammar and dynamics come from the engine. Every game is played by
alfworld's handcoded expert (seed 0, at most 25 steps) before it is written; a draw it cannot win is
given to Fast Downward (the env's fallback expert) for at most ``planner_timeout`` seconds (default
``PLANNER_TIMEOUT``), and only a draw neither wins is redrawn. Accepting planner-solved draws keeps
pick_two games from being biased towards what the handcoded expert solves (it loses about a third
of ALFWorld's real pick_two games). ``traj_data.json`` records the solver (``scene.expert``). The
timeout is wall time: on a far slower machine a draw that the planner solves just under the limit
here could be redrawn there; ``planner_timeout=None`` gives the handcoded-only games.
Measured on 600 train games (``--per-task 100``, loaded 2-core machine, 3.2 s a game): the planner
solved 114 that the handcoded expert lost (pick_two 27, cool 25, heat 20, look_at 18, clean 17,
pick_and_place 7) and 11 draws were redrawn, so every task type, not only pick_two, was biased.
Files land in ``<cache>/<VERSION>/<split>/<task_type>/<index:05d>/`` (``initial_state.pddl``,
``game.tw-pddl``, ``traj_data.json``), written to a temp folder and renamed, so parallel workers are safe.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import time
from functools import lru_cache
from pathlib import Path

VERSION = "gen3"         # cache folder: gen3 also keeps planner-solved draws
DRAW_VERSION = "gen2"    # seeds each game's draws (unchanged, so handcoded-won games stay the same)
PLANNER_TIMEOUT = 30.0   # seconds Fast Downward may take on a draw the handcoded expert loses
GEN_SPLITS = ("train", "test")
DEFAULT_CACHE = Path("~/.cache/bipace/alfworld")
LAMP_HOSTS = ("Desk", "SideTable", "Dresser", "Shelf", "CoffeeTable", "DiningTable", "TVStand")
TOOL = {"pick_clean_then_place_in_recep": "SinkBasin", "pick_heat_then_place_in_recep": "Microwave",
        "pick_cool_then_place_in_recep": "Fridge"}
NEEDS = {"pick_clean_then_place_in_recep": "Cleanable", "pick_heat_then_place_in_recep": "Heatable",
         "pick_cool_then_place_in_recep": "Coolable"}
MAX_ATTEMPTS = 50


def cache_root(cache_dir=None) -> Path:
    """Generated-game cache: ``cache_dir`` > $BIPACE_ALFWORLD_CACHE > ~/.cache/bipace/alfworld."""
    d = cache_dir or os.environ.get("BIPACE_ALFWORLD_CACHE") or DEFAULT_CACHE
    return Path(os.path.expanduser(str(d)))


def game_dir(cache_dir, split: str, task_type: str, index: int) -> Path:
    return cache_root(cache_dir) / VERSION / split / task_type / f"{index:05d}"


@lru_cache(maxsize=1)
def _catalog():
    """Room catalogue from alfworld's floor-plan files (read once)."""
    import alfworld.gen as gen
    import alfworld.gen.constants as C
    layouts = Path(gen.__file__).parent / "layouts"
    static = sorted(set(C.RECEPTACLES) - set(C.MOVABLE_RECEPTACLES))
    holdable = sorted({o for objs in C.VAL_RECEPTACLE_OBJECTS.values() for o in objs if "Sliced" not in o})
    rooms = {}
    for room_type, numbers in C.SCENE_TYPE.items():
        for n in numbers:
            objs_file = layouts / f"FloorPlan{n}-objects.json"
            if not objs_file.is_file():
                continue
            present = set(json.loads(objs_file.read_text()))
            counts: dict[str, int] = {}
            openable_file = layouts / f"FloorPlan{n}-openable.json"
            for key in (json.loads(openable_file.read_text()) if openable_file.is_file() else {}):
                name = key.split("|")[0]
                name = {"Sink": "SinkBasin", "Bathtub": "BathtubBasin"}.get(name, name)
                counts[name] = counts.get(name, 0) + 1
            receps = {r: counts.get(r, 1) for r in static if r in present}
            rooms[n] = dict(room_type=room_type, receptacles=receps,
                            objects=[o for o in holdable if o in present],
                            lamps=[o for o in ("DeskLamp", "FloorLamp") if o in present])
    return C, rooms


def _coord(rng: random.Random) -> str:
    def m(v: float) -> str:
        return f"{v:+06.2f}".replace("+", "_plus_").replace("-", "_minus_").replace(".", "_dot_")
    return "_bar_".join(m(round(rng.uniform(-3, 3), 2)) for _ in range(3))


def _choose_task(C, room, task_type, rng):
    """(object, parent, lamp, lamp_hosts) for this room, or None if the room cannot host the task."""
    receps = room["receptacles"]
    if task_type == "look_at_obj_in_light":
        hosts = [r for r in LAMP_HOSTS if r in receps]
        objs = [o for o in room["objects"] if any(o in C.VAL_RECEPTACLE_OBJECTS[r] for r in receps)]
        if not hosts or not objs:
            return None
        lamp = rng.choice(room["lamps"]) if room["lamps"] else "DeskLamp"
        return rng.choice(objs), "", lamp, hosts
    tool = TOOL.get(task_type)
    if tool and tool not in receps:
        return None
    pairs = []
    for o in room["objects"]:
        if task_type in NEEDS and o not in C.VAL_ACTION_OBJECTS[NEEDS[task_type]]:
            continue
        homes = [r for r in receps if o in C.VAL_RECEPTACLE_OBJECTS[r]]
        pairs += [(o, r) for r in homes if r != tool and len(homes) > 1]
    if not pairs:
        return None
    o, r = rng.choice(pairs)
    return o, r, "", []


def sample_problem(split: str, task_type: str, rng: random.Random):
    """Draw one scene + task. Returns (pddl_problem, traj_data, task sentence)."""
    import alfworld.gen.goal_library as glib
    C, rooms = _catalog()
    scene_numbers = set(C.TRAIN_SCENE_NUMBERS if split == "train" else C.TEST_SCENE_NUMBERS)
    allowed = C.GOALS_VALID[task_type]
    candidates = sorted(n for n, r in rooms.items() if n in scene_numbers and r["room_type"] in allowed)
    while True:
        scene = rng.choice(candidates)
        room = rooms[scene]
        choice = _choose_task(C, room, task_type, rng)
        if choice is not None:
            break
    obj, parent, lamp, hosts = choice

    used: set = set()

    def new_id(kind: str, suffix: str = "") -> str:
        while True:
            ident = f"{kind}_bar_{_coord(rng)}{suffix}"
            if ident not in used:
                used.add(ident)
                return ident

    receps = []  # (id, type)
    for rtype in sorted(room["receptacles"]):
        n = room["receptacles"][rtype] if rtype != "StoveBurner" else rng.randint(2, 4)
        for _ in range(n):
            if rtype in ("SinkBasin", "BathtubBasin"):
                receps.append((new_id(rtype[:-5], f"_bar_{rtype}"), rtype))
            else:
                receps.append((new_id(rtype), rtype))
    locs, loc_of = set(), {}

    def new_loc() -> str:
        while True:
            v = [rng.randint(-12, 12), rng.randint(-12, 12), rng.randint(0, 3), rng.choice((0, 30, 45, 60))]
            loc = "loc" + "".join("_bar_" + str(x).replace("-", "_minus_") for x in v)
            if loc not in locs:
                locs.add(loc)
                return loc
    for rid, _ in receps:
        loc_of[rid] = new_loc()
    start = new_loc()

    # Objects: the target type (2-3 for pick_two), then a random subset of the room's other movables.
    counts = {obj: rng.randint(2, 3) if task_type == "pick_two_obj_and_place" else rng.randint(1, 3)}
    for o in room["objects"]:
        if o != obj and rng.random() < 0.6:
            counts[o] = rng.randint(1, 3)
    objects = []  # (id, type, receptacle id)
    for otype in sorted(counts):
        homes = [rid for rid, rt in receps if otype in C.VAL_RECEPTACLE_OBJECTS[rt]
                 and not (otype == obj and rt == parent)]
        for _ in range(counts[otype] if homes else 0):
            objects.append((new_id(otype), otype, rng.choice(homes)))
    if lamp:
        host_ids = [rid for rid, rt in receps if rt in hosts]
        objects.append((new_id(lamp), lamp, rng.choice(host_ids)))

    init = [f"(atLocation agent1 {start})"]
    init += [f"(receptacleType {rid} {rt}Type)" for rid, rt in receps]
    init += [f"(objectType {oid} {ot}Type)" for oid, ot, _ in objects]
    present = sorted({ot for _, ot, _ in objects})
    init += [f"(canContain {rt}Type {ot}Type)" for rt in sorted({rt for _, rt in receps})
             for ot in present if ot in C.VAL_RECEPTACLE_OBJECTS[rt]]
    actions = C.VAL_ACTION_OBJECTS
    for oid, ot, _ in objects:
        if ot not in actions["Toggleable"]:
            init.append(f"(pickupable {oid})")
        for pred, key in (("cleanable", "Cleanable"), ("heatable", "Heatable"), ("coolable", "Coolable"),
                          ("sliceable", "Sliceable"), ("toggleable", "Toggleable")):
            if ot in actions[key]:
                init.append(f"({pred} {oid})")
        if ot in C.MOVABLE_RECEPTACLES_SET:
            init.append(f"(isReceptacleObject {oid})")
    init += [f"(openable {rid})" for rid, rt in receps if rt in C.OPENABLE_CLASS_SET]
    init += [f"(receptacleAtLocation {rid} {loc_of[rid]})" for rid, _ in receps]
    for oid, _, rid in objects:
        init += [f"(inReceptacle {oid} {rid})", f"(objectAtLocation {oid} {loc_of[rid]})"]

    rtypes = sorted({rt for _, rt in receps} | ({parent} if parent else set()))
    otypes = sorted((set(C.OBJECTS) - set(C.RECEPTACLES) | C.MOVABLE_RECEPTACLES_SET
                     | {ot for _, ot, _ in objects}) - set(rtypes))
    decl = (["agent1 - agent"] + [f"{t}Type - otype" for t in otypes] + [f"{t}Type - rtype" for t in rtypes]
            + [f"{oid} - object" for oid, _, _ in objects] + [f"{rid} - receptacle" for rid, _ in receps]
            + [f"{loc} - location" for loc in sorted(locs)])
    fill = dict(obj=obj, recep=parent, toggle=lamp, mrecep="")
    goal = glib.gdict[task_type]["pddl"].format(**fill).replace("#", "-")
    name = f"{split}_{task_type}_{scene}"
    problem = (f"(define (problem plan_{name})\n(:domain alfred)\n(:objects\n        "
               + "\n        ".join(decl) + "\n)\n(:init\n        " + "\n        ".join(init) + "\n)\n" + goal)
    template = rng.choice(glib.gdict[task_type]["templates"])
    sentence = template.format(**{k: v.lower() for k, v in fill.items()})
    traj = {"task_type": task_type,
            "pddl_params": {"mrecep_target": "", "object_sliced": False, "object_target": obj,
                            "parent_target": parent, "toggle_target": lamp},
            "scene": {"floor_plan": f"FloorPlan{scene}", "scene_num": scene, "room_type": room["room_type"]}}
    return problem, traj, sentence


@lru_cache(maxsize=1)
def _logic_texts():
    import alfworld
    data = Path(alfworld.__file__).parent / "data"
    return (data / "alfred.pddl").read_text(), (data / "alfred.twl2").read_text()


def play_expert(engine, gamefile: str, max_steps: int = 150, seed: int = 0, planner: bool = True,
                mode: str = "handcoded", planner_timeout: float | None = None):
    """Let the expert play ``gamefile`` from the start: (won, walkthrough, used_planner).
    ``planner=False`` stops where the handcoded expert gives up instead of asking Fast Downward;
    ``mode="planner"`` plays Fast Downward's plan from the start."""
    from .expert import Expert
    engine.load(gamefile)
    state = engine.reset()
    expert = Expert(engine, seed=seed, mode=mode, planner_timeout=planner_timeout)
    expert.reset(state)
    walk = []
    while not state["won"] and len(walk) < max_steps:
        if expert.used_planner and not planner:
            break
        action = expert.next_action(state)
        if action is None:
            break
        state, _, _ = engine.step(action)
        expert.observe(state, action)
        walk.append(action)
    return bool(state["won"]), walk, expert.used_planner


def _solve(engine, gamefile: str, planner_timeout: float | None):
    """(won, walkthrough, solver): the handcoded expert first, then Fast Downward within the timeout."""
    won, walk, _ = play_expert(engine, gamefile, planner=False)
    if won or planner_timeout is None:
        return won, walk, "handcoded"
    won, walk, _ = play_expert(engine, gamefile, mode="planner", planner_timeout=planner_timeout)
    return won, walk, "planner"


def ensure_game(split: str, task_type: str, index: int, cache_dir=None, engine=None,
                planner_timeout: float | None = PLANNER_TIMEOUT) -> str:
    """Path of the game file for (split, task_type, index), generating and checking it if needed."""
    if split not in GEN_SPLITS:
        raise ValueError(f"unknown split {split!r} for generated ALFWorld games; use one of {GEN_SPLITS}")
    final = game_dir(cache_dir, split, task_type, index)
    gamefile = final / "game.tw-pddl"
    if gamefile.is_file():
        return str(gamefile)
    from .engine import Engine
    engine = engine or Engine(cache_size=2)
    domain, grammar = _logic_texts()
    rng = random.Random(f"{DRAW_VERSION}/{split}/{task_type}/{index}")
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".tmp-{final.name}-{os.getpid()}"
    for attempt in range(MAX_ATTEMPTS):
        problem, traj, sentence = sample_problem(split, task_type, rng)
        traj["task_id"] = f"gen/{split}/{task_type}/{index:05d}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        (tmp / "initial_state.pddl").write_text(problem)
        (tmp / "traj_data.json").write_text(json.dumps(traj, indent=2))
        game = {"pddl_domain": domain, "grammar": grammar.replace("UNKNOWN GOAL", sentence),
                "pddl_problem": problem, "solvable": None, "walkthrough": None}
        (tmp / "game.tw-pddl").write_text(json.dumps(game))
        engine.forget(str(tmp / "game.tw-pddl"))
        engine.load(str(tmp / "game.tw-pddl"))
        if engine.reset()["won"]:  # goal already true at the start: not a task
            continue
        # Fast Downward needs minutes on some generated rooms: bounded by the timeout, so
        # generation time stays predictable
        won, walk, solver = _solve(engine, str(tmp / "game.tw-pddl"), planner_timeout)
        if won:
            game.update(solvable=True, walkthrough=walk)
            traj["scene"]["expert"] = solver
            traj["scene"]["attempt"] = attempt
            (tmp / "game.tw-pddl").write_text(json.dumps(game))
            (tmp / "traj_data.json").write_text(json.dumps(traj, indent=2))
            engine.forget(str(tmp / "game.tw-pddl"))
            try:
                os.rename(tmp, final)
            except OSError:  # another worker finished the same game first: keep theirs
                shutil.rmtree(tmp, ignore_errors=True)
            return str(gamefile)
    shutil.rmtree(tmp, ignore_errors=True)
    raise RuntimeError(f"could not generate a solvable {task_type} game for {split}/{index} "
                       f"in {MAX_ATTEMPTS} attempts")


def _generate_many(job):
    split, task_type, indices, cache_dir, planner_timeout = job
    from .engine import Engine
    engine, out = Engine(cache_size=2), []
    for i in indices:
        t = time.perf_counter()
        path = ensure_game(split, task_type, i, cache_dir, engine, planner_timeout)
        scene = json.loads((Path(path).parent / "traj_data.json").read_text())["scene"]
        out.append((task_type, i, scene["expert"], scene["attempt"], time.perf_counter() - t))
    return out


def mix_table(results) -> str:
    """Per task type: games, how many the planner solved, redrawn attempts, seconds a game."""
    lines = [f"{'task type':34s} {'games':>5s} {'planner':>7s} {'redraws':>7s} {'s/game':>7s}"]
    for task_type in sorted({r[0] for r in results}):
        rows = [r for r in results if r[0] == task_type]
        lines.append(f"{task_type:34s} {len(rows):5d} {sum(r[2] == 'planner' for r in rows):7d} "
                     f"{sum(r[3] for r in rows):7d} {sum(r[4] for r in rows) / len(rows):7.1f}")
    return "\n".join(lines)


def main(argv=None) -> None:
    from .games import resolve_task_types
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--split", default="train", choices=GEN_SPLITS)
    p.add_argument("--per-task", type=int, default=100, help="games per task type (indices 0..N-1)")
    p.add_argument("--task-types", nargs="*", default=None, help="task type names (default: all six)")
    p.add_argument("--cache-dir", default=None)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--planner-timeout", type=float, default=PLANNER_TIMEOUT,
                   help="seconds Fast Downward may take on a draw the handcoded expert loses "
                        "(0 = never ask it)")
    args = p.parse_args(argv)
    tasks = resolve_task_types(args.task_types)
    timeout = args.planner_timeout if args.planner_timeout > 0 else None
    jobs = [(args.split, t, list(range(w, args.per_task, args.workers)), args.cache_dir, timeout)
            for t in tasks for w in range(args.workers)]
    t0 = time.perf_counter()
    if args.workers > 1:
        import multiprocessing as mp
        with mp.get_context("spawn").Pool(args.workers) as pool:
            results = [r for rs in pool.imap_unordered(_generate_many, jobs) for r in rs]
    else:
        results = [r for job in jobs for r in _generate_many(job)]
    where = cache_root(args.cache_dir) / VERSION
    print(mix_table(results))
    print(f"{len(results)} games in {time.perf_counter() - t0:.0f}s under {where}")


if __name__ == "__main__":
    main()
