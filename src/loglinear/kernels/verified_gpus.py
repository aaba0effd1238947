"""The GPU kinds on which a passing check verified the fused kernels: the records of verified_gpus.json.

A known fault (kernels/triton_limits.py) covers a range of GPUs and Triton versions. On one GPU kind in that range
(a device model, its compute capability and a Triton version) it is lifted only by a record here of a passing
`python -m benchmarks.gpu_check` on that kind, of the same fused-kernel code (`fused_digest`), in the dtype asked
for. The records are committed with the check's logs (records/gpu_checks/); gpu_check writes its kind's record,
one per kind: the latest check of it.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import torch

from loglinear.kernels.triton_limits import MAX_CHUNK, MAX_K, known_fault
from loglinear.kernels.variant import Variant

RECORDS = Path(__file__).with_name("verified_gpus.json")
KERNELS = Path(__file__).parent
FUSED_SOURCES = ("fused", "fenwick.py", "layout.py", "level_gather.py", "state.py", "switch.py", "variant.py")
"""The fused path's source: kernels/fused/ and the kernels modules it imports (of kernels/triton_limits.py it reads
only MAX_CHUNK and MAX_K, whose values the digest takes instead of the file, which also holds the faults)."""


@dataclass(frozen=True)
class GpuKind:
    """What a record holds for: the device's model (torch.cuda.get_device_name), compute capability, Triton."""

    device: str
    capability: str  # "9.0"
    triton: str  # Triton's version string, compared exactly

    def __str__(self) -> str:
        return f"{self.device} (compute capability {self.capability}, Triton {self.triton})"

    @classmethod
    def of(cls, device: torch.device, triton: str) -> GpuKind:
        return cls(torch.cuda.get_device_name(device), "{}.{}".format(*torch.cuda.get_device_capability(device)),
                   triton)


@dataclass(frozen=True)
class Record:
    """A check of the fused kernels on one GPU kind: the dtypes it verified (both variants, every step of the
    check passing in them), what passed, what it did not establish, and the folder of its logs."""

    kind: GpuKind
    kernels: str  # fused_digest() of the code it checked
    date: str
    dtypes: tuple[str, ...]
    passed: str
    not_verified: str
    logs: str

    def to_json(self) -> dict:
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "kind"}
        return {**dataclasses.asdict(self.kind), **fields, "dtypes": list(self.dtypes)}

    @classmethod
    def from_json(cls, entry: dict) -> Record:
        kind_keys = {f.name for f in dataclasses.fields(GpuKind)}
        keys = kind_keys | {f.name for f in dataclasses.fields(cls)} - {"kind"}
        if not isinstance(entry, dict) or set(entry) != keys:
            got = sorted(entry) if isinstance(entry, dict) else type(entry).__name__
            raise ValueError(f"a record needs exactly the keys {sorted(keys)}, got {got}")
        kind = GpuKind(**{k: str(entry[k]) for k in kind_keys})
        return cls(kind, **{k: entry[k] for k in keys - kind_keys - {"dtypes"}}, dtypes=tuple(entry["dtypes"]))


def load_records(path: Path | None = None) -> list[Record]:
    """The records of `path` (a JSON list; None: RECORDS); a malformed file is a ValueError naming it."""
    path = RECORDS if path is None else path
    try:
        return [Record.from_json(entry) for entry in json.loads(path.read_text())]
    except (OSError, ValueError, TypeError) as e:
        raise ValueError(f"{path}: not a list of GPU records: {e}") from e


def save_records(records: list[Record], path: Path | None = None) -> None:
    path = RECORDS if path is None else path
    path.write_text(json.dumps([r.to_json() for r in records], indent=2) + "\n")


def record_for(kind: GpuKind, records: list[Record]) -> Record | None:
    return next((r for r in records if r.kind == kind), None)


@functools.cache
def fused_digest() -> str:
    """A digest of the fused path's source (FUSED_SOURCES) and the sizes it reads from triton_limits."""
    digest = hashlib.sha256()
    for name in FUSED_SOURCES:
        root = KERNELS / name
        for path in sorted(root.rglob("*.py")) if root.is_dir() else [root]:
            digest.update(str(path.relative_to(KERNELS)).encode() + b"\0" + path.read_bytes())
    sizes = ",".join(f"{v.value}={MAX_K[v]}" for v in Variant)
    digest.update(f"MAX_CHUNK={MAX_CHUNK};MAX_K={sizes}".encode())
    return digest.hexdigest()[:16]


def lifting_record(kind: GpuKind, dtype: torch.dtype) -> Record | None:
    """The record that verified this kind in `dtype` with the current fused code, or None."""
    found = record_for(kind, load_records())
    if found is not None and found.kernels == fused_digest() and dtype_name(dtype) in found.dtypes:
        return found
    return None


def refusal(kind: GpuKind, variant: Variant, dtype: torch.dtype) -> str | None:
    """Why the fused kernels are refused for `variant` in `dtype` on this GPU kind: a known fault that no record
    lifts (its text, why no record lifts it, and the command that checks); None where no known fault covers it
    or a record lifts it."""
    major, minor = (int(n) for n in kind.capability.split("."))
    fault = known_fault((major, minor), kind.triton, variant, dtype)
    if fault is None or lifting_record(kind, dtype) is not None:
        return None
    return (f"a known fault: {fault}; {no_record(kind, dtype)}; `python -m benchmarks.gpu_check` (in a checkout of "
            f"the repository) runs the check that records one")


def no_record(kind: GpuKind, dtype: torch.dtype) -> str:
    """Why no record verifies this kind in `dtype` with the current fused code."""
    found = record_for(kind, load_records())
    if found is None:
        return f"no record of a passing check on {kind} in loglinear/kernels/{RECORDS.name}"
    this = f"the record of {found.date} for {kind}"
    if found.kernels != fused_digest():
        return f"{this} checked other kernel code ({found.kernels}, these {fused_digest()})"
    return f"{this} verified {', '.join(found.dtypes) or 'nothing'}, not {dtype_name(dtype)}"


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
