"""Small text MDPs whose exact Q and V under a fixed stochastic policy are computable by dynamic
programming; the ground truth of ``benchmarks/credit/estimator_quality.py``.

    world = make_world(np.random.default_rng(0))
    V, Q = solve(world, horizon=15, gamma=0.95)          # V[t, s], Q[t, s, a]
    steps = rollout(world, 15, np.random.default_rng(1), paraphrases=4)

Each task is a tiny text adventure: rooms joined by doors, a brass key in one room and a locked chest
in another; the episode is won (reward 10, terminal) by taking the key, walking to the chest and
opening it. The latent state is (room, holding key): the dynamics and the policy are Markov in it, so
DP over (time, latent state) gives the exact finite-horizon values (episodes are cut at the horizon
without bootstrap, like the estimators' returns). Doors stick with probability ``stuck_prob``.

The *observation* is what GiGPO hashes, and it aliases on purpose:
- every visit renders the room, the key and the chest with one of ``paraphrases`` templates drawn at
  random, so bisimilar (here: identical) latent states get different text and different hashes;
- it opens with the feedback of the previous action ("You walk to the pantry.", "You look around.",
  "The door to the study is stuck.", ...), so the text also depends on history;
- it always shows whether the key is held, so no two latent states share a text (the observation is
  Markov up to wording; partial observability is not what this benchmark measures).
Step 0 uses fixed templates, so the G rollouts of a task start from one identical observation (as in
ALFWorld, where the first observation holds the task).

The policy is a softmax over per-(state, action) preferences: a bonus for the action on a shortest route
to the current subgoal plus Gaussian noise, drawn once per task, so it is stochastic and mediocre.
"""
from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np

ROOMS = ("kitchen", "hallway", "pantry", "cellar", "study", "garden", "attic", "library", "workshop",
         "bedroom", "porch", "gallery")
ROOM_TEMPLATES = ("You are in the {room}.", "This is the {room}.", "You find yourself in the {room}.",
                  "The {room} surrounds you.", "You stand inside the {room}.", "Around you lies the {room}.",
                  "Welcome to the {room}.", "You have reached the {room}.")
KEY_TEMPLATES = ("A brass key lies on the floor.", "You notice a brass key here.",
                 "Something glints: a brass key.", "A brass key rests by the wall.")
CHEST_TEMPLATES = ("There is a wooden chest here.", "A wooden chest stands in the corner.",
                   "You see a wooden chest.", "A heavy wooden chest sits here.")
HELD_TEMPLATES = ("You carry the brass key.", "The brass key is in your pocket.",
                  "You are holding the brass key.", "Your hand grips the brass key.")
TASK_TEXT = "Your task is to open the wooden chest."


@dataclass
class World:
    """One task: room graph, key and chest rooms, and the policy's action preferences."""
    rooms: list[str]                 # room names (index = room id)
    doors: list[list[int]]           # sorted neighbour ids per room
    start: int                       # start room
    key_room: int
    chest_room: int
    stuck_prob: float                # a 'go to' fails with this probability
    prefs: list[np.ndarray]          # per latent state: preferences of its actions (softmax logits)

    @property
    def n_states(self) -> int:
        return 2 * len(self.rooms)

    def decode(self, s: int) -> tuple[int, bool]:
        return s // 2, bool(s % 2)

    def actions(self, s: int) -> list[str]:
        """Admissible commands of latent state s (their order indexes Q[t, s, :])."""
        room, held = self.decode(s)
        acts = [f"go to {self.rooms[n]}" for n in self.doors[room]]
        if room == self.key_room and not held:
            acts.append("take brass key")
        if room == self.chest_room:
            acts.append("open wooden chest")
        return acts + ["look", "inventory"]

    def policy(self, s: int) -> np.ndarray:
        z = self.prefs[s] - self.prefs[s].max()
        p = np.exp(z)
        return p / p.sum()

    def outcomes(self, s: int, a: int) -> list[tuple[float, int, float, bool, str]]:
        """[(prob, next latent state, reward, terminal, feedback text)] of action index a in s."""
        room, held = self.decode(s)
        act = self.actions(s)[a]
        if act.startswith("go to "):
            dest = self.rooms.index(act[6:])
            moved = (1.0 - self.stuck_prob, 2 * dest + held, 0.0, False, f"You walk to the {act[6:]}.")
            stuck = (self.stuck_prob, s, 0.0, False, f"The door to the {act[6:]} is stuck.")
            return [moved, stuck] if self.stuck_prob > 0 else [moved]
        if act == "take brass key":
            return [(1.0, s + 1, 0.0, False, "You pick up the brass key.")]
        if act == "open wooden chest":
            if held:
                return [(1.0, s, 10.0, True, "The chest opens. You win!")]
            return [(1.0, s, 0.0, False, "The chest is locked.")]
        if act == "look":
            return [(1.0, s, 0.0, False, "You look around.")]
        return [(1.0, s, 0.0, False, "You are carrying " + ("the brass key." if held else "nothing."))]


