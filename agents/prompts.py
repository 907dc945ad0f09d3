"""verl-agent-style prompts: per-env templates, the last-h history memory, and chat messages.

    from agents.prompts import make_prompter, PromptSettings
    p = make_prompter("textcraft", PromptSettings(history_length=2, require_think=False))
    p.reset(i, obs, info); msgs = p.messages(i, obs, info); ...; p.record(i, obs, action)

Templates follow spec §7: step 0 shows the observation and the admissible actions; later steps add the
task, "Prior to this step, you have already taken n step(s)", the last h ``[Observation k: '..',
Action k: '..']`` lines, and the current observation. The answer format is ``<think>..</think>``
(optional with ``require_think=False``, for tiny models) then ``<action>..</action>``. One ``Prompter``
serves a whole vector of envs (memory is per env index). Add an env by subclassing ``Prompter`` and
registering it in ``PROMPTERS``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

THINK_REQUIRED = ("Now it's your turn to take an action. You should first reason step-by-step about the "
                  "current situation. This reasoning process MUST be enclosed within <think> </think> tags. "
                  "Once you've finished your reasoning, you should choose an admissible action for current "
                  "step and present it within <action> </action> tags.")
COMPACT = "Answer with one admissible action within <action> </action> tags."
THINK_OPTIONAL = ("Now it's your turn to take an action. You may reason within <think> </think> tags, then "
                  "present one admissible action within <action> </action> tags.")


@dataclass
class PromptSettings:
    """How prompts are rendered."""
    history_length: int = 2          # last h (observation, action) pairs shown
    require_think: bool = True       # ask for <think>; the parser marks answers without it invalid
    show_admissible: bool = True     # list the admissible actions in the prompt
    system: str = "You are a helpful assistant."
    max_prompt_chars: int = 13000    # above this, fall back to the no-history template (WebShop rule)
    compact: bool = False            # tiny models: one-line instruction; TextCraft's task is only the goal
    #                                  line when the admissible list (holding every recipe line) is shown
    history_chars: int = 0           # past observations in the history clipped to this many characters
    #                                  (0 = whole): WebShop's result pages are most of a prompt's tokens

    def __post_init__(self):
        if self.history_length < 0 or self.history_chars < 0:
            raise ValueError(f"history_length and history_chars must be >= 0; got {self.history_length}, "
                             f"{self.history_chars}")


class Prompter:
    """Base template; subclasses set the intro and how observations, tasks and actions are shown."""
    intro = "You are an expert agent."
    fallback_chars = 30              # parser fallback length (ALFWorld 30, WebShop 20)
    actions_key = "admissible_actions"   # the info list shown as "admissible actions"

    def __init__(self, settings: PromptSettings | None = None):
        self.s = settings or PromptSettings()
        self.tasks: dict[int, str] = {}
        self.memory: dict[int, list[tuple[str, str]]] = {}

    # --- env-specific pieces -------------------------------------------------
    def task_of(self, first_obs: str, info: dict) -> str:
        return first_obs

    def format_obs(self, obs: str) -> str:
        return obs

    def format_actions(self, actions) -> str:
        return "\n ".join(f"'{a}'" for a in actions)

    def shown_actions(self, info: dict):
        """The action list the prompt shows (None when the env gives none)."""
        return info.get(self.actions_key, info.get("admissible_actions"))

    def memory_obs(self, obs: str) -> str:
        """How a past observation is shown in the history lines."""
        return self.format_obs(obs)

    def action_line(self, actions) -> str:
        """The prompt line that lists the admissible actions."""
        return ("\nYour admissible actions of the current situation are: [" + self.format_actions(actions)
                + "].")

    # --- memory ---------------------------------------------------------------
    def reset(self, i: int, obs: str, info: dict) -> None:
        self.tasks[i] = self.task_of(obs, info)
        self.memory[i] = []

    def record(self, i: int, obs: str, action: str) -> None:
        """Store the observation the action was taken on (clipped to ``history_chars``) and the (projected)
        action."""
        shown, n = self.memory_obs(obs), self.s.history_chars
        if n and len(shown) > n:
            shown = shown[:n].rstrip() + " ..."
        self.memory[i].append((shown, action))

    def history(self, i: int) -> str:
        mem = self.memory[i]
        start = max(0, len(mem) - self.s.history_length)
        return "\n".join(f"[Observation {k + 1}: '{o}', Action {k + 1}: '{a}']"
                         for k, (o, a) in enumerate(mem[start:], start=start))

    # --- rendering --------------------------------------------------------------
    def compact_text(self, i: int, obs: str, act_line: str, instr: str) -> str:
        """Small models' template: the task first at every step, so all prompts of a task share one token
        prefix (run once, ``agents.prefix``), then each past action with what it gave, without the
        boilerplate sentences (about 60 of a 250-token prompt)."""
        mem = self.memory.get(i, [])
        head = f"{self.intro} Your task is to: {self.tasks[i]}\n"
        if not mem or self.s.history_length <= 0:
            return f"{head}Your current observation is: {self.memory_obs(obs)}{act_line}\n{instr}"
        results = [o for o, _ in mem[1:]] + [self.format_obs(obs)]
        start = max(0, len(mem) - self.s.history_length)
        lines = "\n".join(f"{a} -> {r}" for (_, a), r in list(zip(mem, results))[start:])
        return f"{head}Your actions so far and what they gave:\n{lines}{act_line}\n{instr}"

    def user_text(self, i: int, obs: str, info: dict) -> str:
        n = len(self.memory.get(i, []))
        acts = self.shown_actions(info) if self.s.show_admissible else None
        act_line = self.action_line(acts) if acts is not None else ""
        instr = THINK_REQUIRED if self.s.require_think else (COMPACT if self.s.compact else THINK_OPTIONAL)
        if self.s.compact:
            return self.compact_text(i, obs, act_line, instr)
        cur = self.format_obs(obs)
        no_his = f"{self.intro} Your current observation is: {cur}{act_line}\n{instr}"
        if n == 0 or self.s.history_length <= 0:
            return no_his
        text = (f"{self.intro} Your task is to: {self.tasks[i]}\nPrior to this step, you have already taken "
                f"{n} step(s). Below are the most recent {min(n, self.s.history_length)} observations and "
                f"the corresponding actions you took:\n{self.history(i)}\nYou are now at step {n + 1} and "
                f"your current observation is: {cur}{act_line}\n{instr}")
        return text if len(text) <= self.s.max_prompt_chars else no_his

    def messages(self, i: int, obs: str, info: dict) -> list[dict]:
        return [{"role": "system", "content": self.s.system},
                {"role": "user", "content": self.user_text(i, obs, info)}]

    def expert_response(self, action: str) -> str:
        """How an expert action is written as a model answer (SFT targets)."""
        if self.s.require_think:
            return f"<think>The next step of my plan is: {action}.</think>\n<action>{action}</action>"
        return f"<action>{action}</action>"


class TextCraftPrompter(Prompter):
    intro = "You are an expert agent crafting items in Minecraft."
    # the episode's whole command list (every recipe line), not only what succeeds now: compact
    # prompts drop the recipe lines from the observation because this list holds them
    actions_key = "useful_commands"

    def task_of(self, first_obs, info):
        # The reset observation holds the recipe list and the goal; both stay needed all episode.
        if self.s.compact and self.s.show_admissible and "Goal:" in first_obs:
            return first_obs[first_obs.rfind("Goal:"):].strip()
        return self.format_obs(first_obs).strip()

    def format_obs(self, obs):
        # Compact prompts put the goal line before the recipe lines: a small causal model can then
        # mark the goal's line while reading it, instead of searching back from the end.
        if self.s.compact and obs.startswith("Crafting commands:") and "Goal:" in obs:
            cut = obs.rfind("Goal:")
            return obs[cut:].strip() + "\n" + obs[:cut].strip()
        return obs

    def memory_obs(self, obs):
        # the reset text is already the task; repeating its recipe list would double the prompt
        return "the crafting commands" if obs.startswith("Crafting commands:") else obs

    def format_actions(self, actions):
        return ", ".join(f"'{a}'" for a in actions)


class ALFWorldPrompter(Prompter):
    """verl-agent's ALFWorld template; compact prompts (small models) move what stays fixed for the whole
    episode into the task line and list only the actions that change from step to step.

    Why: a room has 20-40 receptacles, so the admissible list repeats ~30 ``go to X`` commands (plus
    ``look``, ``inventory``, ``examine X``) at every step: about 200 tokens a step that the carried cache
    must run again, because the list sits after the history. Compact prompts name the room's receptacles
    once, in the task line every prompt of the episode starts with (run once per group,
    ``agents.prefix``), and each step lists only the other actions (take, move, open, close, heat, cool,
    clean, slice, use): 5-10 commands. ``go to``, ``look``, ``inventory`` and ``examine`` stay valid;
    the instruction says so."""
    intro = "You are an expert agent operating in the ALFRED Embodied Environment."
    # always admissible (any receptacle of the room, or information only): not listed in compact prompts
    STANDING = ("go to ", "examine ", "look", "inventory", "help")
    ROOM = re.compile(r"Looking quickly around you, you see (.*?)\.\s*(?:\n|$)", re.S)

    def task_of(self, first_obs, info):
        key = "Your task is to: "
        task = first_obs[first_obs.find(key) + len(key):].strip() if key in first_obs else first_obs.strip()
        if self.s.compact:
            room = self.receptacles(first_obs)
            if room:
                task += f"\nThe room's receptacles: {', '.join(room)}."
        return task

    @classmethod
    def receptacles(cls, first_obs: str) -> list[str]:
        """The receptacles the reset observation names ("you see a cabinet 2, a cabinet 1, and a sofa
        1."), in its order, without articles."""
        m = cls.ROOM.search(first_obs)
        if not m:
            return []
        items = re.split(r",\s*(?:and\s+)?|\s+and\s+", m.group(1))
        names = [re.sub(r"^(?:a|an|the)\s+", "", x.strip()) for x in items if x.strip()]

        def natural(name):          # drawer 2 before drawer 10
            head, _, num = name.rpartition(" ")
            return (head, int(num)) if num.isdigit() else (name, 0)
        return sorted(names, key=natural)

    def format_obs(self, obs):
        # the reset text repeats the room and the task, which compact prompts already open with
        if self.s.compact and self.ROOM.search(obs) and "Your task is to:" in obs:
            return "You are in the middle of the room."
        return obs

    def format_actions(self, actions):
        if self.s.compact:
            local = [a for a in actions if not a.startswith(self.STANDING)]
            return ", ".join(f"'{a}'" for a in local)
        return "\n ".join(f"'{a}'" for a in actions if a != "help")

    def action_line(self, actions) -> str:
        if not self.s.compact:
            return super().action_line(actions)
        standing = "go to / examine a receptacle, look, inventory"
        local = self.format_actions(actions)
        return f"\nActions here: {local}; or {standing}." if local else f"\nActions: {standing}."


class WebShopPrompter(Prompter):
    intro = "You are an expert autonomous agent operating in the WebShop e-commerce platform."
    fallback_chars = 20

    def task_of(self, first_obs, info):
        parts = first_obs.split(" [SEP] ")
        for k, p in enumerate(parts[:-1]):
            if p.strip().startswith("Instruction:"):
                return parts[k + 1].strip()
        return info.get("instruction", first_obs)

    def format_obs(self, obs):
        parts = obs.split(" [SEP] ")
        # drop everything through the instruction text, quote the rest (upstream format_obs)
        for k, p in enumerate(parts[:-1]):
            if p.strip().startswith("Instruction:"):
                parts = parts[k + 2:]
                break
        return ", ".join(f"'{p}'" for p in parts)

    def format_actions(self, actions):
        return "\n".join(f"'{a}'," for a in actions)


PROMPTERS: dict[str, type[Prompter]] = {
    "textcraft": TextCraftPrompter,
    "alfworld": ALFWorldPrompter,
    "webshop": WebShopPrompter,
}


def make_prompter(env: str, settings: PromptSettings | None = None) -> Prompter:
    if env not in PROMPTERS:
        raise ValueError(f"no prompt template for env {env!r}; registered: {sorted(PROMPTERS)}")
    return PROMPTERS[env](settings)
