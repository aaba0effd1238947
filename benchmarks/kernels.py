"""GPU forward+backward time of the fused kernels (`impl="triton"`) against their peers.

The runner: what is timed is `kernel_peers.PEERS` (one registry: ours and each peer, with how it is called),
on the shapes and inputs of `kernel_inputs`.

Two variants, each at two shapes (B=2, H=48 value heads, chunk 64, bf16, T = 1K ... 64K):

- log-linear Mamba-2 (beta None). `--shape paper`: head dim V=64, state dim K=128; `--shape mqar`:
  K=V=16. q/k are shared by all heads, as in Mamba-2 models: ours runs them as GQA with Hk=1.
  Rows: ours log-linear; ours linear (lam=None, same kernels); flash-linear-attention's
  `chunk_log_linear_attn` (given the same Hk=1 q/k: it takes G q/k heads with H % G == 0; it needs
  K % 64 == 0 and V a power of two); linear Mamba-2 (fla's `chunk_simple_gla`, which takes per-head q/k,
  expanded outside the timed region; or mamba_ssm's `mamba_chunk_scan_combined`, ngroups=1, when fla is
  missing); PyTorch SDPA flash attention (causal, H heads of dim V: SDPA's GQA shares k/v between query
  heads, so q/k shared by all heads have no SDPA form).
  Ours runs inside `value_checks(False)` (the checks cost a host sync per call, a caller's choice).
- log-linear Gated DeltaNet (beta given), per-head q/k (Hk=H). `--shape paper`: K=V=64; `--shape mqar`:
  K=V=16. Rows: ours log-linear; ours linear; fla `chunk_gated_delta_rule`; SDPA flash attention.

Each cell is the median forward+backward time in ms (triton.testing.do_bench after a warm-up call that
compiles and autotunes; L2 flushed between runs), of one call on fixed inputs with a fixed output
gradient. "OOM" / "error: ..." cells record a peer that ran out of memory or raised; "n/a (...)" a
shape the peer does not support; "not installed" a missing package. Ratios are taken within one run.
At the smallest T of each table, the forward outputs of peers computing the same function are compared
(fla runs with scale=1.0: our op applies no scale) and printed as relative norm errors, as a check
that the peers were called with the right argument order and layout.

On a CUDA machine, from the repository root
-------------------------------------------
With the package installed (`python3 -m pip install -e ".[triton]"` after the torch build the machine
needs) and the peers to compare against (`python3 -m pip install fla-core==0.6.0`; mamba_ssm is
optional):

    python3 -m benchmarks.kernels --variant mamba2 --shape all --json mamba2.json
    python3 -m benchmarks.kernels --variant gdn --shape all --json gdn.json

The first call of each shape compiles and autotunes for a while. The script rewrites the "kernels (GPU)"
section of benchmarks/RESULTS.md; each table of that section is a part of its own (with its own date,
command, device and versions), and a run replaces only the parts it measured.

Elsewhere:

    python3 -m benchmarks.kernels --variant mamba2 --shape paper --T 1024 4096 --quick   # print only
    python3 -m benchmarks.kernels --time-limit 120   # starts no length that would end past 120 s (by the one before)
    TRITON_INTERPRET=1 python3 -m benchmarks.kernels --smoke --quick    # tiny shapes, any device (CPU too)
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import math
import re
import statistics
import time
from collections.abc import Callable

import torch

# kernel_inputs first: it selects Triton's interpreter on a machine without CUDA
from benchmarks.kernel_inputs import CHUNK, SHAPES, SMOKE_SHAPES, make_base
from benchmarks.kernel_peers import VARIANTS, Libraries, Method, load_libraries, methods_for, short_error
from benchmarks.results_md import RESULTS, command, markdown_table, write_section
from benchmarks.time_limit import TimeLimit

SECTION = "kernels (GPU)"
PART_ORDER = ["mamba2-paper", "mamba2-mqar", "gdn-paper", "gdn-mqar"]
LENGTHS = [1024, 2048, 4096, 8192, 16384, 32768, 65536]
AGREE_TOL = 5e-2  # bf16 forward: a larger relative norm error means a peer computes something else
TITLES = {
    "mamba2": "log-linear Mamba-2 (beta None)",
    "gdn": "log-linear Gated DeltaNet (beta given)",
}


# ---------------------------------------------------------------------------------------------- timing

def free_memory() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def fwd_bwd_ms(fwd: Callable[[], torch.Tensor], params: list[torch.Tensor], device: torch.device, smoke: bool) -> float:
    """Median forward+backward time (ms) of `fwd` on fixed inputs, after a warm-up call (compilation, autotuning)."""
    o = fwd()
    do = torch.randn_like(o)
    o.backward(do)
    del o

    def step() -> None:
        fwd().backward(do)

    if device.type == "cuda":
        import triton.testing

        torch.cuda.synchronize()
        kw = dict(warmup=25 if smoke else 50, rep=50 if smoke else 200, grad_to_none=params)
        try:
            return float(triton.testing.do_bench(step, return_mode="median", **kw))
        except TypeError:  # a Triton without return_mode
            return float(triton.testing.do_bench(step, quantiles=[0.5], **kw))
    times = []
    for _ in range(3 if smoke else 10):
        for p in params:
            p.grad = None
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def measure(method: Method, base: dict, device: torch.device, smoke: bool) -> float | str:
    if method.setup is None:
        return method.reason
    try:
        fwd, params = method.setup(base)
        return fwd_bwd_ms(fwd, params, device, smoke)
    except torch.cuda.OutOfMemoryError:
        return "OOM"
    except Exception as e:  # noqa: BLE001  (a peer raising at some T is a cell, not the end of the run)
        return "OOM" if "out of memory" in str(e).lower() else f"error: {short_error(e, 70)}"
    finally:
        free_memory()


def agreement(pairs: list[tuple[Method, Method]], base: dict) -> list[str]:
    """Relative norm error between the forward outputs of methods that compute the same function."""
    lines = []
    for a, b in pairs:
        if a.setup is None or b.setup is None:
            continue
        try:
            with torch.no_grad():
                oa = a.setup(base)[0]().float()
                ob = b.setup(base)[0]().float()
            err = float((oa - ob).norm() / ob.norm().clamp_min(1e-30))
            flag = "" if err <= AGREE_TOL else f" MISMATCH (> {AGREE_TOL:g}: check the call's layout and semantics)"
            lines.append(f"{a.label} vs {b.label}: {err:.1e}{flag}")
        except Exception as e:  # noqa: BLE001
            lines.append(f"{a.label} vs {b.label}: not compared ({short_error(e, 70)})")
        finally:
            free_memory()
    return lines


# ---------------------------------------------------------------------------------------------- tables

def fmt(x: float | str) -> str:
    return f"{x:.2f}" if isinstance(x, float) else str(x)


def ratio(a: float | str, b: float | str) -> float | None:
    return a / b if isinstance(a, float) and isinstance(b, float) and b > 0 else None


def fmt_ratio(r: float | None) -> str:
    return "-" if r is None else f"{r:.2f}"


RATIOS = {
    "mamba2": [("ours", "fla_ll", "ours / fla log-linear"), ("ours", "sdpa", "ours / SDPA"),
               ("ours", "mamba2", "ours / linear Mamba-2"), ("ours", "ours_linear", "ours / ours linear")],
    "gdn": [("ours", "ours_linear", "ours / ours linear"), ("ours", "fla_gdn", "ours / fla linear GDN"),
            ("ours", "sdpa", "ours / SDPA")],
}


def table(variant: str, methods: dict[str, Method], res: dict[str, dict[int, float | str]], lengths: list[int]
          ) -> str:
    header = ["ms (fwd+bwd)"] + [f"T={T // 1024}K" if T % 1024 == 0 else f"T={T}" for T in lengths]
    rows = [[m.label] + [fmt(res[key][T]) for T in lengths] for key, m in methods.items()]
    for a, b, label in RATIOS[variant]:
        if a in methods and b in methods:
            rows.append([f"**{label}**"] + [fmt_ratio(ratio(res[a][T], res[b][T])) for T in lengths])
    return markdown_table(header, rows)


# ---------------------------------------------------------------------------------------------- run

def versions(libs: Libraries) -> str:
    import triton

    dev = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU (no CUDA; Triton interpreter)"
    fla = libs.fla_version or "not installed"
    parts = [f"device {dev}", f"torch {torch.__version__} (CUDA {torch.version.cuda})", f"triton {triton.__version__}",
             f"fla-core {fla}"]
    if libs.mamba_ssm_version:
        parts.append(f"mamba_ssm {libs.mamba_ssm_version}")
    return ", ".join(parts)


NOT_MEASURED = "not measured (--time-limit)"


def run_part(variant: str, shape_name: str, lengths: list[int], libs: Libraries, device: torch.device,
             dtype: torch.dtype, smoke: bool, limit: TimeLimit | None = None) -> tuple[str, dict]:
    """One table: every method at every length; a length that `limit` says would end too late, and those after
    it, are cells NOT_MEASURED."""
    shape = (SMOKE_SHAPES if smoke else SHAPES)[(variant, shape_name)]
    methods = methods_for(variant, shape, libs, device)
    res: dict[str, dict[int, float | str]] = {key: {} for key in methods}
    notes: list[str] = []
    for i, T in enumerate(lengths):
        if limit is not None and not limit.fits():
            for later in lengths[i:]:
                for key in methods:
                    res[key][later] = NOT_MEASURED
            notes.append(f"**Partial**: T={T} and longer not measured (--time-limit {limit.seconds:g} s)")
            break
        try:
            base = make_base(shape, T, variant == "gdn", dtype, device)
        except torch.cuda.OutOfMemoryError:
            for key in methods:
                res[key][T] = "OOM (inputs)"
            free_memory()
            continue
        if i == 0:
            if variant == "mamba2":
                pairs = [("ours", "fla_ll"), ("ours_linear", "mamba2")]
            else:
                pairs = [("ours_linear", "fla_gdn")]
            pairs = [(methods[a], methods[b]) for a, b in pairs if a in methods and b in methods]
            if variant == "mamba2" and "mamba_ssm" in methods["mamba2"].label:
                pairs = pairs[:1]  # mamba_ssm's input is x*dt, not v: a different function of the same inputs
            agree = agreement(pairs, base)
            if agree:
                notes.append(f"forward agreement at T={T} (relative norm error, {str(dtype).split('.')[-1]}): "
                             + "; ".join(agree))
        for key, m in methods.items():
            res[key][T] = measure(m, base, device, smoke)
            print(f"  {variant}/{shape_name} T={T:>6} {m.label}: {fmt(res[key][T])}", flush=True)
        del base
        free_memory()
        if limit is not None:
            limit.done()

    title = (f"{TITLES[variant]}, {shape_name} shape: {shape.describe()}, chunk {CHUNK}, "
             f"{str(dtype).split('.')[-1]}, forward+backward ms (median)")
    lines = [f"### {title}\n"]
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    lines.append(f"- run: {stamp}, `{command()}`; {versions(libs)}")
    if variant == "mamba2":
        lines.append(
            "- ours: q/k shared by all heads (GQA, Hk=1), as in Mamba-2; fla's log-linear kernel gets the same "
            "Hk=1 q/k; chunk_simple_gla takes per-head q/k, so they are expanded (outside the timed region)"
        )
    lines += [f"- {n}" for n in notes]
    lines.append("")
    lines.append(table(variant, methods, res, lengths))
    raw = {"variant": variant, "shape": shape_name, "dims": shape.__dict__, "dtype": str(dtype),
           "ms": {m.label: {str(T): res[key][T] for T in lengths} for key, m in methods.items()}, "notes": notes}
    return "\n".join(lines), raw


def merge_into_results(new_parts: dict[str, str]) -> str:
    """The section body: this run's parts plus the parts of the existing section that this run did not measure."""
    old = RESULTS.read_text() if RESULTS.exists() else ""
    m = re.search(rf"<!-- begin:{re.escape(SECTION)} -->(.*?)<!-- end:{re.escape(SECTION)} -->", old, re.S)
    parts = {}
    if m:
        for p in re.finditer(r"<!-- part:([\w.-]+) -->\n(.*?)<!-- /part:\1 -->\n", m.group(1), re.S):
            parts[p.group(1)] = p.group(2)
    parts.update(new_parts)
    intro = ("Forward+backward time of one call of the operator (benchmarks/kernels.py; its docstring says how the "
             "peers are called). Each table below is rewritten by the run that measured it; its first line names "
             "that run, its device and versions. Compare ratios within one table only; the targets they are read "
             "against are in the table at the top of this file.\n")
    ordered = [k for k in PART_ORDER if k in parts] + sorted(k for k in parts if k not in PART_ORDER)
    return intro + "\n" + "\n".join(f"<!-- part:{k} -->\n{parts[k].rstrip()}\n<!-- /part:{k} -->\n" for k in ordered)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", choices=[*VARIANTS, "all"], default="all")
    parser.add_argument("--shape", choices=["paper", "mqar", "all"], default="all",
                        help="mamba2: paper K=128 V=64, mqar K=V=16; gdn: paper K=V=64, mqar K=V=16")
    parser.add_argument("--T", type=int, nargs="+", help=f"sequence lengths (default {LENGTHS})")
    parser.add_argument("--quick", action="store_true", help="print only; do not write benchmarks/RESULTS.md")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny shapes on any device (CPU: Triton interpreter, wall-clock timing); prints only")
    parser.add_argument("--json", help="also write the raw measurements to this file")
    parser.add_argument("--time-limit", type=float, metavar="S",
                        help="start no length that would end more than S seconds after the start, if it took as "
                             "long as the length before it; a table with none measured is not written")
    a = parser.parse_args()

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type != "cuda" and not a.smoke:
        parser.error("needs a CUDA device (use --smoke to check the script on CPU)")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    lengths = a.T or ([64, 100] if a.smoke else LENGTHS)
    variants = list(VARIANTS) if a.variant == "all" else [a.variant]
    shapes = ["paper", "mqar"] if a.shape == "all" else [a.shape]

    libs = load_libraries()
    print(versions(libs), flush=True)
    for name, why in libs.missing.items():
        print(f"  {name}: {why}", flush=True)

    parts, raws = {}, []
    limit = TimeLimit(a.time_limit)
    for variant in variants:
        for shape_name in shapes:
            text, raw = run_part(variant, shape_name, lengths, libs, device, dtype, a.smoke, limit)
            if all(cell == NOT_MEASURED for cells in raw["ms"].values() for cell in cells.values()):
                print(f"--time-limit {a.time_limit:g}: {variant}/{shape_name} not measured", flush=True)
                continue
            parts[f"{variant}-{shape_name}"] = text
            raws.append(raw)
            print("\n" + text, flush=True)

    if a.json:
        with open(a.json, "w") as f:
            json.dump(raws, f, indent=1)
    if a.quick or a.smoke or not parts:
        return
    path = write_section(SECTION, merge_into_results(parts))
    print(f"\nwritten to {path}")


if __name__ == "__main__":
    assert math.log2(CHUNK).is_integer()
    main()