def _distances(doors: list[list[int]], target: int) -> np.ndarray:
    dist = np.full(len(doors), np.inf)
    dist[target], frontier = 0, [target]
    while frontier:
        nxt = []
        for r in frontier:
            for n in doors[r]:
                if dist[n] == np.inf:
                    dist[n] = dist[r] + 1
                    nxt.append(n)
        frontier = nxt
    return dist


def make_world(rng: np.random.Generator, n_rooms: int = 5, stuck_prob: float = 0.15,
               route_bonus: float = 1.5, noise: float = 0.8) -> World:
    """A random connected room graph (random tree plus one extra door) with key, chest and policy."""
    if not 3 <= n_rooms <= len(ROOMS):
        raise ValueError(f"n_rooms must be in [3, {len(ROOMS)}]; got {n_rooms}")
    names = [ROOMS[i] for i in rng.permutation(len(ROOMS))[:n_rooms]]
    edges = {(int(rng.integers(0, i)), i) for i in range(1, n_rooms)}
    while len(edges) < n_rooms:                      # one extra door makes a loop
        a, b = sorted(int(x) for x in rng.choice(n_rooms, 2, replace=False))
        edges.add((a, b))
    doors = [sorted({b for a, b in edges if a == r} | {a for a, b in edges if b == r})
             for r in range(n_rooms)]
    start, key_room, chest_room = (int(x) for x in rng.choice(n_rooms, 3, replace=False))
    world = World(names, doors, start, key_room, chest_room, stuck_prob, [])
    to_key, to_chest = _distances(doors, key_room), _distances(doors, chest_room)
    for s in range(world.n_states):
        room, held = world.decode(s)
        dist = to_chest if held else to_key
        good = "open wooden chest" if held else "take brass key"
        bonus = np.array([route_bonus * ((a == good and room == (chest_room if held else key_room)) or
                                         (a.startswith("go to ") and dist[names.index(a[6:])] < dist[room]))
                          for a in world.actions(s)], dtype=float)
        world.prefs.append(bonus + noise * rng.standard_normal(len(bonus)))
    return world


def solve(world: World, horizon: int, gamma: float) -> tuple[np.ndarray, np.ndarray]:
    """Exact finite-horizon values of the world's policy: V[t, s] and Q[t, s, a] (NaN where a is not
    admissible in s) for t = 0..horizon-1; the episode is cut after step horizon-1 (V[horizon] = 0)."""
    n_act = max(len(world.actions(s)) for s in range(world.n_states))
    V = np.zeros((horizon + 1, world.n_states))
    Q = np.full((horizon, world.n_states, n_act), np.nan)
    for t in range(horizon - 1, -1, -1):
        for s in range(world.n_states):
            q = np.array([sum(p * (r + (0.0 if done else gamma * V[t + 1, s2]))
                              for p, s2, r, done, _ in world.outcomes(s, a))
                          for a in range(len(world.actions(s)))])
            Q[t, s, :len(q)] = q
            V[t, s] = world.policy(s) @ q
    return V[:horizon], Q


