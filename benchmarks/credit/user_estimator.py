"""Score your own advantage estimator in the credit benchmark: ``--estimator package.module:function``.

    # my_est.py, next to where you run the benchmark
    import numpy as np
    def my_adv(batch, options):                  # batch: StepBatch, options: EstimatorOptions
        return np.zeros(len(batch))              # one advantage per step row
    my_adv.needs = ("anchor",)                   # optional: StepBatch fields it reads
    # python -m benchmarks.credit.advantage_accuracy --cell webshop-eps0.3 --out runs/ws \
    #     --estimator my_est:my_adv

Contract (the same as every built-in estimator's, see ``estimators.registry``):
``fn(batch: StepBatch, options: EstimatorOptions) -> array of shape (N,)``, N = len(batch), one finite
advantage per row in the batch's row order. Optional function attributes: ``fn.needs``, a tuple of the
optional StepBatch fields it reads (e.g. ``("anchor",)``; a batch without one is reported, not run) and
``fn.default_mode``, its own normalisation ("mean_norm", the default, or "mean_std_norm"; the benchmark
also calls it with ``options.mode = "mean_norm"``). ``load_user_estimator`` registers the function under
the spec itself, so ``compute_advantages(batch, "my_est:my_adv")`` runs it, and checks what it returns.
``benchmarks/credit/example_estimator.py`` is a worked example to copy.
"""
from __future__ import annotations

import functools
import importlib
import inspect
import os
import sys
from dataclasses import fields

import numpy as np

from estimators.batch import StepBatch
from estimators.registry import REGISTRY, register
from estimators.returns import MODES

# StepBatch fields an estimator may name in `needs` (its dataclass fields, less the private caches)
BATCH_FIELDS = tuple(f.name for f in fields(StepBatch) if not f.name.startswith("_"))


def load_user_estimator(spec: str) -> str:
    """Import ``package.module:function``, register it in ``estimators.REGISTRY`` under ``spec`` (checked
    on every call: shape (N,), finite values) and return that name. Loading a spec again is harmless."""
    module_name, fn_name = _parse(spec)
    current = REGISTRY.get(spec)
    if current is not None and getattr(current.fn, "user_estimator_spec", None) != spec:
        raise ValueError(f"{spec!r} is a built-in estimator's name; a user estimator needs its own")
    cwd = os.getcwd()
    if cwd not in sys.path:              # a user's my_est.py next to where they run (appended, so it
        sys.path.append(cwd)             # shadows no installed module)
    importlib.invalidate_caches()        # a file written after start-up is found too
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise ValueError(f"estimator {spec!r}: cannot import module {module_name!r} (no module named "
                             f"{exc.name!r}); it must be importable from the current directory ({cwd}) or "
                             "installed") from exc
        raise ValueError(f"estimator {spec!r}: module {module_name!r} was found but failed to import: "
                         f"{exc}; install what it imports") from exc
    except ImportError as exc:
        raise ValueError(f"estimator {spec!r}: module {module_name!r} failed to import: {exc}") from exc
    if not hasattr(module, fn_name):
        found = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_")
                       and getattr(v, "__module__", None) == module_name)
        raise ValueError(f"estimator {spec!r}: module {module_name!r} has no attribute {fn_name!r}; its "
                         f"functions: {found}. Name one of them after the ':'")
    fn = getattr(module, fn_name)
    if not callable(fn):
        raise ValueError(f"estimator {spec!r}: {module_name}.{fn_name} is a {type(fn).__name__}, not a "
                         "function; point the spec at a function fn(batch, options)")
    _check_signature(spec, fn)
    needs, default_mode = _attributes(spec, fn)
    register(spec, needs=needs, default_mode=default_mode)(_checked(spec, fn))
    return spec


def _parse(spec: str) -> tuple[str, str]:
    if isinstance(spec, str) and spec in REGISTRY and ":" not in spec:
        raise ValueError(f"{spec!r} is a built-in estimator; choose it with --estimators, not as a user "
                         "estimator (spec 'package.module:function')")
    parts = spec.split(":") if isinstance(spec, str) else []
    if len(parts) != 2 or not parts[0].strip() or not parts[1].strip():
        raise ValueError(f"bad estimator spec {spec!r}: expected 'package.module:function' with exactly one "
                         "':' and both sides non-empty, e.g. 'my_est:my_adv' for my_adv in ./my_est.py")
    return parts[0].strip(), parts[1].strip()


def _check_signature(spec: str, fn) -> None:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):       # some builtins have none: leave it to the call
        return
    try:
        sig.bind(None, None)
    except TypeError as exc:
        raise ValueError(f"estimator {spec!r}: the function must take two positional arguments "
                         f"(batch, options); its signature is {sig} ({exc})") from None


def _attributes(spec: str, fn) -> tuple[tuple, str]:
    needs = getattr(fn, "needs", ())
    if isinstance(needs, str) or not all(isinstance(n, str) for n in needs):
        raise ValueError(f"estimator {spec!r}: needs must be a tuple of StepBatch field names, e.g. "
                         f"('anchor',); got {needs!r}")
    unknown = [n for n in needs if n not in BATCH_FIELDS]
    if unknown:
        raise ValueError(f"estimator {spec!r}: needs names {unknown}, which StepBatch does not have; its "
                         f"fields are {list(BATCH_FIELDS)}")
    default_mode = getattr(fn, "default_mode", "mean_norm")
    if default_mode not in MODES:
        raise ValueError(f"estimator {spec!r}: default_mode must be one of {MODES}; got {default_mode!r}")
    return tuple(needs), default_mode


def _checked(spec: str, fn):
    """The registered function: calls the user's and checks what it returns."""
    @functools.wraps(fn)
    def run(batch, options):
        try:
            out = fn(batch, options)
        except Exception as exc:
            if hasattr(exc, "add_note"):            # Python >= 3.11
                exc.add_note(f"raised inside the user estimator {spec!r}")
            raise
        try:
            adv = np.asarray(out, dtype=float)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"estimator {spec!r} returned a {type(out).__name__} that is not an array of "
                             f"numbers ({exc}); return one float advantage per row") from None
        n = len(batch)
        if adv.shape != (n,):
            raise ValueError(f"estimator {spec!r} returned shape {adv.shape} ({type(out).__name__}); "
                             f"expected ({n},), one advantage per StepBatch row")
        bad = np.flatnonzero(~np.isfinite(adv))
        if bad.size:
            raise ValueError(f"estimator {spec!r} returned {bad.size} non-finite advantage(s) of {n} (first "
                             f"rows {bad[:5].tolist()}: {adv[bad[:5]].tolist()}); return finite values")
        return adv
    run.user_estimator_spec = spec
    return run
