"""verl 0.9.1 on a CPU: a ``cpu`` platform and an ``hf`` rollout (transformers ``generate``), for smoke runs.

    VERL_USE_EXTERNAL_MODULES=agents.verl_bridge.cpu_backend VERL_PLATFORM=cpu \\
    python -m agents.verl_bridge.main ... actor_rollout_ref.rollout.name=hf trainer.device=cpu \\
        +ray_kwargs.ray_init.num_gpus=1 ...                      # see tests/verl/test_end_to_end_on_cpu.py

Both go in through verl's own extension points, loaded in every process that imports verl
(``VERL_USE_EXTERNAL_MODULES``, read by ``verl/__init__.py``): ``PlatformRegistry.register`` (how verl
adds hardware: ``verl/plugin/platform``) and the rollout registries (``RolloutReplicaRegistry.register``
and ``_ROLLOUT_REGISTRY``, how verl registers vllm/sglang/trtllm: ``verl/workers/rollout``). Nothing of
verl's trainer, workers, agent loop or TransferQueue is replaced.

- ``PlatformCPU``: device ``cpu``, collective backend ``gloo``; its Ray resource stays ``GPU`` because
  verl's resource pool counts ``GPU`` per node (``RayResourcePool``/``_check_resource_available``), so
  Ray is started with logical GPUs (``ray_init.num_gpus``) that stand for CPU slots.
- ``HFReplica``/``HFGenerateServer``: one Ray actor per replica holding the HF model, answering verl's
  token-in/token-out ``generate`` with ``model.generate`` (sampling with the request's temperature/top_p,
  the chosen tokens' log-probs from the scores) and reporting ``global_steps`` like verl's vLLM server.
- ``HFServerAdapter``: the rollout object in the actor worker (hybrid mode); verl's ``update_weights``
  hands it the actor's full parameters after every step, which it loads into the server's model.

Slow (a tiny model is the only sensible choice) and for tests only: not a training backend.
"""
from __future__ import annotations

import asyncio
import os
from contextlib import contextmanager
from types import ModuleType, SimpleNamespace

import ray
import torch
from verl.plugin.platform.platform_base import PlatformBase
from verl.utils import distributed as verl_distributed
from verl.plugin.platform.platform_manager import PlatformRegistry
from verl.workers.rollout import base as rollout_base
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica, RolloutReplicaRegistry, TokenOutput

SERVER_NAME = "bipace_hf_server_{rank}"


def _noop(*args, **kwargs):
    return None


# what verl calls on get_torch_device() along the training path; a CPU has nothing to free or sync
CPU_DEVICE = SimpleNamespace(
    synchronize=_noop, empty_cache=_noop, manual_seed=torch.manual_seed, manual_seed_all=torch.manual_seed,
    max_memory_allocated=lambda *a, **k: 0, max_memory_reserved=lambda *a, **k: 0,
    memory_allocated=lambda *a, **k: 0, memory_reserved=lambda *a, **k: 0, reset_peak_memory_stats=_noop,
    mem_get_info=lambda *a, **k: (0, 0), current_device=lambda: "cpu", device_count=lambda: 1,
    set_device=_noop, is_available=lambda: True, get_device_name=lambda *a: "cpu",
    ipc_collect=_noop, Stream=None, current_stream=lambda *a: SimpleNamespace(synchronize=_noop),
    memory=SimpleNamespace(_set_allocator_settings=_noop))


@PlatformRegistry.register(platform="cpu")
class PlatformCPU(PlatformBase):
    """verl's platform interface on a CPU (gloo collectives)."""

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> ModuleType:
        return CPU_DEVICE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check=False) -> bool:
        return os.environ.get("VERL_PLATFORM", "").strip().lower() == "cpu"   # only when asked for

    def current_device(self):
        return "cpu"        # verl passes it wherever a device goes (tensor.to, to_empty, torch.device)

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index=None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0):
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"

    @contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        return ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"]

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self):
        return None


