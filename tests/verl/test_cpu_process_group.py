"""Where verl 0.9.1 itself stops on a CPU: its worker process-group setup. Unpatched, verl's own
``initialize_global_process_group_ray`` (verl/utils/distributed.py) builds the backend string
``cpu:gloo,cpu:gloo`` on the CPU platform and torch refuses it; the CPU test backend's one replacement
(``agents.verl_bridge.cpu_backend``) passes ``cpu:gloo`` to the same function. The end-to-end test runs
past this point only through that replacement (docs/verl.md)."""
import os
import socket
import subprocess
import sys

import pytest

pytest.importorskip("verl")

SCRIPT = """
import torch.distributed as dist
from agents.verl_bridge import cpu_backend
try:
    cpu_backend._verl_init_process_group(timeout_second=30)      # verl's own function, as verl calls it
    print("VERL OK", dist.get_backend())
except ValueError as exc:
    print("VERL REFUSED:", exc)
cpu_backend._init_process_group_on_cpu(timeout_second=30)         # the CPU backend's replacement
print("REPLACEMENT OK", dist.get_backend(), dist.get_world_size())
dist.destroy_process_group()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_verl_cannot_form_a_cpu_process_group_and_the_replacement_can():
    env = dict(os.environ, VERL_PLATFORM="cpu", VERL_USE_EXTERNAL_MODULES="agents.verl_bridge.cpu_backend",
               RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "VERL REFUSED:" in out.stdout and "Duplicate device type cpu" in out.stdout, out.stdout
    assert "REPLACEMENT OK cpu:gloo 1" in out.stdout, out.stdout
