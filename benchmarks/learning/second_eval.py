"""Does a table's held-out result replicate on other episodes? Reads a second evaluation of a
``benchmarks/learning/train_table.py`` table, played by ``benchmarks/learning/goal_probe.py`` with other
env and decoding seeds, and prints each run's change from the warm start in the table's evaluation, in the
second one, and in both together (twice the episodes; every goal paired with itself).

    T=runs/table; mkdir -p $T/second
    # iteration 0 = the warm start
    python -m benchmarks.learning.goal_probe --run $T/grpo_seed0 --split test --checkpoints 0 10 \\
        --repeats 12 --temperature 0.4 --seed 20000 --json $T/second/grpo_seed0.json
    # each other run's final policy
    python -m benchmarks.learning.goal_probe --run $T/gigpo_seed0 --split test --repeats 12 \\
        --temperature 0.4 --seed 20000 --json $T/second/gigpo_seed0.json
    python -m benchmarks.learning.second_eval --table $T --second $T/second

Use the table's held-out goals, repeats and evaluation temperature (``--repeats``, ``--temperature``
above) and one ``--seed`` for every file, far from the table's (its evaluation plays seeds 1000 on), so
the second evaluation shares no episode with the first. A file written with ``--checkpoints 0 N`` gives
the warm start (iteration 0: a fresh LoRA adds nothing) and the run after its last iteration N; a file
without checkpoints gives the final policy only. Every run's row needs the warm start from some file.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.learning.goal_probe import by_task as tallies
from benchmarks.stats import ci95
from benchmarks.learning.table_report import final_by_task, paired_change, pooled_by_task, won_of


def read_second(folder: Path) -> tuple[dict | None, dict]:
    """The warm start's tallies (from a checkpoint file's iteration 0, None if no file has one) and each
    run's final-policy tallies, keyed by file stem (the run's folder name)."""
    warm, runs = None, {}
    for path in sorted(folder.glob("*.json")):
        data = json.loads(path.read_text())
        if all(k.isdigit() for k in data):          # written with --checkpoints: {iteration: seen}
            its = sorted(int(k) for k in data)
            if its[0] == 0:
                this = tallies(data["0"])
                if warm is not None and this != warm:
                    raise ValueError(f"{path}: its iteration 0 differs from another file's; the files must "
                                     "share goals, repeats, temperature and --seed")
                warm = this
            if its[-1] > 0:
                runs[path.stem] = tallies(data[str(its[-1])])
        else:
            runs[path.stem] = tallies(data)
    return warm, runs


def success(by_task: dict) -> tuple[float, int]:
    won, n = won_of(by_task)
    return won / n, n


def change_text(before: dict, after: dict) -> str:
    d, half, up, down = paired_change(before, after)
    return f"{100 * d:+.1f} ± {100 * half:.1f} ({up} up, {down} down)"


def rows(table: Path, warm1: dict, warm2: dict, runs2: dict) -> list[str]:
    """A Markdown row per run that has both evaluations (the warm start's: ``warm1`` in the table,
    ``warm2`` in the second): success and change (paired over goals) in the table's, the second and
    both, and whether the gain clears the interval over episodes of the success."""
    out = []
    for name, after2 in runs2.items():
        after1 = final_by_task(table / name)
        if after1 is None:
            raise ValueError(f"{table / name}: no evaluation in the table to compare with; finish that run "
                             f"or remove {name}.json from the second evaluation")
        cells = [name.replace("_seed", " seed ")]
        for before, after in ((warm1, after1), (warm2, after2),
                              (pooled_by_task([warm1, warm2]), pooled_by_task([after1, after2]))):
            p, n = success(after)
            half = ci95(p, n)
            mark = "**" if p - success(before)[0] > half else ""
            cells.append(f"{mark}{100 * p:.1f}% ± {100 * half:.1f}{mark} (n={n}), "
                         f"{change_text(before, after)}")
        out.append("| " + " | ".join(cells) + " |")
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--table", type=Path, required=True, help="the train_table.py folder")
    ap.add_argument("--second", type=Path, required=True, help="the folder of goal_probe.py --json files")
    args = ap.parse_args(argv)
    if not (args.table / "warm_start_eval.json").exists():
        ap.error(f"--table {args.table}: no warm_start_eval.json (not a train_table.py folder, or its warm "
                 "start is not evaluated yet)")
    warm2, runs2 = read_second(args.second)
    if warm2 is None:
        ap.error(f"--second {args.second}: no file holds the warm start; play one run with --checkpoints 0 N")
    if not runs2:
        ap.error(f"--second {args.second}: no run's final policy in it")
    w1 = json.loads((args.table / "warm_start_eval.json").read_text())["by_task"]
    if set(w1) != set(warm2):
        ap.error(f"the second evaluation played {len(warm2)} goals, the table {len(w1)}: play the table's "
                 "held-out goals (--split test with the table's depths)")
    print("Held-out success and change from the warm start (paired over goals, 95% t-interval); bold: the "
          "gain exceeds the success's 95% interval over episodes.\n")
    cells = []
    for label, tally in (("table's evaluation", w1), ("second evaluation", warm2),
                         ("both", pooled_by_task([w1, warm2]))):
        p, n = success(tally)
        cells.append(f"{label}: {100 * p:.1f}% ± {100 * ci95(p, n):.1f} (n={n})")
    print("warm start: " + "; ".join(cells) + "\n")
    print("| run | table's evaluation | second evaluation | both |")
    print("|---|---|---|---|")
    print("\n".join(rows(args.table, w1, warm2, runs2)))


if __name__ == "__main__":
    main()
