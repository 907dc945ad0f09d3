"""Crash consistency of a training run: SIGKILL it at random points, resume it, and compare its files with
those of a run that was never stopped.

    python -m benchmarks.learning.kill_resume --kills 20           # about 4 minutes on 2 CPU cores
    python -m benchmarks.learning.kill_resume --kills 2 --phases checkpoint,adapter --out runs/kr

The run is ``bipace-train --preset smoke`` with 3 iterations, a checkpoint and an evaluation after each
(every stage in seconds). It is run once uninterrupted with ``BIPACE_CRASH_TRACE`` set, which lists each
crash point it passes (``agents.crash_points``): SFT steps, the warm start's save, rollouts, optimizer
steps, evaluations, each log write, checkpoint writing (between the adapter and ``state.pt``, between
the rename and ``latest``) and the final adapter. Then N times: the same run in a fresh folder, killed
with SIGKILL (``BIPACE_KILL_AT``) at one of those points (the phases in turn, in a shuffled order, each at
a random one of its occurrences), then ``--resume`` until it finishes, and its files compared byte for
byte with the uninterrupted run's: the final adapter (every file of ``adapter/``), ``eval.csv``, every
``*.jsonl``, ``train.csv`` and ``summary.json``. Identical files alone would not show a resume (a run
that restarted from scratch with emptied logs ends with the same files), so each resumed process must also
say it went on from the newest complete checkpoint the kill left (``checkpoints/iter_N`` with its adapter
and ``state.pt``): its ``resume: ... at iteration N + 1`` line, or iteration 1 where the kill left none.
Left out, because they are seconds and differ between
any two runs: ``train.csv``'s timing columns (names ending in ``_s``: rollout_s, estimator_s, update_s,
gen_s, env_s) and ``summary.json``'s ``wall_s`` and ``wall_s_parts``. Every run trains in the same
folder (``<out>/run``, renamed when it is done), since the adapter's config names the warm start's path,
and with the same ``PYTHONHASHSEED``, since peft writes its ``target_modules`` set in hash order. Prints
each kill and "k of N kills resumed identically"; exits 1 unless every kill did.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

RUN = ["--preset", "smoke", "--set", "iterations=3", "--set", "checkpoint_every=1", "--set", "eval_every=1"]
SUMMARY_SECONDS = ("wall_s", "wall_s_parts")


@dataclass
class Trial:
    phase: str
    nth: int
    killed: bool = False
    differs: list = field(default_factory=list)
    error: str = ""

    @property
    def identical(self) -> bool:
        return self.killed and not self.error and not self.differs


@dataclass
class Result:
    trials: list
    seconds: float

    @property
    def identical(self) -> int:
        return sum(t.identical for t in self.trials)


def train(folder: Path, *extra: str, env: dict | None = None, timeout: float = 600
          ) -> subprocess.CompletedProcess:
    """One ``bipace-train`` process on ``folder``; ``env`` adds variables (the crash points')."""
    base = {k: v for k, v in os.environ.items() if k not in ("BIPACE_KILL_AT", "BIPACE_CRASH_TRACE")}
    base.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    base["PYTHONHASHSEED"] = "0"
    return subprocess.run([sys.executable, "-m", "agents.cli", *RUN, "--out-dir", str(folder), *extra],
                          env={**base, **(env or {})}, capture_output=True, text=True, timeout=timeout)


def compared_files(folder: Path) -> list[str]:
    """The files compared, relative to the run folder."""
    names = [p.name for p in folder.iterdir() if p.is_file() and (p.suffix == ".jsonl" or p.name in (
        "train.csv", "eval.csv", "summary.json"))]
    if (folder / "adapter").is_dir():
        names += [f"adapter/{p.name}" for p in (folder / "adapter").iterdir() if p.is_file()]
    return sorted(names)


def comparable(path: Path) -> str | bytes:
    """The file's bytes, bar the seconds (see the module docstring)."""
    if path.name == "train.csv":
        rows = list(csv.reader(io.StringIO(path.read_text(), newline="")))
        keep = [k for k, name in enumerate(rows[0]) if not name.endswith("_s")] if rows else []
        out = io.StringIO()
        csv.writer(out).writerows([[row[k] for k in keep if k < len(row)] for row in rows])
        return out.getvalue()
    if path.name == "summary.json":
        return json.dumps({k: v for k, v in json.loads(path.read_text()).items() if k not in SUMMARY_SECONDS})
    return path.read_bytes()


def differences(reference: Path, run: Path) -> list[str]:
    """The compared files that differ (or exist in one run only)."""
    out = []
    for name in sorted(set(compared_files(reference)) | set(compared_files(run))):
        a, b = reference / name, run / name
        if not (a.exists() and b.exists()) or comparable(a) != comparable(b):
            out.append(name)
    return out


def newest_checkpoint(folder: Path) -> int:
    """The iteration of the newest complete checkpoint in the run folder (0 when there is none): what a
    resume must go on from. Read from the file names, not through the trainer's own loader."""
    done = [int(p.name[len("iter_"):]) for p in (folder / "checkpoints").glob("iter_*")
            if (p / "state.pt").is_file() and (p / "adapter" / "adapter_model.safetensors").is_file()]
    return max(done, default=0)


RESUMED_AT = re.compile(r"^resume: .* at iteration (\d+)\s*$", re.M)


def resume_error(expected_start: int, output: str) -> str:
    """Why a resumed process did not go on from ``expected_start`` ("" when it did), read from its
    output's ``resume:`` line (``agents.checkpoints.load_checkpoint``)."""
    said = RESUMED_AT.findall(output)
    if len(said) != 1:
        return f"the resumed process said {len(said)} 'resume: ... at iteration N' lines, not 1"
    if int(said[0]) != expected_start:
        return (f"the resumed process started at iteration {said[0]}, but the kill left a checkpoint to go "
                f"on at iteration {expected_start}")
    return ""


def plan(trace: list[str], kills: int, rng, phases: list[str] | None) -> list[tuple[str, int]]:
    """(phase, occurrence) of each kill: the phases in turn, in a shuffled order, each at a random one of
    the occurrences the uninterrupted run passed."""
    counts = {p: trace.count(p) for p in dict.fromkeys(trace)}
    order = list(phases) if phases else list(rng.permutation(list(counts)))
    missing = [p for p in order if p not in counts]
    if missing:
        raise SystemExit(f"--phases {missing}: the run never reaches them; it reaches {list(counts)}")
    return [(p, int(rng.integers(1, counts[p] + 1))) for p in (order[k % len(order)] for k in range(kills))]


def run(kills: int, out: Path, seed: int = 0, phases: list[str] | None = None, log=print,
        before_resume=None) -> Result:
    """``before_resume(folder)``, if given, runs between each kill and its resume (tests use it to make a
    resume start over, which the check must catch)."""
    t0 = time.perf_counter()
    work, reference, trace = out / "run", out / "uninterrupted", out / "trace.txt"
    done = train(work, env={"BIPACE_CRASH_TRACE": str(trace)})
    if done.returncode != 0:
        raise SystemExit(f"the uninterrupted run failed:\n{done.stderr[-3000:]}")
    work.rename(reference)
    points = trace.read_text().split()
    log(f"uninterrupted run: {len(points)} crash points passed: "
        + ", ".join(f"{p} x{points.count(p)}" for p in dict.fromkeys(points)))
    trials = []
    for k, (phase, nth) in enumerate(plan(points, kills, np.random.default_rng(seed), phases)):
        folder, trial = out / f"kill_{k:03d}", Trial(phase, nth)
        killed = train(work, env={"BIPACE_KILL_AT": f"{phase}:{nth}"})
        trial.killed = killed.returncode == -9
        if not trial.killed:
            trial.error = f"not killed (exit {killed.returncode}): {killed.stderr[-500:]}"
        else:      # the resume is not killed, so one finishes the run (exit 0 only after summary.json)
            expected = newest_checkpoint(work) + 1
            if before_resume is not None:
                before_resume(work)
            resumed = train(work, "--resume")
            if resumed.returncode != 0:
                trial.error = f"--resume exited {resumed.returncode}: {resumed.stderr[-1500:]}"
            else:
                trial.error = resume_error(expected, resumed.stdout)
        work.rename(folder)
        if trial.killed and not trial.error.startswith("--resume exited"):
            trial.differs = differences(reference, folder)
        trials.append(trial)
        verdict = "identical" if trial.identical else "; ".join(
            filter(None, [trial.error, trial.differs and "differs: " + ", ".join(trial.differs)]))
        log(f"kill {k + 1}/{kills} at {phase} #{nth}: {verdict}")
    result = Result(trials, time.perf_counter() - t0)
    log(f"{result.identical} of {kills} kills resumed identically ({result.seconds:.0f}s; phases hit: "
        f"{', '.join(sorted({t.phase for t in trials if t.killed}))})")
    return result


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.learning.kill_resume",
                                 description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--kills", type=int, default=20, help="runs to kill and resume (N)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the phase order and the occurrences")
    ap.add_argument("--phases", default="", help="comma-separated crash points to kill at, in turn (default: "
                    "every point the run passes, in a shuffled order); see agents/crash_points.py")
    ap.add_argument("--out", type=Path, default=None, help="folder for the runs, kept (default: a temporary "
                    "folder, deleted at the end)")
    ap.add_argument("--overwrite", action="store_true", help="empty a non-empty --out first")
    return ap


def main(argv=None) -> Result:
    args = build_parser().parse_args(argv)
    if args.kills < 1:
        raise SystemExit(f"--kills must be >= 1, got {args.kills}")
    from agents.run_folder import claim_run_folder
    out = args.out or Path(tempfile.mkdtemp(prefix="kill_resume_"))
    phases = [p.strip() for p in args.phases.split(",") if p.strip()] or None
    try:
        with claim_run_folder(out, resume=False, overwrite=args.overwrite, what="kill_resume check"):
            return run(args.kills, out, args.seed, phases)
    finally:
        if args.out is None:
            shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(0 if (r := main()).identical == len(r.trials) else 1)