def render(world: World, s: int, feedback: str, rng: np.random.Generator, paraphrases: int,
           first: bool = False) -> str:
    """Observation text of latent state s after `feedback`; templates are drawn per visit."""
    room, held = world.decode(s)
    pick = (lambda options: options[0]) if first else \
        (lambda options: options[int(rng.integers(0, min(paraphrases, len(options))))])
    parts = [feedback, pick(ROOM_TEMPLATES).format(room=world.rooms[room])]
    if room == world.key_room and not held:
        parts.append(pick(KEY_TEMPLATES))
    if room == world.chest_room:
        parts.append(pick(CHEST_TEMPLATES))
    if held:
        parts.append(pick(HELD_TEMPLATES))
    parts.append("Doors lead to: " + ", ".join(world.rooms[n] for n in world.doors[room]) + ".")
    return " ".join(parts)


def rollout(world: World, horizon: int, rng: np.random.Generator, paraphrases: int) -> list[dict]:
    """One episode under the world's policy: per step the latent state, time, observation (anchor),
    action index and text, and reward; cut after `horizon` steps or at the win."""
    if paraphrases < 1:
        raise ValueError(f"paraphrases must be >= 1; got {paraphrases}")
    s, steps = world.start * 2, []
    obs = render(world, s, TASK_TEXT, rng, paraphrases, first=True)
    for t in range(horizon):
        a = int(rng.choice(len(world.actions(s)), p=world.policy(s)))
        outs = world.outcomes(s, a)
        p, s2, r, done, feedback = outs[int(rng.choice(len(outs), p=[o[0] for o in outs]))]
        steps.append({"t": t, "state": s, "obs": obs, "action": a, "action_text": world.actions(s)[a],
                      "reward": r})
        if done:
            break
        s, obs = s2, render(world, s2, feedback, rng, paraphrases)
    return steps


class TextMDPEnv(gym.Env):
    """One world as a gymnasium env (text actions, the latent state in ``info['latent']``), for tools that
    replay and continue episodes (``benchmarks/credit/mc_truth.py``). Paraphrase and door draws come from
    ``reset(seed=...)`` when ``seeded``; ``seeded=False`` draws them from fresh entropy, an env whose replay
    diverges once ``paraphrases`` > 1 or doors stick. An inadmissible action is refused with an error."""

    def __init__(self, world: World, horizon: int, paraphrases: int = 1, seeded: bool = True):
        self.world, self.horizon, self.paraphrases, self.seeded = world, horizon, paraphrases, seeded
        self.observation_space = self.action_space = gym.spaces.Text(4096)

    def reset(self, *, seed=None, options=None):
        self.rng = np.random.default_rng(seed if self.seeded else None)
        self.s, self.t, self.obs = self.world.start * 2, 0, ""
        self.obs = render(self.world, self.s, TASK_TEXT, self.rng, self.paraphrases, first=True)
        return self.obs, self._info(False)

    def step(self, action: str):
        acts = self.world.actions(self.s)
        if action not in acts:
            raise ValueError(f"{action!r} is not admissible here; admissible: {acts}")
        outs = self.world.outcomes(self.s, acts.index(action))
        _, s2, r, done, feedback = outs[int(self.rng.choice(len(outs), p=[o[0] for o in outs]))]
        self.t += 1
        self.s = s2
        self.obs = render(self.world, s2, feedback, self.rng, self.paraphrases)
        return self.obs, r, done, (not done) and self.t >= self.horizon, self._info(done)

    def _info(self, won: bool) -> dict:
        return {"anchor": self.obs, "latent": self.s, "t": self.t, "won": won,
                "admissible_actions": self.world.actions(self.s)}
