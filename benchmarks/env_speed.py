"""Environment speed: our env against the reference engine, side by side in one run.

    python benchmarks/env_speed.py textcraft [--steps N]
    python benchmarks/env_speed.py webshop
    python benchmarks/env_speed.py alfworld

Each env has its own module ``benchmarks/env_speed_<name>.py`` exposing ``add_arguments(parser)``
and ``run(args)``; this file only dispatches, so the registry below is the one place to add one.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

BENCHMARKS = {
    "textcraft": "benchmarks.env_speed_textcraft",
    "webshop": "benchmarks.env_speed_webshop",
    "alfworld": "benchmarks.env_speed_alfworld",
}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="env", required=True)
    for name, module_name in BENCHMARKS.items():
        module = importlib.import_module(module_name)
        module.add_arguments(sub.add_parser(name, help=(module.__doc__ or "").strip().splitlines()[0]))
    args = parser.parse_args(argv)
    importlib.import_module(BENCHMARKS[args.env]).run(args)


if __name__ == "__main__":
    main()
