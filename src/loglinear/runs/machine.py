"""What a run ran on, for its result.json `machine`: the processor, the instruction set torch's CPU kernels use,
the GPU it trained on, torch's version and its threads. Processors round differently, so a run whose accuracy
sits near a threshold can end otherwise on another machine; a report says which machines its runs came from."""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Any

import torch

CPUINFO = Path("/proc/cpuinfo")


def machine(gpu: str | None) -> dict[str, Any]:
    """This process's machine, with `gpu` the name of the GPU the run trained on (None on the CPU)."""
    return {
        "processor": processor_name(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "gpu": gpu,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }


def gpu_name(device: torch.device, count: int = 1) -> str | None:
    """`NVIDIA H100 80GB HBM3`, `... x 2` when the run trained on several; None off CUDA."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return name if count == 1 else f"{name} x {count}"


def started_gpu() -> str | None:
    """The GPU this process had started using, for a run that failed before saying which one it trained on."""
    return torch.cuda.get_device_name() if torch.cuda.is_initialized() else None


def processor_name() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo), else what the platform module says."""
    try:
        for line in CPUINFO.read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def machine_label(record: Any) -> str:
    """One line for a table: `AMD EPYC (AVX512), torch 2.13.0+cpu, 1 thread`, the GPU first when there is one.
    A record of another version reads as far as it goes: a part it lacks is `not recorded`; one that is not a
    mapping is `malformed machine record`."""
    if not isinstance(record, dict):
        return f"malformed machine record ({type(record).__name__})"
    part = {key: record.get(key, "not recorded") for key in ("processor", "cpu_capability", "torch", "threads")}
    threads = part["threads"]
    counted = f"{threads} thread{'s' if threads != 1 else ''}" if isinstance(threads, int) else f"threads {threads}"
    text = f"{part['processor']} ({part['cpu_capability']}), torch {part['torch']}, {counted}"
    return f"{record['gpu']}; {text}" if record.get("gpu") else text
