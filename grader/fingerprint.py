"""Hardware fingerprint of the grading device, read from NVML when a GPU is present.

`collect(nvml)` takes the NVML module (pynvml from nvidia-ml-py) or a replay of recorded readings
with the same functions, so CPU-only CI runs the same code on readings taken on the H200.
The id hashes only what defines the target (model, MIG profile, driver, limits), not what moves
from call to call (current clocks, other processes), which is still recorded beside it.
"""
from __future__ import annotations

import hashlib
import json
import platform
from typing import Any

STABLE_KEYS = ("kind", "gpu_name", "gpu_uuid", "driver", "cuda_driver", "mig_mode", "mig_profile", "compute_mode",
               "max_sm_clock_mhz", "max_mem_clock_mhz", "power_limit_w", "memory_total_mib", "torch", "triton",
               "cpu")


def collect(nvml=None, index: int = 0) -> dict[str, Any]:
    fp: dict[str, Any] = _software()
    if nvml is None:
        fp["kind"] = "cpu"
        return fp
    nvml.nvmlInit()
    try:
        h = nvml.nvmlDeviceGetHandleByIndex(index)
        fp["kind"] = "cuda"
        fp["gpu_name"] = _s(nvml.nvmlDeviceGetName(h))
        fp["gpu_uuid"] = _s(nvml.nvmlDeviceGetUUID(h))
        fp["driver"] = _s(nvml.nvmlSystemGetDriverVersion())
        fp["cuda_driver"] = _try(lambda: nvml.nvmlSystemGetCudaDriverVersion())
        mig = _try(lambda: nvml.nvmlDeviceGetMigMode(h))
        fp["mig_mode"] = "enabled" if (mig and mig[0] == 1) else "disabled" if mig is not None else "unsupported"
        fp["mig_profile"] = None
        if fp["mig_mode"] == "enabled":
            fp["mig_profile"] = _try(lambda: _s(nvml.nvmlDeviceGetName(h)))
        cm = _try(lambda: nvml.nvmlDeviceGetComputeMode(h))
        fp["compute_mode"] = {0: "default", 1: "exclusive_thread", 2: "prohibited", 3: "exclusive_process"}.get(cm, cm)
        fp["sm_clock_mhz"] = _try(lambda: nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM))
        fp["mem_clock_mhz"] = _try(lambda: nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_MEM))
        fp["max_sm_clock_mhz"] = _try(lambda: nvml.nvmlDeviceGetMaxClockInfo(h, nvml.NVML_CLOCK_SM))
        fp["max_mem_clock_mhz"] = _try(lambda: nvml.nvmlDeviceGetMaxClockInfo(h, nvml.NVML_CLOCK_MEM))
        pl = _try(lambda: nvml.nvmlDeviceGetPowerManagementLimit(h))
        fp["power_limit_w"] = pl / 1000 if isinstance(pl, (int, float)) else None
        mem = _try(lambda: nvml.nvmlDeviceGetMemoryInfo(h))
        fp["memory_total_mib"] = int(mem.total) >> 20 if mem is not None else None
        fp["persistence_mode"] = _try(lambda: nvml.nvmlDeviceGetPersistenceMode(h))
        procs = _try(lambda: nvml.nvmlDeviceGetComputeRunningProcesses(h)) or []
        fp["other_processes"] = [{"pid": int(p.pid), "used_mib": (int(p.usedGpuMemory) >> 20)
                                  if getattr(p, "usedGpuMemory", None) else None} for p in procs]
        util = _try(lambda: nvml.nvmlDeviceGetUtilizationRates(h))
        fp["gpu_util_pct"] = int(util.gpu) if util is not None else None
    finally:
        nvml.nvmlShutdown()
    return fp


def fingerprint_id(fp: dict[str, Any]) -> str:
    stable = {k: fp.get(k) for k in STABLE_KEYS}
    return hashlib.sha256(json.dumps(stable, sort_keys=True, default=str).encode()).hexdigest()[:16]


def read_local(cuda: bool) -> dict[str, Any]:
    """Fingerprint of this machine: NVML when a GPU is in use and the library loads."""
    if not cuda:
        return collect(None)
    try:
        import pynvml

        return collect(pynvml)
    except Exception as e:  # noqa: BLE001 - NVML missing is recorded, never fatal
        fp = collect(None)
        fp.update(kind="cuda", nvml_error=str(e)[:200])
        return fp


def _software() -> dict[str, Any]:
    out = {"python": platform.python_version(), "cpu": platform.processor() or platform.machine()}
    try:
        import torch

        out["torch"] = torch.__version__
    except ImportError:
        out["torch"] = None
    try:
        import triton

        out["triton"] = triton.__version__
    except ImportError:
        out["triton"] = None
    return out


def _s(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _try(fn):
    try:
        return fn()
    except Exception:  # noqa: BLE001 - a reading NVML does not support is recorded as None
        return None


class Recorder:
    """Wraps the NVML module and keeps every answer, so a reading can be replayed elsewhere."""

    def __init__(self, nvml):
        self._nvml = nvml
        self.calls: dict[str, Any] = {}

    def __getattr__(self, name):
        target = getattr(self._nvml, name)
        if not callable(target) or not name.startswith("nvml"):
            return target

        def call(*args):
            key = name + "".join(f"|{a}" for a in args if isinstance(a, int))
            try:
                value = target(*args)
            except Exception as e:  # noqa: BLE001 - recorded so the replay raises the same way
                self.calls[key] = {"error": str(e)}
                raise
            self.calls[key] = {"value": _plain(value)}
            return value

        return call

    def dump(self) -> dict[str, Any]:
        consts = {k: getattr(self._nvml, k) for k in ("NVML_CLOCK_SM", "NVML_CLOCK_MEM")}
        return {"constants": consts, "calls": self.calls}


class Replay:
    """An NVML stand-in answering from a Recorder dump (CPU-only CI feeds H200 readings through collect)."""

    def __init__(self, dump: dict[str, Any]):
        self._calls = dump["calls"]
        for k, v in dump["constants"].items():
            setattr(self, k, v)

    def __getattr__(self, name):
        if not name.startswith("nvml"):
            raise AttributeError(name)

        def call(*args):
            key = name + "".join(f"|{a}" for a in args if isinstance(a, int))
            if key not in self._calls:
                raise RuntimeError(f"no recorded NVML answer for {key}")
            rec = self._calls[key]
            if "error" in rec:
                raise RuntimeError(rec["error"])
            return _revive(rec["value"])

        return call


def _plain(v):
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    fields = [name for name, _ in getattr(type(v), "_fields_", [])]  # ctypes structures (NVML's)
    if fields:
        return {"__struct__": {f: _plain(getattr(v, f)) for f in fields}}
    return repr(v)  # device handles and other opaque values are replayed as their text


def _revive(v):
    if isinstance(v, dict) and "__struct__" in v:
        return type("NvmlStruct", (), {k: _revive(x) for k, x in v["__struct__"].items()})()
    if isinstance(v, list):
        return [_revive(x) for x in v]
    return v
