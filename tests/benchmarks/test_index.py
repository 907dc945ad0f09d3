"""benchmarks/ as a package a user can find their way in: its folders are the index's questions, every
script the index names exists and answers ``python -m benchmarks.<folder>.<script> --help``, and
importing one leaves ``sys.path`` alone."""
import importlib
import os
import re
import runpy
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT

BENCH = REPO_ROOT / "benchmarks"
QUESTIONS = ("credit", "learning", "speed")


def index() -> str:
    return (BENCH / "README.md").read_text()


def index_files() -> set[str]:
    """Every ``folder/file.py`` or ``.sh`` the index names, relative to benchmarks/."""
    return {n for n in re.findall(r"`(\w+/\w+\.(?:py|sh))`", index()) if n.split("/")[0] in QUESTIONS}


def scripts_on_disk() -> set[str]:
    return {str(p.relative_to(BENCH)) for p in BENCH.rglob("*.py")
            if p.name != "__init__.py" and "__main__" in p.read_text()}


def test_the_index_names_every_script_and_only_files_that_exist():
    named = index_files()
    missing = sorted(scripts_on_disk() - named)
    assert not missing, f"scripts missing from benchmarks/README.md: {missing}"
    assert not {n for n in named if not (BENCH / n).exists()}
    assert {n.split("/")[0] for n in named} == set(QUESTIONS)


def test_the_folders_are_the_index_sections_and_say_what_they_answer():
    sections = re.findall(r"^## `(\w+)/`: (.+)$", index(), flags=re.M)
    assert [name for name, _ in sections] == list(QUESTIONS)
    for name in QUESTIONS:
        doc = importlib.import_module(f"benchmarks.{name}").__doc__ or ""
        assert "?" in doc.splitlines()[0], f"benchmarks/{name}/__init__.py should open with its question"
        assert f"benchmarks.{name}." in doc or f"benchmarks/{name}/" in doc, name
    # no script at the top: only the shared helpers live there
    top = [p.name for p in BENCH.glob("*.py") if "__main__" in p.read_text()]
    assert not top, f"scripts belong in a question's folder: {top}"


def test_every_module_imports_as_part_of_the_package_without_editing_sys_path():
    before = list(sys.path)
    for path in sorted(BENCH.rglob("*.py")):
        name = ".".join(path.relative_to(REPO_ROOT).with_suffix("").parts).removesuffix(".__init__")
        importlib.import_module(name)
        assert "sys.path.insert" not in path.read_text() and sys.path == before, name


@pytest.mark.parametrize("script", sorted(n for n in index_files() if n.endswith(".py")
                                          and "__main__" in (BENCH / n).read_text()))
def test_every_script_of_the_index_answers_help(script, capsys, monkeypatch):
    # the file run as __main__, as ``python -m benchmarks.<folder>.<script>`` runs it (the import test
    # above shows each module path resolves); in this process, so 20-odd scripts cost a second, not minutes
    monkeypatch.setattr(sys, "argv", [script, "--help"])
    environ = dict(os.environ)        # some scripts set thread variables at import for their own process
    try:
        with pytest.raises(SystemExit) as stop:
            runpy.run_path(str(BENCH / script), run_name="__main__")
    finally:
        os.environ.clear()
        os.environ.update(environ)
    assert stop.value.code in (0, None)
    assert "usage:" in capsys.readouterr().out


def test_a_script_runs_as_a_module_from_the_repository_root():
    out = subprocess.run([sys.executable, "-m", "benchmarks.speed.env_speed", "textcraft", "--help"],
                         cwd=REPO_ROOT, capture_output=True, text=True, check=True).stdout
    assert "usage: python -m benchmarks.speed.env_speed textcraft" in out and "--episodes" in out


def test_the_gpu_script_parses_and_runs_from_the_repository_root():
    script = BENCH / "speed" / "gpu_check.sh"
    subprocess.run(["bash", "-n", str(script)], check=True)
    assert 'cd "$(dirname "$0")/../.."' in script.read_text()
