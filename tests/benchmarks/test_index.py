"""benchmarks/ as a package a user can find their way in: every script the index names exists and runs as
``python -m benchmarks.NAME``, and importing one leaves ``sys.path`` alone."""
import importlib
import re
import sys

from tests.conftest import REPO_ROOT

BENCH = REPO_ROOT / "benchmarks"


def test_the_index_names_every_script_and_only_scripts_that_exist():
    index = (BENCH / "README.md").read_text()
    named = set(re.findall(r"`(\w+\.(?:py|sh))`", index))
    scripts = {p.name for p in BENCH.glob("*.py") if p.name != "__init__.py" and "__main__" in p.read_text()}
    assert scripts <= named, f"scripts missing from benchmarks/README.md: {sorted(scripts - named)}"
    missing = {n for n in named if not (BENCH / n).exists()}
    assert not missing


def test_every_module_imports_as_part_of_the_package_without_editing_sys_path():
    before = list(sys.path)
    for path in sorted(BENCH.glob("*.py")):
        importlib.import_module(f"benchmarks.{path.stem}")
        assert "sys.path.insert" not in path.read_text() and sys.path == before, path.name
