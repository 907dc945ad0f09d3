"""Without the [verl] extra, importing the bridge says what to install (runs with and without verl: a
child process where ``import verl`` fails the way it does without the extra)."""
from __future__ import annotations

import subprocess
import sys

CHILD = """
import sys
sys.modules["verl"] = None          # what `import verl` meets without the extra: ImportError
try:
    import agents.verl_bridge.main  # noqa: F401
except ImportError as exc:
    print(exc)
else:
    raise SystemExit("imported without verl")
"""


def test_missing_verl_names_the_extra():
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert 'pip install -e ".[verl]"' in out.stdout and "verl 0.9.1" in out.stdout
