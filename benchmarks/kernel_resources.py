"""Registers and spills of every fused kernel, compiled for an H100 (sm_90a) without a GPU.

Triton compiles a kernel to PTX for a named target with no device present, and the ptxas that
ships with Triton reports each kernel's registers per thread and its spill traffic (`ptxas -v`).
That is a static measure, not a timing: it shows which kernels will spill before any GPU is lent.
Shapes: the paper's (chunk 64, K=128, V=64 for Mamba-2; K=V=64 for Gated DeltaNet) and the MQAR
one (K=V=16), bf16 inputs, lambda given; launch settings as the launchers choose them.

    python3 benchmarks/kernel_resources.py            # writes its section of RESULTS.md
    python3 benchmarks/kernel_resources.py --quick    # prints only
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.pop("TRITON_INTERPRET", None)  # compile for real; nothing is launched

import triton  # noqa: E402  (after the environment and sys.path are set)
from triton.backends.compiler import GPUTarget  # noqa: E402  (after the environment and sys.path are set)
from triton.compiler import ASTSource  # noqa: E402  (after the environment and sys.path are set)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loglinear.kernels.fused import delta_prep, intra, scan  # noqa: E402  (after the environment and sys.path are set)
from loglinear.kernels.fused.common import num_warps, pow2  # noqa: E402  (after the environment and sys.path are set)
from results import markdown_table, write_section  # noqa: E402  (after the environment and sys.path are set)

TARGET = GPUTarget("cuda", 90, 32)
_BIN = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
# Triton 3.9 emits a PTX version that only its newer bundled ptxas (named for Blackwell) reads
PTXAS = next((p for p in (_BIN / "ptxas-blackwell", _BIN / "ptxas") if p.exists()), _BIN / "ptxas")
POINTER_TYPES = {"shift_ptr": "*i32", "nchunk_ptr": "*i32", "slot_ptr": "*i32", "first_ptr": "*i64"}
INPUTS = {"q_ptr", "k_ptr", "v_ptr", "lam_ptr", "beta_ptr"}  # read in the caller's dtype


def signature(fn, constants: dict) -> dict:
    sig = {}
    for p in fn.params:
        if p.is_constexpr or p.name in constants:
            sig[p.name] = "constexpr"
        elif p.name.endswith("_ptr"):
            sig[p.name] = "*bf16" if p.name in INPUTS else POINTER_TYPES.get(p.name, "*fp32")
        else:
            sig[p.name] = "i32"
    return sig


def resources(fn, constants: dict, num_warps: int) -> list[object]:
    start = time.perf_counter()
    kernel = triton.compile(ASTSource(fn, signature(fn, constants), constants), target=TARGET,
                            options=dict(num_warps=num_warps))
    seconds = time.perf_counter() - start
    with tempfile.NamedTemporaryFile("w", suffix=".ptx") as f:
        f.write(kernel.asm["ptx"])
        f.flush()
        out = subprocess.run([str(PTXAS), "-v", "-arch=sm_90a", f.name, "-o", os.devnull],
                             capture_output=True, text=True, check=True).stderr
    regs = re.search(r"Used (\d+) registers", out)
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", out)
    return [regs.group(1) if regs else "?", *(spills.groups() if spills else ("?", "?")), f"{seconds:.1f}"]


def configs():
    """(kernel, shape, function, constexpr values, warps) as the launchers would launch them."""
    for shape, C, K, V, delta in [("Mamba-2 paper", 64, 128, 64, False), ("GDN paper", 64, 64, 64, True),
                                  ("MQAR", 64, 16, 16, False), ("MQAR GDN", 64, 16, 16, True)]:
        BK, BV = intra._blocks(K, V)
        mode = dict(QK_MODE=False, q_ptr=None, k_ptr=None, G_ptr=None) if delta else dict(QK_MODE=True, A_ptr=None)
        base = dict(C=C, BK=BK, BV=BV, HAS_LAM=True, PREC="tf32", **mode)
        warps = num_warps(C * C, C * BK, C * BV)
        yield "intra fwd", shape, intra.intra_fwd_kernel, base, warps
        extra = dict(dq_ptr=None, dk_ptr=None, dG_ptr=None) if delta else dict(dA_ptr=None)
        yield "intra bwd", shape, intra.intra_bwd_kernel, {**base, **extra}, warps
        sc = dict(C=C, LOG_C=C.bit_length() - 1, BK=pow2(K), BV=scan._bv(K, V), HAS_LAM=True, MATRIX=delta, PREC="tf32")
        warps = num_warps(C * pow2(K), sc["BV"] * pow2(K))
        yield "scan fwd", shape, scan.scan_fwd_kernel, {**sc, "SAVE": True}, warps
        yield "scan bwd", shape, scan.scan_bwd_kernel, sc, warps
        if delta:
            dp = dict(H=4, HK=4, K=K, C=C, BK=pow2(K), PREC="tf32")
            warps = 4 if C * pow2(K) <= 512 else 8
            yield "delta_prep fwd", shape, delta_prep._delta_prep_fwd_kernel, dp, warps
            flags = dict(HAS_DA=True, HAS_DR=True, HAS_DKD=True, HAS_DP=True)
            yield "delta_prep bwd", shape, delta_prep._delta_prep_bwd_kernel, {**dp, **flags}, warps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="print only; do not write RESULTS.md")
    args = parser.parse_args()
    rows = []
    for name, shape, fn, constants, warps in configs():
        rows.append([name, shape, warps, *resources(fn, constants, warps)])
        print(" | ".join(str(c) for c in rows[-1]), flush=True)
    header = ["kernel", "shape", "warps", "registers/thread", "spill stores (B)", "spill loads (B)", "compile (s)"]
    table = markdown_table(header, rows)
    print(table)
    if not args.quick:
        note = (f"Static: compiled for sm_90a with Triton {triton.__version__} and its ptxas, no GPU present "
                "(bf16 inputs, lambda given). Registers and spills per thread, not timings.\n\n")
        write_section("kernel resources (sm_90a, static)", note + table)


if __name__ == "__main__":
    main()
