"""Registers, spills and shared memory of every fused kernel, compiled for an H100 (sm_90a) without a GPU.

The launches are the operator's own: a child process runs log_linear_attn forward and backward in
Triton's interpreter at each shape and records every kernel launch (tests/kernels/offline.py), so the
constexprs and warps are exactly what the launchers choose. This process compiles each launch for
sm_90a and asks the ptxas that ships with Triton for its registers per thread and spill traffic
(`ptxas -v`). That is a static measure, not a timing: it shows which kernels will spill before any
GPU runs them. Shapes: the paper's (chunk 64, K=128, V=64 for Mamba-2 with q/k shared by the heads;
K=V=64 for Gated DeltaNet) and the MQAR one (K=V=16), bf16 inputs, lambda given.

    python3 -m benchmarks.kernel_resources            # writes its section of RESULTS.md (one per Triton version)
    python3 -m benchmarks.kernel_resources --quick    # prints only
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.results_md import markdown_table, write_section

SHAPES = {  # name: (delta rule, K, V, q/k heads of H = 2)
    "Mamba-2 paper": (False, 128, 64, 1),
    "GDN paper": (True, 64, 64, 2),
    "MQAR": (False, 16, 16, 1),
    "MQAR GDN": (True, 16, 16, 2),
}
T, CHUNK = 128, 64


def record(path: str) -> None:
    """In Triton's interpreter: every launch of a forward and backward pass at each shape, to `path`."""
    import torch

    from loglinear.kernels import log_linear_attn, num_levels
    from tests.kernels.offline import recorded_launches

    rows = []
    for shape, (delta, K, V, HK) in SHAPES.items():
        def rand(*size):
            return torch.rand(*size, dtype=torch.bfloat16, requires_grad=True)

        H = 2
        with recorded_launches() as launches:
            o, _ = log_linear_attn(rand(1, T, HK, K), rand(1, T, HK, K), rand(1, T, H, V),
                                   -rand(1, T, H), rand(1, T, H, num_levels(T)), rand(1, T, H) if delta else None,
                                   impl="triton", chunk_size=CHUNK)
            o.float().sum().backward()
        rows += [{"shape": shape, **launch.to_json()} for launch in launches]
    Path(path).write_text(json.dumps(rows))


def launches() -> list[tuple[str, object]]:
    """(shape, Launch) of every kernel launch, recorded in a child process running the interpreter."""
    from tests.kernels.offline import Launch

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "launches.json")
        subprocess.run([sys.executable, "-m", __spec__.name, "--record", path], check=True,
                       env={**os.environ, "TRITON_INTERPRET": "1"})
        return [(row.pop("shape"), Launch.from_json(row)) for row in json.loads(Path(path).read_text())]


def resources(launch) -> list[object]:
    """[registers/thread, spill store bytes, spill load bytes, shared memory bytes per block] of `launch` on sm_90a."""
    import triton

    from tests.kernels.offline import compile_launch

    kernel = compile_launch(launch, "90a")
    bin_dir = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    # Triton 3.9 emits a PTX version that only its newer bundled ptxas (named for Blackwell) reads
    ptxas = next((p for p in (bin_dir / "ptxas-blackwell", bin_dir / "ptxas") if p.exists()), bin_dir / "ptxas")
    with tempfile.NamedTemporaryFile("w", suffix=".ptx") as f:
        f.write(kernel.asm["ptx"])
        f.flush()
        out = subprocess.run([str(ptxas), "-v", "-arch=sm_90a", f.name, "-o", os.devnull],
                             capture_output=True, text=True, check=True).stderr
    regs = re.search(r"Used (\d+) registers", out)
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", out)
    return [regs.group(1) if regs else "?", *(spills.groups() if spills else ("?", "?")), kernel.metadata.shared]


def label(kernel: str) -> str:
    """`intra.intra_fwd_kernel` -> `intra fwd`."""
    module, name = kernel.split(".")
    return f"{module} {'bwd' if '_bwd_' in name else 'fwd'}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="print only; do not write RESULTS.md")
    parser.add_argument("--record", metavar="PATH", help=argparse.SUPPRESS)  # the child process's job
    args = parser.parse_args()
    if args.record:
        record(args.record)
        return
    os.environ.pop("TRITON_INTERPRET", None)  # compile for real: nothing is launched
    import triton

    rows = []
    for shape, launch in launches():
        rows.append([label(launch.kernel), shape, dict(launch.options)["num_warps"], *resources(launch)])
        print(" | ".join(str(c) for c in rows[-1]), flush=True)
    header = ["kernel", "shape", "warps", "registers/thread", "spill stores (B)", "spill loads (B)", "shared (B)"]
    table = markdown_table(header, rows)
    print(table)
    if not args.quick:
        note = (f"Static: compiled for sm_90a with Triton {triton.__version__} and its ptxas, no GPU present "
                "(bf16 inputs, lambda given; the launches the operator makes in a forward and backward pass). "
                "Registers and spills per thread and shared memory per block (an H100 block gets 232,448 bytes), not "
                "timings. One section per Triton version.\n\n")
        write_section(f"kernel resources (sm_90a, static, Triton {triton.__version__})", note + table)


if __name__ == "__main__":
    main()
