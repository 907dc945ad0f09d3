"""`benchmarks.credit.user_estimator`: a user's ``package.module:function`` scored like a built-in one."""
from __future__ import annotations

import sys
import textwrap
import uuid

import numpy as np
import pytest

from benchmarks.credit.score_inputs import estimator_advantages
from benchmarks.credit.user_estimator import load_user_estimator
from estimators import REGISTRY, StepBatch, compute_advantages, step_returns
from estimators.registry import resolve_options

EXAMPLE = "benchmarks.credit.example_estimator:step_mean_baseline"


@pytest.fixture(autouse=True)
def clean_registry(monkeypatch):
    """Every REGISTRY entry, module and sys.path entry a test adds is gone afterwards."""
    names, modules = set(REGISTRY), set(sys.modules)
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield
    for name in set(REGISTRY) - names:
        del REGISTRY[name]
    for name in set(sys.modules) - modules:
        if name.startswith("user_est_"):
            del sys.modules[name]


def user_module(folder, body: str) -> str:
    """Write ``body`` as a fresh module in ``folder``; its (unique) name."""
    name = f"user_est_{uuid.uuid4().hex[:12]}"
    (folder / f"{name}.py").write_text(textwrap.dedent(body))
    return name


@pytest.fixture
def on_path(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def small_batch(**fields) -> StepBatch:
    """2 rollout groups x 3 trajectories, 2-3 steps each, anchors repeating within and across trajectories
    (rows deliberately not in trajectory order)."""
    trajs = [(0, [("s0", 0), ("s1", 0), ("s2", 10)]), (0, [("s0", 0), ("s1", 0), ("s1", 0)]),
             (0, [("s0", 0), ("s2", 10)]), (1, [("s0", 0), ("s1", 10)]),
             (1, [("s0", 0), ("s0", 0), ("s1", 0)]), (1, [("s1", 0), ("s1", 10)])]
    rows = [(g, t, s, a, r) for t, (g, steps) in enumerate(trajs) for s, (a, r) in enumerate(steps)]
    rows = rows[::2] + rows[1::2]
    g, t, s, a, r = (np.array(c) for c in zip(*rows))
    valid = np.ones(len(g), bool)
    valid[3] = False
    base = dict(anchor=a.astype(object))
    base.update(fields)
    return StepBatch(g, t, s, r.astype(float), valid, **base)


GRPO_AGAIN = """
    from estimators import compute_advantages

    def grpo_again(batch, options):
        return compute_advantages(batch, "grpo", mode=options.mode, gamma=options.gamma)

    grpo_again.default_mode = "mean_std_norm"
"""


def test_a_user_estimator_runs_like_the_built_in_it_wraps(on_path):
    spec = f"{user_module(on_path, GRPO_AGAIN)}:grpo_again"
    assert load_user_estimator(spec) == spec
    assert REGISTRY[spec].default_mode == "mean_std_norm" and REGISTRY[spec].needs == ()
    batch = small_batch()
    grpo = compute_advantages(batch, "grpo")
    assert np.abs(grpo).max() > 0.5
    np.testing.assert_allclose(compute_advantages(batch, spec), grpo)
    own = estimator_advantages(batch, {}, [spec])
    np.testing.assert_allclose(own[spec].adv, grpo)
    assert own[spec].codes is None and own[spec].reason == ""
    common = estimator_advantages(batch, {}, [spec], mode="mean_norm")[spec].adv
    np.testing.assert_allclose(common, compute_advantages(batch, "grpo", mode="mean_norm"))
    assert not np.allclose(common, grpo)
    # loading it again is harmless and keeps one entry
    assert load_user_estimator(spec) == spec
    assert sum(name == spec for name in REGISTRY) == 1
    np.testing.assert_allclose(compute_advantages(batch, spec), grpo)


def test_a_module_in_the_current_directory_is_found(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert str(tmp_path) not in sys.path
    name = user_module(tmp_path, "def const(batch, options):\n    return [3.0] * len(batch)\n")
    spec = load_user_estimator(f"{name}:const")
    assert str(tmp_path) in sys.path
    out = compute_advantages(small_batch(), spec)
    assert out.dtype == float and np.array_equal(out, np.full(len(small_batch()), 3.0))


@pytest.mark.parametrize("body, pattern", [                  # small_batch() has 15 rows
    ("return np.zeros(len(batch) + 1)", r"returned shape \(16,\).*expected \(15,\)"),
    ("return np.zeros((len(batch), 1))", r"returned shape \(15, 1\).*expected \(15,\)"),
    ("return None", r"returned shape \(\) \(NoneType\)"),
    ("a = np.zeros(len(batch))\n    a[[2, 5]] = np.nan\n    a[9] = np.inf\n    return a",
     r"returned 3 non-finite advantage\(s\) of 15 \(first rows \[2, 5, 9\]"),
    ("return ['x'] * len(batch)", r"returned a list that is not an array of numbers"),
], ids=["one_row_too_many", "column", "none", "nan_and_inf", "strings"])
def test_a_bad_result_is_an_error_naming_the_estimator(on_path, body, pattern):
    name = user_module(on_path, f"import numpy as np\ndef f(batch, options):\n    {body}\n")
    spec = load_user_estimator(f"{name}:f")
    with pytest.raises(ValueError, match=f"estimator '{spec}' " + pattern):
        compute_advantages(small_batch(), spec)


def test_an_exception_inside_the_user_function_propagates_with_a_note(on_path):
    name = user_module(on_path, """
        def f(batch, options):
            raise KeyError("no such column")
    """)
    spec = load_user_estimator(f"{name}:f")
    with pytest.raises(KeyError, match="no such column") as info:
        compute_advantages(small_batch(), spec)
    assert info.value.__notes__ == [f"raised inside the user estimator {spec!r}"]


@pytest.mark.parametrize("spec", ["my_est", "my_est:f:g", ":f", "my_est:", " : ", ""])
def test_a_spec_needs_one_colon_and_two_sides(spec):
    with pytest.raises(ValueError, match="bad estimator spec .*'package.module:function'") as info:
        load_user_estimator(spec)
    assert repr(spec) in str(info.value)


def test_a_built_in_name_is_refused(monkeypatch):
    grpo = REGISTRY["grpo"]
    with pytest.raises(ValueError, match="'grpo' is a built-in estimator"):
        load_user_estimator("grpo")
    assert REGISTRY["grpo"] is grpo
    monkeypatch.setitem(REGISTRY, "estimators.registry:grpo", grpo)     # a built-in under a spec-like name
    with pytest.raises(ValueError, match="'estimators.registry:grpo' is a built-in estimator's name"):
        load_user_estimator("estimators.registry:grpo")
    assert REGISTRY["estimators.registry:grpo"] is grpo


def test_a_module_that_cannot_be_imported_is_named(on_path):
    with pytest.raises(ValueError, match="cannot import module 'no_such_pkg_x.est'.*no module named "
                                         "'no_such_pkg_x'.*current directory .* or installed"):
        load_user_estimator("no_such_pkg_x.est:f")
    name = user_module(on_path, "import not_installed_dep_x\ndef f(batch, options):\n    return 0\n")
    with pytest.raises(ValueError, match=f"'{name}' was found but failed to import.*not_installed_dep"):
        load_user_estimator(f"{name}:f")
    assert f"{name}:f" not in REGISTRY


def test_a_missing_or_uncallable_attribute_is_named(on_path):
    name = user_module(on_path, "def helper(batch, options):\n    return 0\nx = 3\n")
    with pytest.raises(ValueError, match=rf"'{name}:nope'.*no attribute 'nope'; its functions: \['helper'\]"):
        load_user_estimator(f"{name}:nope")
    with pytest.raises(ValueError, match=rf"'{name}:x'.*{name}\.x is a int, not a function"):
        load_user_estimator(f"{name}:x")
    assert not any(n.startswith(name) for n in REGISTRY)


@pytest.mark.parametrize("attrs, pattern", [
    ("f.needs = ('anchors',)", r"needs names \['anchors'\], which StepBatch does not have"),
    ("f.needs = 'anchor'", r"needs must be a tuple of StepBatch field names.*got 'anchor'"),
    ("f.default_mode = 'std'", r"default_mode must be one of .*got 'std'"),
], ids=["unknown_field", "bare_string", "unknown_mode"])
def test_bad_attributes_are_refused(on_path, attrs, pattern):
    name = user_module(on_path, f"def f(batch, options):\n    return 0\n{attrs}\n")
    with pytest.raises(ValueError, match=rf"estimator '{name}:f': " + pattern):
        load_user_estimator(f"{name}:f")
    assert f"{name}:f" not in REGISTRY


def test_a_function_of_the_wrong_arity_is_refused(on_path):
    name = user_module(on_path, "def f(batch):\n    return 0\n")
    with pytest.raises(ValueError, match=rf"'{name}:f'.*two positional arguments \(batch, options\); its "
                                         r"signature is \(batch\)"):
        load_user_estimator(f"{name}:f")


def test_needs_is_honoured(on_path):
    name = user_module(on_path, """
        def f(batch, options):
            raise AssertionError("must not run without embeddings")
        f.needs = ("embedding",)
    """)
    spec = load_user_estimator(f"{name}:f")
    assert REGISTRY[spec].needs == ("embedding",)
    batch = small_batch()
    with pytest.raises(ValueError, match=rf"estimator '{spec}' needs StepBatch.embedding, which is None"):
        compute_advantages(batch, spec)
    own = estimator_advantages(batch, {}, [spec])[spec]
    assert own.adv is None and "StepBatch.embedding" in own.reason
    with_emb = small_batch(embedding=np.ones((len(batch), 2)))
    with pytest.raises(AssertionError, match="must not run"):
        compute_advantages(with_emb, spec)


def test_the_example_estimator(monkeypatch):
    spec = load_user_estimator(EXAMPLE)
    assert spec == EXAMPLE and REGISTRY[spec].needs == ("anchor",)
    batch = small_batch()
    adv = compute_advantages(batch, spec, gamma=0.9)
    assert adv.shape == (len(batch),) and np.all(np.isfinite(adv))
    # by hand: R_t minus the mean R of the rows sharing (rollout group, anchor)
    returns = step_returns(batch, resolve_options("grpo", gamma=0.9))
    key = list(zip(batch.group_id.tolist(), batch.anchor.tolist()))
    want = [returns[i] - np.mean([returns[j] for j in range(len(batch)) if key[j] == key[i]])
            for i in range(len(batch))]
    np.testing.assert_allclose(adv, want, atol=1e-12)
    assert np.abs(adv).max() > 1
    assert not np.allclose(adv, compute_advantages(batch, "grpo", gamma=0.9))
    assert not np.allclose(adv, compute_advantages(batch, "grpo", gamma=0.9, mode="mean_norm"))
    with pytest.raises(ValueError, match="needs StepBatch.anchor"):
        compute_advantages(small_batch(anchor=None), spec)


def test_the_readme_example_loads_by_its_spec_and_scores(tmp_path, monkeypatch):
    """The README's ``my_est.py`` block and its ``--estimator my_est:...`` command, as written."""
    import re
    import shlex
    from tests.conftest import REPO_ROOT
    readme = (REPO_ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.+?)\n```", readme, flags=re.S)
    block = next(b for b in blocks if b.startswith("# my_est.py"))
    command = next(ln for ln in readme.splitlines() if "--estimator my_est:" in ln)
    spec = shlex.split(command)[shlex.split(command).index("--estimator") + 1]
    from benchmarks.credit.advantage_accuracy import build_parser
    assert build_parser().parse_args(shlex.split(command)[3:]).estimator == [spec]
    (tmp_path / "my_est.py").write_text(block + "\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "my_est", raising=False)
    assert load_user_estimator(spec) == spec
    batch = small_batch()
    np.testing.assert_allclose(compute_advantages(batch, spec, gamma=0.9),
                               step_returns(batch, resolve_options("grpo", gamma=0.9)))
    sys.modules.pop("my_est", None)
