"""What the fused Triton kernels take, and where they are refused.

Sizes: every launch the kernels make at these head dims and chunk sizes fits the shared memory of a
block on the GPUs in SHARED_MEMORY; tests/kernels/test_fused_compile.py compiles the largest of each
kind offline for both and reads the compiled size. Beyond them (the delta rule's backward asks for
360,448 bytes at K = 128 on sm_90a) `impl="triton"` raises and `auto` uses `chunk`.

Known faults: (GPU generation, Triton version, variant, dtype) combinations where the fused kernels computed
wrong results. On a GPU kind in a fault's range the kernels are refused whatever the self-check says (`auto` uses
`chunk` with one warning, `impl="triton"` raises, `loglinear doctor` names them) until a record of a passing check
on that kind lifts it (kernels/verified_gpus.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from loglinear.kernels.variant import Variant

SHARED_MEMORY = {"80": 166_912, "90a": 232_448}
"""Bytes of shared memory one block may use (the opt-in maximum) by CUDA architecture: A100, H100."""
MAX_K = {Variant.SCALAR_DECAY: 128, Variant.DELTA_RULE: 64}
"""The largest q/k head dim per variant (at K = 256 Mamba-2's scan backward needs 167,936 bytes on sm_80)."""
MAX_CHUNK = 64
"""The largest chunk the kernels use; a larger `chunk_size` is run at 64 (only rounding changes)."""


def unsupported(K: int, variant: Variant) -> str | None:
    """Why the fused kernels cannot take q/k head dim K for `variant`, or None."""
    if K > MAX_K[variant]:
        return (f"impl='triton' supports K <= {MAX_K[variant]} for {variant.value} (larger blocks do not fit a GPU "
                f"block's shared memory), got K={K}; use impl='chunk'")
    return None


@dataclass(frozen=True)
class KnownFault:
    """Wrong results of the fused kernels on GPUs of compute capability `major`.x with Triton in [since, until)."""

    major: int
    since: tuple[int, ...]
    until: tuple[int, ...]
    variant: Variant
    dtypes: tuple[torch.dtype, ...]
    what: str

    def __str__(self) -> str:
        dtypes = ", ".join(str(d).removeprefix("torch.") for d in self.dtypes)
        return (f"{self.variant.value} in {dtypes} on compute capability {self.major}.x with Triton "
                f"{_text(self.since)} to before {_text(self.until)}: {self.what}")


_SINCE = ("; since then the fused path reads float32 copies of its inputs and the delta rule's preparation runs "
          "exact dots (fused/function.py, fused/delta_prep.py)")
KNOWN_FAULTS: tuple[KnownFault, ...] = (
    KnownFault(9, (3, 4), (3, 7, 1), Variant.DELTA_RULE, (torch.bfloat16, torch.float16),
               "the delta rule's bf16 backward read out of bounds of shared memory in its preparation's tf32 dots "
               "(compute-sanitizer, an H100 with Triton 3.6) and gave wrong dk, dg and dbeta" + _SINCE),
    KnownFault(9, (3, 4), (3, 7, 1), Variant.SCALAR_DECAY, (torch.bfloat16, torch.float16),
               "with lam and an initial state, the bf16 output o of Mamba-2 (and of the delta rule) differed between "
               "identical calls, one element off by 0.24 at 2,048 tokens, on an H100 and an H200 with Triton 3.6, "
               "while float32 was right" + _SINCE),
)
"""Both seen on Hopper with Triton 3.6; the range of versions is that of the Hopper miscompilation that
flash-linear-attention met (fixed in Triton 3.7.1). After the change named in them, on an H100, the GPU tests of
the change's working tree passed in bf16 and compute-sanitizer memcheck found no bad access in the one case it ran
(the delta rule's bf16 backward at K = V = 16), but the bf16 self-check, the fault probe and the determinism probe
did not complete, and no H200 has run the changed code (records/README.md). So the faults stand on
every Hopper GPU kind until a record of a passing check there lifts them (kernels/verified_gpus.json)."""


def known_fault(capability: tuple[int, int], triton: str | None, variant: Variant,
                dtype: torch.dtype) -> KnownFault | None:
    """The known fault of the fused kernels for this GPU, Triton version, variant and dtype, or None."""
    if triton is None:
        return None
    version = _parse(triton)
    for fault in KNOWN_FAULTS:
        if (capability[0] == fault.major and fault.since <= version < fault.until and variant is fault.variant
                and dtype in fault.dtypes):
            return fault
    return None


def _parse(version: str) -> tuple[int, ...]:
    """'3.6.0' -> (3, 6, 0); what follows the numbers is dropped ('3.7.0+git1a2b' -> (3, 7, 0))."""
    found = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version)
    return tuple(int(n) for n in found.groups(default="0")) if found else ()


def _text(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))
