"""Environment speed: our env against the reference engine, side by side in one run.

    python -m benchmarks.env_speed textcraft [--steps N]
    python -m benchmarks.env_speed webshop
    python -m benchmarks.env_speed alfworld

Each env has its own module ``benchmarks/env_speed_<name>.py`` exposing ``add_arguments(parser)``
and ``run(args)``; this file only dispatches, so the registry below is the one place to add one.
"""
from __future__ import annotations

import argparse
import importlib
import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

BENCHMARKS = {
    "textcraft": "benchmarks.env_speed_textcraft",
    "webshop": "benchmarks.env_speed_webshop",
    "alfworld": "benchmarks.env_speed_alfworld",
}


def main(argv=None) -> None:
    # Import only the chosen env's module: the others may need optional extras.
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("env", choices=sorted(BENCHMARKS), help="which environment to benchmark")
    known, rest = parser.parse_known_args(argv)
    module = importlib.import_module(BENCHMARKS[known.env])
    env_parser = argparse.ArgumentParser(prog=f"env_speed.py {known.env}", description=module.__doc__)
    module.add_arguments(env_parser)
    args = env_parser.parse_args(rest)
    args.env = known.env
    module.run(args)


if __name__ == "__main__":
    main()