class HFGenerateServer:
    """verl's rollout server interface (token ids in, token ids and log-probs out) over HF ``generate``."""

    def __init__(self, model_path: str, response_length: int, replica_rank: int = 0):
        from transformers import AutoModelForCausalLM
        torch.set_num_threads(1)
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
        self.response_length = int(response_length)
        self.replica_rank = replica_rank
        self.global_steps = None
        self.weight_loads = 0
        self.lock = asyncio.Lock()

    async def generate(self, request_id, *, prompt_ids, sampling_params, image_data=None, video_data=None,
                       **kwargs) -> TokenOutput:
        async with self.lock:        # one forward at a time: the model is not shared across threads
            return await asyncio.to_thread(self._generate, list(prompt_ids), dict(sampling_params))

    def _generate(self, prompt_ids: list[int], params: dict) -> TokenOutput:
        temperature = float(params.get("temperature", 1.0) or 0.0)
        max_new = int(params.get("max_tokens") or params.get("max_new_tokens") or self.response_length)
        sample = temperature > 0
        gen_kwargs = dict(do_sample=sample, max_new_tokens=min(max_new, self.response_length),
                          output_scores=True, return_dict_in_generate=True,
                          pad_token_id=self.model.config.eos_token_id)
        if sample:
            gen_kwargs.update(temperature=temperature, top_p=float(params.get("top_p", 1.0)),
                              top_k=int(params.get("top_k", 0)) if int(params.get("top_k", -1)) > 0 else 0)
        ids = torch.tensor([prompt_ids], dtype=torch.long)
        with torch.no_grad():
            out = self.model.generate(ids, attention_mask=torch.ones_like(ids), **gen_kwargs)
        new = out.sequences[0, ids.shape[1]:]
        logps = [torch.log_softmax(s[0].float(), -1)[t].item() for s, t in zip(out.scores, new.tolist())]
        stop = "completed" if len(new) and new[-1].item() == self.model.config.eos_token_id else None
        return TokenOutput(token_ids=new.tolist(), log_probs=logps, stop_reason=stop, num_preempted=0,
                           extra_fields={"global_steps": self.global_steps})

    async def load_weights(self, state: dict, global_steps=None) -> int:
        async with self.lock:
            missing, unexpected = self.model.load_state_dict(state, strict=False)
            if unexpected:
                raise ValueError(f"weights the HF server's model does not have: {unexpected[:5]}")
            self.weight_loads += 1
            if global_steps is not None:
                self.global_steps = global_steps
            return len(state)

    async def set_global_steps(self, global_steps: int):
        self.global_steps = global_steps

    async def stats(self) -> dict:
        return {"weight_loads": self.weight_loads, "global_steps": self.global_steps}

    # lifecycle calls verl's replicas make: nothing to do for a model that stays in memory
    async def wake_up(self):
        return None

    async def sleep(self):
        return None

    async def clear_kv_cache(self):
        return None

    async def release_kv_cache(self):
        return None

    async def resume_kv_cache(self):
        return None

    async def abort_all_requests(self, reject_request: bool = False):
        return {}

    async def resume_generation(self):
        return None

    async def wait_for_requests_to_drain(self):
        return None

    async def start_profile(self, **kwargs):
        return None

    async def stop_profile(self):
        return None


class HFReplica(RolloutReplica):
    """One HF generate server per replica, beside the hybrid actor workers (verl's ``RolloutReplica``)."""

    async def launch_servers(self):
        name = SERVER_NAME.format(rank=self.replica_rank)
        server = ray.remote(HFGenerateServer).options(name=name, num_cpus=0, max_concurrency=64).remote(
            model_path=self.model_config.local_path if hasattr(self.model_config, "local_path")
            else self.model_config.path, response_length=self.config.response_length,
            replica_rank=self.replica_rank)
        await server.stats.remote()          # constructed (the model loaded) before verl routes requests
        self.servers = [server]
        self._server_handle = server
        self._server_address = f"hf-generate-{self.replica_rank}"


class HFServerAdapter(BaseRollout):
    """The rollout object of the hybrid actor worker: receives verl's weight sync for the HF server."""

    def __init__(self, config, model_config, device_mesh, *args, **kwargs):
        super().__init__(config, model_config, device_mesh, *args, **kwargs)
        world = (self.config.tensor_model_parallel_size * self.config.data_parallel_size
                 * self.config.pipeline_model_parallel_size)
        rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
        self.replica_rank, self.is_leader = rank // world, rank % world == 0

    async def resume(self, tags: list[str]):
        return None

    async def release(self):
        return None

    async def update_weights(self, weights, wire_format: str = "named_tensors", global_steps=None, **kwargs):
        if wire_format != "named_tensors":
            raise ValueError(f"the hf rollout takes full named tensors, not {wire_format!r}")
        state = {name: t.detach().to("cpu", torch.float32).clone() for name, t in weights}
        if self.is_leader:
            server = ray.get_actor(SERVER_NAME.format(rank=self.replica_rank))
            await server.load_weights.remote(state, global_steps)


_verl_init_process_group = verl_distributed.initialize_global_process_group_ray


def _init_process_group_on_cpu(timeout_second=None, backend=None):
    """verl's process-group setup with a backend string torch accepts on a CPU.

    The one place verl 0.9.1 cannot run on a CPU at all: ``verl/utils/distributed.py``,
    ``initialize_global_process_group_ray`` builds ``f"cpu:gloo,{get_device_name()}:{get_nccl_backend()}"``,
    which is ``"cpu:gloo,cpu:gloo"`` when the device is the CPU, and torch refuses a device twice
    (``ValueError: Duplicate device type cpu``); ``TrainingWorker.__init__`` (``verl/workers/
    engine_workers.py``) calls it without a backend. Here the same call gets ``cpu:gloo``."""
    return _verl_init_process_group(timeout_second=timeout_second, backend=backend or "cpu:gloo")


if os.environ.get("VERL_PLATFORM", "").strip().lower() == "cpu":
    # engine_workers binds the name when imported, after verl (and so this module) is initialised
    verl_distributed.initialize_global_process_group_ray = _init_process_group_on_cpu

RolloutReplicaRegistry.register("hf", lambda: HFReplica)
rollout_base._ROLLOUT_REGISTRY[("hf", "async")] = f"{__name__}.HFServerAdapter"
