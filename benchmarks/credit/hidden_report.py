"""The hidden-state study's tables and figure from ``hidden_sweep.py``'s folders.

    python -m benchmarks.credit.hidden_report docs/results/hidden-states      # markdown to stdout, auc.png

Tables: AUC by depth (same vs different env state, pairs of distinct prompts), the held-out scores of the
settings chosen on half A with their controls, the paper's setting, the sweep at chosen layers (clusters,
singleton and impure rates, each difference with its interval), and a count of the sweep points whose
differences lie beyond their intervals.
"""
from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

DIFFS = (("bigpo-gigpo", "bigpo - gigpo"), ("bipace-pace", "bipace - pace"),
         ("bipace-gigpo", "bipace - gigpo"))
CONTROLS = {"bigpo": (("bigpo-gigpo_goal", "- goal ctrl"), ("bigpo-bigpo_random", "- random ctrl")),
            "bipace": (("bipace-pace_goal", "- goal ctrl"), ("bipace-bipace_random", "- random ctrl"))}


def write_csv(path: Path, rows: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        for row in rows:
            w.writerow({k: f"{v:.6g}" if isinstance(v, float) else v for k, v in row.items()})


def read_csv(path: Path) -> list[dict]:
    def num(v):
        try:
            return float(v)
        except ValueError:
            return v
    with open(path) as f:
        return [{k: num(v) for k, v in row.items()} for row in csv.DictReader(f)]


def cells(root: Path) -> list[Path]:
    found = sorted(p.parent for p in Path(root).glob("*/selection.json"))
    if not found:
        raise FileNotFoundError(f"{root} holds no cell of hidden_sweep.py (no */selection.json); run "
                                "`python -m benchmarks.credit.hidden_sweep --cell NAME=FOLDER --out DIR`")
    return found


def ci(row: dict, key: str) -> str:
    d, lo, hi = row[key], row[f"{key}_lo"], row[f"{key}_hi"]
    mark = "**" if lo > 0 or hi < 0 else ""
    return f"{mark}{d:+.3f} [{lo:+.3f}, {hi:+.3f}]{mark}"


def setting_text(s: dict) -> str:
    return (f"block {int(s['block'])} ({s['depth']:.2f}), {s['pooling']}, {s['centring']}, "
            f"eps {s['eps']:.2g}, {int(s['clusters'])} clusters")


def auc_table(folders: list[Path], fractions=(0.25, 0.5, 0.6, 0.75, 1.0)) -> list[str]:
    lines = ["| cell | pooling | " + " | ".join(f"depth {f:.2f}" for f in fractions) + " | best (depth) | "
             "all pairs at best |", "|---|---|" + "---|" * (len(fractions) + 2)]
    for folder in folders:
        rows = [r for r in read_csv(folder / "auc.csv") if r["centring"] == "raw"]
        for pooling in ("last", "mean"):
            mine = [r for r in rows if r["pooling"] == pooling]
            at = [min(mine, key=lambda r: abs(r["depth"] - f)) for f in fractions]
            best = max(mine, key=lambda r: r["auc_distinct"])
            lines.append(f"| {folder.name} | {pooling} | "
                         + " | ".join(f"{r['auc_distinct']:.3f}" for r in at)
                         + f" | {best['auc_distinct']:.3f} ({best['depth']:.2f}) | {best['auc']:.3f} |")
    return lines


def selection_table(folders: list[Path]) -> list[str]:
    lines = ["| cell | chosen on half A for | setting | " + " | ".join(t for _, t in DIFFS)
             + " | vs one group per goal | vs size-matched random |",
             "|---|---|---|" + "---|" * (len(DIFFS) + 2)]
    for folder in folders:
        sel = json.loads((folder / "selection.json").read_text())
        rows = [(f"{name} ({c['criterion']})", c["setting"], c["on_b"], name.split("_")[0])
                for name, c in sel["chosen"].items()]
        rows.append(("paper's setting (in advance)", sel["paper"]["setting"], sel["paper"]["on_b"], "bipace"))
        for label, setting, on_b, est in rows:
            goal, rand = CONTROLS[est]
            lines.append(f"| {folder.name} | {label} | {setting_text(setting)} | "
                         + " | ".join(ci(on_b, k) for k, _ in DIFFS)
                         + f" | {est} {ci(on_b, goal[0])} | {est} {ci(on_b, rand[0])} |")
    return lines


def named_table(folders: list[Path]) -> list[str]:
    """The named BiGPO settings (chosen in advance): Pearson r of bigpo and bipace on half A (what a choice
    between them may look at) and the paired differences on half B and on all goals."""
    lines = ["| cell | setting | r on half A: bigpo, bipace | goals | " + " | ".join(t for _, t in DIFFS)
             + " | bipace - pace_goal | bigpo - gigpo_goal |",
             "|---|---|---|---|" + "---|" * (len(DIFFS) + 2)]
    for folder in folders:
        sel = json.loads((folder / "selection.json").read_text())
        for name, p in sel["named"].items():
            if "setting" not in p:
                lines.append(f"| {folder.name} | {name}: n/a ({p['reason'].split(';')[0]}) | | | |")
                continue
            a = f"{p['on_a']['r_bigpo']:.3f}, {p['on_a']['r_bipace']:.3f}"
            for which, label in (("on_b", "half B"), ("all", f"all {sel['n_goals']}")):
                lines.append(f"| {folder.name} | {name}: {setting_text(p['setting'])} | {a} | {label} | "
                             + " | ".join(ci(p[which], k) for k, _ in DIFFS)
                             + f" | {ci(p[which], 'bipace-pace_goal')} | "
                             f"{ci(p[which], 'bigpo-gigpo_goal')} |")
    return lines


def choice_table(folders: list[Path]) -> list[str]:
    """The named setting each cell's half A prefers, and its margin on half B."""
    lines = ["| cell | estimator | best named setting on half A | on half B, against the others |",
             "|---|---|---|---|"]
    for folder in folders:
        sel = json.loads((folder / "selection.json").read_text())
        for est, c in sel["named_choice"].items():
            vs = "; ".join(f"- {o}: {v['diff']:+.3f} [{v['lo']:+.3f}, {v['hi']:+.3f}]"
                           for o, v in c["versus"].items())
            lines.append(f"| {folder.name} | {est} | {c['chosen']} | {vs} |")
    return lines


def sweep_table(folder: Path, block: int, pooling: str, centring: str) -> list[str]:
    rows = [r for r in read_csv(folder / "sweep.csv")
            if int(r["block"]) == block and r["pooling"] == pooling and r["centring"] == centring]
    lines = [f"{folder.name}, block {block}, {pooling}, {centring}:", "",
             "| eps | clusters | singleton | impure (env state) | impure (truth) | bipace - pace | "
             "bipace - random | bipace - pace_goal | bigpo - gigpo | bigpo - random |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: -r["clusters"]):
        lines.append(f"| {r['eps']:.2g} | {int(r['clusters'])} | {r['singleton']:.2f} | "
                     f"{r['impure_state']:.2f} | {r['impure_truth']:.2f} | {ci(r, 'bipace-pace')} | "
                     f"{ci(r, 'bipace-bipace_random')} | {ci(r, 'bipace-pace_goal')} | "
                     f"{ci(r, 'bigpo-gigpo')} | {ci(r, 'bigpo-bigpo_random')} |")
    return lines


def beyond_counts(folders: list[Path]) -> list[str]:
    keys = ("bigpo-gigpo", "bipace-pace", "bigpo-bigpo_random", "bipace-bipace_random", "bipace-pace_goal")
    lines = ["| cell | points | " + " | ".join(f"{k} > 0 / < 0" for k in keys) + " |",
             "|---|---|" + "---|" * len(keys)]
    for folder in folders:
        rows = read_csv(folder / "sweep.csv")
        cnt = [f"{sum(r[k + '_lo'] > 0 for r in rows)} / {sum(r[k + '_hi'] < 0 for r in rows)}" for k in keys]
        lines.append(f"| {folder.name} | {len(rows)} | " + " | ".join(cnt) + " |")
    return lines


def plot_auc(folders: list[Path], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, centring in zip(axes, ("raw", "centred")):
        for c, folder in enumerate(folders):
            rows = [r for r in read_csv(folder / "auc.csv") if r["centring"] == centring]
            for pooling, style in (("last", "-"), ("mean", "--")):
                mine = sorted((r for r in rows if r["pooling"] == pooling), key=lambda r: r["depth"])
                ax.plot([r["depth"] for r in mine], [r["auc_distinct"] for r in mine], style,
                        color=colours[c % len(colours)], label=f"{folder.name} {pooling}")
        ax.axvline(17 / 28, color="grey", lw=0.8, ls=":")
        ax.axhline(0.5, color="grey", lw=0.8)
        ax.set_title(f"{centring} states (dotted: the paper's depth)")
        ax.set_xlabel("relative depth of the block")
    axes[0].set_ylabel("AUC, same vs different env state\n(pairs of distinct prompts, same goal)")
    axes[1].legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("root", type=Path, help="--out folder of hidden_sweep.py")
    p.add_argument("--png", type=Path, default=None, help="AUC figure (default: ROOT/auc.png)")
    args = p.parse_args(argv)
    try:
        folders = cells(args.root)
    except FileNotFoundError as exc:
        p.error(str(exc))
    plot_auc(folders, args.png or args.root / "auc.png")
    out = ["### AUC by depth (raw states)", "", *auc_table(folders), "",
           "### Settings chosen on half A, scored on half B", "", *selection_table(folders), "",
           "### The named settings: the paper's and the anchor-calibrated", "", *named_table(folders), "",
           "### Which named setting a preset should take (chosen on half A, scored on half B)", "",
           *choice_table(folders), "",
           "### Sweep points beyond their intervals", "", *beyond_counts(folders), ""]
    for folder in folders:
        sel = json.loads((folder / "selection.json").read_text())
        out += [*sweep_table(folder, int(sel["paper"]["setting"]["block"]), "last", "raw"), ""]
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
