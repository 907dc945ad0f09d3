"""Every third-party module our packages import is declared: in ``install_requires``, or in an extra a user
installs for the feature that needs it (not only in ``test`` or ``all``, which no feature's path names).

The imports are read from the source (AST), lazy ones inside functions included; an import inside a
``try`` whose handler catches ImportError has a fallback and needs no declaration. The requirements are
the installed distribution's own (``importlib.metadata``), so the check sees what ``pip install`` sees."""
from __future__ import annotations

import ast
import functools
import importlib.metadata as md
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("bipace_envs", "agents", "estimators", "benchmarks")
EXTRAS_FOR_NO_FEATURE = {"test", "all"}
# import name -> distribution, for modules whose distribution is not installed here to tell us (the verl
# extra lives in its own environment); installed ones are looked up in importlib.metadata
NOT_INSTALLED_HERE = {"hydra": "hydra-core", "transfer_queue": "TransferQueue", "yaml": "PyYAML",
                      "Stemmer": "PyStemmer", "fast_downward": "fast-downward-textworld"}


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _guarded(node: ast.Try) -> bool:
    """Does this try have a handler for a missing module?"""
    names = set()
    for h in node.handlers:
        for t in (h.type.elts if isinstance(h.type, ast.Tuple) else [h.type]) if h.type else []:
            names.add(getattr(t, "id", getattr(t, "attr", "")))
    return bool(names & {"ImportError", "ModuleNotFoundError"})


def imports(path: Path, own: set[str]) -> list[tuple[str, int]]:
    """(top-level module, line) of every absolute import of a third-party module in ``path`` that no
    ImportError handler guards."""
    found = []

    def visit(node, guarded: bool):
        if isinstance(node, ast.Try):
            for child in node.body:
                visit(child, guarded or _guarded(node))
            for child in node.handlers + node.orelse + node.finalbody:
                visit(child, guarded)
            return
        if not guarded:
            if isinstance(node, ast.Import):
                found.extend((a.name.split(".")[0], node.lineno) for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.append((node.module.split(".")[0], node.lineno))
        for child in ast.iter_child_nodes(node):
            visit(child, guarded)

    visit(ast.parse(path.read_text(), str(path)), False)
    return [(m, line) for m, line in found if m not in sys.stdlib_module_names and m not in own]


def declared(requirements: list[str]) -> dict[str, set[str]]:
    """Normalised distribution name -> where it is declared ('' for install_requires, else the extras)."""
    out: dict[str, set[str]] = {}
    for req in requirements:
        name = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req).group(1)
        extra = re.search(r"""extra\s*==\s*["']([^"']+)["']""", req)
        out.setdefault(normalise(name), set()).add(extra.group(1) if extra else "")
    return out


@functools.lru_cache(maxsize=None)
def _installed() -> dict:
    return md.packages_distributions()


def distribution_of(module: str) -> str:
    found = _installed().get(module)
    return normalise(found[0] if found else NOT_INSTALLED_HERE.get(module, module))


def undeclared_imports(root: Path, packages, requirements: list[str]) -> list[str]:
    """``file:line module (distribution)`` for every import no requirement or feature extra declares."""
    where = declared(requirements)
    problems = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            for module, line in imports(path, set(packages)):
                dist = distribution_of(module)
                if not where.get(dist, set()) - EXTRAS_FOR_NO_FEATURE:
                    extras = sorted(where.get(dist, ()))
                    where_said = f", only in extras {extras}" if extras else ", declared nowhere"
                    problems.append(f"{path.relative_to(root)}:{line} imports {module} (distribution {dist}"
                                    f"{where_said})")
    return problems


def test_every_import_of_the_packages_is_declared():
    problems = undeclared_imports(ROOT, PACKAGES, md.requires("bipace") or [])
    assert not problems, ("declare these in setup.cfg's install_requires or the extra of the feature that "
                          "needs them, then reinstall:\n" + "\n".join(problems))


def test_a_planted_undeclared_import_is_caught(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("import os\nimport numpy as np\nfrom . import sub\n"
                                     "from pkg import sub\n")
    (pkg / "sub" / "__init__.py").write_text(
        "def score(a, b):\n    from scipy.stats import kendalltau\n    return kendalltau(a, b)\n\n"
        "try:\n    import psutil\nexcept ImportError:\n    psutil = None\n\n"
        "import matplotlib.pyplot as plt\nimport hypothesis\n")
    requirements = ["numpy>=1.26", 'matplotlib>=3.8; extra == "bench"', 'hypothesis>=6; extra == "test"']
    problems = undeclared_imports(tmp_path, ["pkg"], requirements)
    assert problems == ["pkg/sub/__init__.py:2 imports scipy (distribution scipy, declared nowhere)",
                        "pkg/sub/__init__.py:11 imports hypothesis (distribution hypothesis, only in extras "
                        "['test'])"]
    assert not undeclared_imports(tmp_path, ["pkg"], requirements + ["scipy", "hypothesis"])


def test_the_installed_requirements_are_this_checkout_s():
    """The check reads the installed metadata: it must be this checkout's setup.cfg, not a stale install."""
    import configparser
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    wanted = {normalise(re.match(r"[A-Za-z0-9._-]+", line.strip()).group(0))
              for line in cfg["options"]["install_requires"].splitlines()
              if line.strip() and not line.strip().startswith("#")}
    installed = {d for d, where in declared(md.requires("bipace") or []).items() if "" in where}
    if wanted != installed:
        pytest.fail(f"the installed bipace declares {sorted(installed)}, setup.cfg {sorted(wanted)}: "
                    "reinstall with pip install -e '.[test]'")
