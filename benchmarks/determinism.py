"""Determinism probe of the fused kernels: the same call, four times on identical inputs, must give the same bits.

    python3 -m benchmarks.determinism                 # CUDA: the probe at a multi-chunk length, prints a table
    python3 -m benchmarks.determinism --json out.json # also the raw differences
    TRITON_INTERPRET=1 python3 -m benchmarks.determinism --tiny   # any device (CPU: Triton's interpreter)

Each case is one variant (log-linear Mamba-2: beta None; log-linear Gated DeltaNet: beta given) in one dtype
(float32, bf16), run on the fused kernels through `run_impl` (past the self-check and the known faults: a probe
is for what the kernels do; every fused kernel: the intra-chunk and scan kernels, and the delta
rule's preparation, forward and backward) at CHUNKS chunks from an initial state at an unaligned
position, forward and backward through the output and the final state. For every output (o, the final state,
and the gradient of each input and of the initial state) the table gives the largest |difference| between
the first call and each later one: 0 when the kernels are deterministic.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass

import torch

# kernel_inputs first: it selects Triton's interpreter on a machine without CUDA
from benchmarks.kernel_inputs import Shape, make_base
from benchmarks.results_md import markdown_table
from loglinear.kernels import LogLinearState, num_levels, run_impl, value_checks

CALLS = 4
CHUNKS = 4  # a multi-chunk length: T = CHUNKS chunks, so the scan carries state across chunks
VARIANTS = {"mamba2": False, "gdn": True}  # variant -> beta given
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


@dataclass(frozen=True)
class Size:
    shape: Shape
    chunk: int
    offset: int  # the initial state's position: unaligned, so the first chunk meets its levels part-way


SIZES = {"full": Size(Shape(2, 4, 1, 64, 64), 64, 100), "tiny": Size(Shape(1, 2, 1, 16, 16), 16, 5)}


def call(base: dict, state: torch.Tensor, offset: int, chunk: int, weights: dict) -> dict[str, torch.Tensor]:
    """One forward+backward of the fused operator on fresh leaves of `base`; its outputs and gradients."""
    leaves = {n: x.detach().clone().requires_grad_() for n, x in base.items() if x is not None}
    levels = state.detach().clone().requires_grad_()
    position = torch.full((levels.shape[0],), offset, dtype=torch.int64, device=levels.device)
    with value_checks(False):
        o, final = run_impl("triton", leaves["q"], leaves["k"], leaves["v"], leaves["g"], leaves["lam"],
                            leaves.get("beta"), initial_state=LogLinearState(levels, position),
                            output_final_state=True, chunk_size=chunk)
    ((o.float() * weights["o"]).sum() + (final.levels.float() * weights["final"]).sum()).backward()
    return {"o": o.detach(), "final state": final.levels.detach(), "d initial state": levels.grad,
            **{f"d{n}": x.grad for n, x in leaves.items()}}


def probe(variant: str, dtype: torch.dtype, size: Size, device: torch.device) -> dict[str, float]:
    """The largest |difference| between the first of CALLS calls and each later one, per output."""
    shape, T = size.shape, CHUNKS * size.chunk
    base = make_base(shape, T, VARIANTS[variant], dtype, device)
    base["lam"] = (torch.rand(shape.B, T, shape.H, num_levels(size.offset + T), device=device) + 0.5).to(dtype)
    gen = torch.Generator(device=device).manual_seed(2)
    levels = 0.1 * torch.randn(shape.B, shape.H, num_levels(size.offset), shape.V, shape.K, generator=gen,
                               device=device)
    o_shape = (shape.B, T, shape.H, shape.V)
    final_shape = (shape.B, shape.H, num_levels(size.offset + T), shape.V, shape.K)
    weights = {"o": torch.randn(o_shape, generator=gen, device=device),
               "final": torch.randn(final_shape, generator=gen, device=device)}
    first = call(base, levels, size.offset, size.chunk, weights)
    worst = dict.fromkeys(first, 0.0)
    for _ in range(CALLS - 1):
        again = call(base, levels, size.offset, size.chunk, weights)
        for name, x in again.items():
            worst[name] = max(worst[name], float((x.float() - first[name].float()).abs().max()))
    return worst


def run(size_name: str, device: torch.device) -> list[dict]:
    """Every case: {"variant", "dtype", "max_diff": {output: difference}} or {..., "error": message}."""
    results = []
    for variant in VARIANTS:
        for dtype_name, dtype in DTYPES.items():
            case = {"variant": variant, "dtype": dtype_name}
            try:
                case["max_diff"] = probe(variant, dtype, SIZES[size_name], device)
            except Exception as e:  # noqa: BLE001  (a case that fails is a row of the record, not the end)
                case["error"] = f"{type(e).__name__}: {e}".splitlines()[0]
            results.append(case)
    return results


def table(results: list[dict]) -> str:
    outputs = sorted({name for r in results for name in r.get("max_diff", {})})
    rows = []
    for r in results:
        cells = [r.get("max_diff", {}).get(name) for name in outputs]
        verdict = "error: " + r["error"] if "error" in r else ("same bits" if not any(cells) else "**differs**")
        rows.append([r["variant"], r["dtype"], *("-" if c is None else f"{c:.3g}" for c in cells), verdict])
    return markdown_table(["variant", "dtype", *outputs, "verdict"], rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiny", action="store_true", help="tiny sizes (chunk 16), for Triton's interpreter")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type != "cuda" and not args.tiny:
        parser.error("needs a CUDA device (use --tiny to run it in Triton's interpreter on the CPU)")
    size = "tiny" if args.tiny else "full"
    results = run(size, device)
    s = SIZES[size]
    print(f"{CALLS} calls, {s.shape.describe()}, chunk {s.chunk}, T={CHUNKS * s.chunk}, initial state at position "
          f"{s.offset}, on {device}; largest |difference| from the first call:\n")
    print(table(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    if any("error" in r or any(r["max_diff"].values()) for r in results):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
