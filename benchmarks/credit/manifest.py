"""What shaped a benchmark folder's files, kept in its ``manifest.json``, so that a rerun into the same
folder continues only with the same settings.

    check_manifest(out, {"tasks": 12, "policy": fingerprint("runs/warm"), ...}, kept=["batch.pkl", ...])

The first run writes the manifest; a later one with any other value stops with ``ManifestMismatch``,
naming every differing key with both values, but for keys the caller lets grow (the truth's K: a rerun
with more continuations per state keeps those played and adds the rest), whose history the manifest
keeps. A folder that holds kept files but no manifest (made by an older version) is refused too: nothing
says what made those files.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path


class ManifestMismatch(ValueError):
    """A rerun's settings differ from those that made the folder's files."""


def fingerprint(policy: str) -> str:
    """A model folder's content hash (every file's name and bytes; weights included, so a retrained policy
    at the same path differs); a model name that is not a path is itself."""
    path = Path(policy)
    if not path.exists():
        return policy
    h = hashlib.sha1()
    for f in sorted(p for p in ([path] if path.is_file() else path.rglob("*")) if p.is_file()):
        h.update(str(f.relative_to(path if path.is_dir() else path.parent)).encode())
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 22), b""):
                h.update(block)
    return h.hexdigest()


def _plain(settings: dict) -> dict:
    return json.loads(json.dumps(settings, sort_keys=True, default=str))


GROWN = "grown"      # the manifest's record of settings that grew on a rerun: {key: [first, ..., now]}


def check_manifest(out: Path, settings: dict, kept: list[str], may_grow: tuple = ()) -> None:
    """Write ``out/manifest.json`` on a first run; on a rerun stop if any setting differs, except that a
    numeric setting named in ``may_grow`` may increase (it is then updated, and its history kept under
    ``"grown"``): a setting whose kept files stay valid when it grows, such as the truth's K."""
    out, settings = Path(out), _plain(settings)
    path = out / "manifest.json"
    if path.exists():
        before = json.loads(path.read_text())
        history = before.pop(GROWN, {})
        grew = {k for k in may_grow if isinstance(before.get(k), (int, float))
                and isinstance(settings.get(k), (int, float)) and settings[k] > before[k]}
        diff = sorted(k for k in set(before) | set(settings)
                      if before.get(k) != settings.get(k) and k not in grew)
        if not diff and grew:
            for k in sorted(grew):
                history[k] = history.get(k, [before[k]]) + [settings[k]]
            path.write_text(json.dumps({**settings, GROWN: history}, indent=1, sort_keys=True) + "\n")
            return
        if diff:
            shown = "; ".join(f"{k}: {before.get(k)!r} there, {settings.get(k)!r} now" for k in diff)
            raise ManifestMismatch(f"{out} was made with other settings ({shown}); rerun with the settings "
                                   "it was made with to continue it, or choose a new --out")
        return
    found = [name for name in kept if (out / name).exists()]
    if found:
        raise ManifestMismatch(f"{out} holds {', '.join(found)} but no manifest.json saying what made them; "
                               "choose a new --out (or delete the folder to start it again)")
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(settings, indent=1, sort_keys=True) + "\n")
