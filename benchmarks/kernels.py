"""GPU forward+backward time of the fused kernels (`impl="triton"`) against their peers.

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

    python3 benchmarks/kernels.py --variant mamba2 --shape all --json mamba2.json
    python3 benchmarks/kernels.py --variant gdn --shape all --json gdn.json

The first call of each shape compiles and autotunes for a while. The script rewrites the "kernels (GPU)"
section of benchmarks/RESULTS.md; each table of that section is a part of its own (with its own date,
command, device and versions), and a run replaces only the parts it measured.

Elsewhere:

    python3 benchmarks/kernels.py --variant mamba2 --shape paper --T 1024 4096 --quick   # print only
    TRITON_INTERPRET=1 python3 benchmarks/kernels.py --smoke --quick    # tiny shapes, any device (CPU too)
"""

from __future__ import annotations

import argparse
import datetime
import gc
import inspect
import json
import math
import re
import shlex
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

if not torch.cuda.is_available():  # the fused kernels then run in Triton's interpreter (read when triton.jit runs)
    import os

    os.environ.setdefault("TRITON_INTERPRET", "1")

from loglinear.kernels import log_linear_attn, num_levels, value_checks  # noqa: E402  (after TRITON_INTERPRET is set)

SECTION = "kernels (GPU)"
PART_ORDER = ["mamba2-paper", "mamba2-mqar", "gdn-paper", "gdn-mqar"]
LENGTHS = [1024, 2048, 4096, 8192, 16384, 32768, 65536]
CHUNK = 64
TARGET_SDPA_FROM, TARGET_SDPA_AIM = 8192, 4096
TARGET_OVER_MAMBA2, TARGET_OVER_GDN, TARGET_GDN_AT = 1.5, 2.0, 16384
AGREE_TOL = 5e-2  # bf16 forward: a larger relative norm error means a peer computes something else


@dataclass(frozen=True)
class Shape:
    B: int
    H: int
    Hk: int
    K: int
    V: int

    def describe(self) -> str:
        return f"B={self.B}, H={self.H}, Hk={self.Hk}, K={self.K}, V={self.V}"


SHAPES = {
    ("mamba2", "paper"): Shape(2, 48, 1, 128, 64),
    ("mamba2", "mqar"): Shape(2, 48, 1, 16, 16),
    ("gdn", "paper"): Shape(2, 48, 48, 64, 64),
    ("gdn", "mqar"): Shape(2, 48, 48, 16, 16),
}
SMOKE_SHAPES = {
    ("mamba2", "paper"): Shape(1, 2, 1, 64, 32),  # fla's log-linear kernel needs K % 64 == 0
    ("mamba2", "mqar"): Shape(1, 2, 1, 16, 16),
    ("gdn", "paper"): Shape(1, 2, 2, 32, 32),
    ("gdn", "mqar"): Shape(1, 2, 2, 16, 16),
}
TITLES = {
    "mamba2": "log-linear Mamba-2 (beta None)",
    "gdn": "log-linear Gated DeltaNet (beta given)",
}


# ----------------------------------------------------------------------------------------------- peers

@dataclass
class Peers:
    """Optional peer libraries: the callables, or why they are missing."""

    fla_version: str | None = None
    fla_loglinear: Callable | None = None
    fla_simple_gla: Callable | None = None
    fla_gdn: Callable | None = None
    mamba_ssm_version: str | None = None
    mamba_scan: Callable | None = None
    missing: dict[str, str] = field(default_factory=dict)


def _short(e: BaseException, n: int = 90) -> str:
    text = f"{type(e).__name__}: {e}".splitlines()[0] if str(e) else type(e).__name__
    return text[:n].replace("|", "/")


def load_peers() -> Peers:
    p = Peers()
    try:
        import fla

        p.fla_version = getattr(fla, "__version__", "?")
    except Exception as e:  # noqa: BLE001  (a broken install is reported, not fatal)
        p.missing["fla"] = _short(e)
    if p.fla_version is not None:
        for attr, module, name in (
            ("fla_loglinear", "fla.ops.log_linear_attn", "chunk_log_linear_attn"),
            ("fla_simple_gla", "fla.ops.simple_gla", "chunk_simple_gla"),
            ("fla_gdn", "fla.ops.gated_delta_rule", "chunk_gated_delta_rule"),
        ):
            try:
                setattr(p, attr, getattr(__import__(module, fromlist=[name]), name))
            except Exception as e:  # noqa: BLE001
                p.missing[name] = _short(e)
    if p.fla_simple_gla is None:
        try:
            import mamba_ssm
            from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined

            p.mamba_ssm_version, p.mamba_scan = getattr(mamba_ssm, "__version__", "?"), mamba_chunk_scan_combined
        except Exception as e:  # noqa: BLE001
            p.missing["mamba_ssm"] = _short(e)
    return p


def layout_kwargs(fn: Callable, scale: bool = True) -> dict:
    """Keyword arguments that pin an fla op to our conventions whatever its version.

    scale=1.0 (our op applies no scale; fla's default is K^-0.5 for simple_gla / GDN, 1.0 for the
    log-linear op); head_first=False where the version still has that parameter (old versions
    defaulted to head-first (B, H, T, ...) inputs; new ones raise if it is passed at all).
    """
    params = inspect.signature(fn).parameters
    kw = {}
    if scale and "scale" in params:
        kw["scale"] = 1.0
    if "head_first" in params:
        kw["head_first"] = False
    return kw


# ---------------------------------------------------------------------------------------------- inputs

def make_base(shape: Shape, T: int, delta: bool, dtype: torch.dtype, device: torch.device, seed: int = 0) -> dict:
    """Well-conditioned inputs without grad: q scaled by K^-1/2, unit-norm keys, g in [-0.1, -1e-3],
    lam in [0.5, 1.5]."""
    gen = torch.Generator(device=device).manual_seed(seed)
    B, H, Hk, K, V = shape.B, shape.H, shape.Hk, shape.K, shape.V

    def randn(*s: int) -> torch.Tensor:
        return torch.randn(*s, generator=gen, device=device)

    def rand(*s: int) -> torch.Tensor:
        return torch.rand(*s, generator=gen, device=device)

    return {
        "q": (randn(B, T, Hk, K) * K**-0.5).to(dtype),
        "k": F.normalize(randn(B, T, Hk, K), dim=-1).to(dtype),
        "v": randn(B, T, H, V).to(dtype),
        "g": -(rand(B, T, H) * 0.099 + 1e-3),  # float32 log-decays, as models produce them
        "lam": (rand(B, T, H, num_levels(T)) + 0.5).to(dtype),
        "beta": rand(B, T, H).to(dtype) if delta else None,
    }


def leaves(base: dict, names: list[str]) -> list[torch.Tensor]:
    return [base[n].detach().clone().requires_grad_() for n in names]


def expand_heads(x: torch.Tensor, H: int) -> torch.Tensor:
    """(B, T, Hk, K) -> (B, T, H, K), head h reading head h // (H // Hk) (SDPA's and fla's grouping)."""
    return x.repeat_interleave(H // x.shape[2], dim=2).contiguous()


Setup = Callable[[dict], "tuple[Callable[[], torch.Tensor], list[torch.Tensor]]"]


@dataclass
class Method:
    key: str
    label: str
    setup: Setup | None  # base -> (forward returning o, leaves); None: not runnable
    reason: str = ""  # the cell when setup is None


def methods_for(variant: str, shape: Shape, peers: Peers, device: torch.device) -> list[Method]:
    delta = variant == "gdn"
    H = shape.H

    def ours(levels: bool) -> Setup:
        def setup(base: dict):
            names = ["q", "k", "v", "g"] + (["lam"] if levels else []) + (["beta"] if delta else [])
            x = dict(zip(names, leaves(base, names), strict=True))

            def fwd() -> torch.Tensor:
                with value_checks(False):  # the checks' host sync is the caller's choice, not the kernels' cost
                    return log_linear_attn(x["q"], x["k"], x["v"], x["g"], x.get("lam"), x.get("beta"),
                                           impl="triton", chunk_size=CHUNK)[0]

            return fwd, list(x.values())

        return setup

    out = [
        Method("ours", "ours log-linear (triton)", ours(True)),
        Method("ours_linear", "ours linear (triton, lam=None)", ours(False)),
    ]

    if not delta:
        # fla's log-linear op: q/k (B, T, G, K) with H % G == 0 (fla 0.6.0; older versions require G == 1),
        # v (B, T, H, V), g (B, T, H) log-decays, level_scales (B, T, H, L) with L >= num_levels(T).
        if peers.fla_loglinear is None:
            out.append(Method("fla_ll", "fla chunk_log_linear_attn", None, _missing(peers, "chunk_log_linear_attn")))
        elif shape.K % 64:
            out.append(Method("fla_ll", "fla chunk_log_linear_attn", None, "n/a (K%64)"))
        elif shape.V & (shape.V - 1):
            out.append(Method("fla_ll", "fla chunk_log_linear_attn", None, "n/a (V not 2^n)"))
        else:
            fn = peers.fla_loglinear
            kw = layout_kwargs(fn)

            def fla_ll(base: dict):
                q, k, v, g, lam = leaves(base, ["q", "k", "v", "g", "lam"])
                return (lambda: fn(q, k, v, g, lam, **kw)[0]), [q, k, v, g, lam]

            out.append(Method("fla_ll", "fla chunk_log_linear_attn", fla_ll))

        # linear Mamba-2: fla's simple GLA (scalar per-head decay; per-head q/k, so the shared ones are expanded)
        if peers.fla_simple_gla is not None:
            fn = peers.fla_simple_gla
            kw = layout_kwargs(fn)

            def simple_gla(base: dict):
                v, g = leaves(base, ["v", "g"])
                q, k = (expand_heads(base[n], H).requires_grad_() for n in ("q", "k"))
                return (lambda: fn(q, k, v, g, **kw)[0]), [q, k, v, g]

            out.append(Method("mamba2", "linear Mamba-2 (fla chunk_simple_gla, q/k expanded)", simple_gla))
        elif peers.mamba_scan is not None:
            fn = peers.mamba_scan

            def ssd(base: dict):
                # x (B, T, H, P), dt (B, T, H) > 0, A (H,), B = k, C = q (B, T, ngroups=1, N): exp(dt*A) = exp(g)
                x = base["v"].detach().clone().requires_grad_()
                dt = (-base["g"]).detach().clone().requires_grad_()
                A = (-torch.ones(H, device=device)).requires_grad_()
                C, Bm = leaves(base, ["q", "k"])
                return (lambda: fn(x, dt, A, Bm, C, CHUNK)), [x, dt, A, Bm, C]

            out.append(Method("mamba2", "linear Mamba-2 (mamba_ssm mamba_chunk_scan_combined)", ssd))
        else:
            out.append(Method("mamba2", "linear Mamba-2", None, _missing(peers, "chunk_simple_gla", "mamba_ssm")))
    else:
        # fla's gated delta rule: q, k (B, T, H, K), v (B, T, H, V), g (B, T, H) log-decays, beta (B, T, H)
        if peers.fla_gdn is None:
            out.append(Method("fla_gdn", "linear GDN (fla chunk_gated_delta_rule)", None,
                              _missing(peers, "chunk_gated_delta_rule")))
        else:
            fn = peers.fla_gdn
            kw = layout_kwargs(fn)

            def fla_gdn(base: dict):
                q, k, v, g, beta = leaves(base, ["q", "k", "v", "g", "beta"])
                if shape.Hk != H:
                    q, k = (expand_heads(x.detach(), H).requires_grad_() for x in (q, k))
                return (lambda: fn(q, k, v, g, beta, **kw)[0]), [q, k, v, g, beta]

            out.append(Method("fla_gdn", "linear GDN (fla chunk_gated_delta_rule)", fla_gdn))

    # softmax attention: H heads of the value head dim (SDPA's GQA shares k/v, not q/k: no form of Hk < H here)
    D = shape.V

    def sdpa(base: dict):
        B, T = base["v"].shape[:2]
        gen = torch.Generator(device=device).manual_seed(1)
        q, k, v = (torch.randn(B, H, T, D, generator=gen, device=device).to(base["v"].dtype).requires_grad_()
                   for _ in range(3))

        def fwd() -> torch.Tensor:
            if device.type != "cuda":
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)
            from torch.nn.attention import SDPBackend, sdpa_kernel

            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):  # raises rather than falling back to another backend
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)

        return fwd, [q, k, v]

    out.append(Method("sdpa", f"SDPA flash attention (causal, {H} heads x {D})", sdpa))
    return out


def _missing(peers: Peers, *names: str) -> str:
    for n in names:
        if n in peers.missing:
            return "not installed" if "ModuleNotFound" in peers.missing[n] else f"error: {peers.missing[n]}"
    return "not installed" if "fla" in peers.missing else "n/a"


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
        return "OOM" if "out of memory" in str(e).lower() else f"error: {_short(e, 70)}"
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
            lines.append(f"{a.label} vs {b.label}: not compared ({_short(e, 70)})")
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


def table(variant: str, methods: list[Method], res: dict[str, dict[int, float | str]], lengths: list[int]) -> str:
    from results_md import markdown_table

    header = ["ms (fwd+bwd)"] + [f"T={T // 1024}K" if T % 1024 == 0 else f"T={T}" for T in lengths]
    rows = [[m.label] + [fmt(res[m.key][T]) for T in lengths] for m in methods]
    keys = {m.key for m in methods}
    for a, b, label in RATIOS[variant]:
        if a in keys and b in keys:
            rows.append([f"**{label}**"] + [fmt_ratio(ratio(res[a][T], res[b][T])) for T in lengths])
    return markdown_table(header, rows)


def targets(variant: str, shape_name: str, res: dict[str, dict[int, float | str]], lengths: list[int]) -> list[str]:
    """The issue's targets, read off this run (paper shapes only)."""
    if shape_name != "paper":
        return []

    def series(a: str, b: str) -> dict[int, float]:
        return {T: r for T in lengths if (r := ratio(res.get(a, {}).get(T), res.get(b, {}).get(T))) is not None}

    def verdict(ok: bool) -> str:
        return "met" if ok else "MISSED"

    out = []
    if variant == "mamba2":
        r = series("ours", "fla_ll")
        if r:
            bad = [T for T, x in r.items() if x >= 1]
            out.append(f"faster than fla's log-linear kernel at every T: {verdict(not bad)}"
                       + (f" (not at T={', '.join(map(str, bad))})" if bad else "")
                       + f"; ratios {_series(r)}")
        else:
            out.append("faster than fla's log-linear kernel at every T: not measured (fla or ours missing)")
        r = series("ours", "sdpa")
        if r:
            long = {T: x for T, x in r.items() if T >= TARGET_SDPA_FROM}
            out.append(f"faster than SDPA flash attention from T={TARGET_SDPA_FROM}: "
                       + (verdict(all(x < 1 for x in long.values())) if long else "not measured")
                       + (f"; at T={TARGET_SDPA_AIM} (aim): {r[TARGET_SDPA_AIM]:.2f}" if TARGET_SDPA_AIM in r else "")
                       + f"; crossover: {_crossover(r)}")
        r = series("ours", "mamba2")
        if r:
            worst = max(r, key=r.get)
            out.append(f"at most {TARGET_OVER_MAMBA2}x linear Mamba-2: {verdict(r[worst] <= TARGET_OVER_MAMBA2)} "
                       f"(worst {r[worst]:.2f} at T={worst})")
    else:
        for peer, name in (("fla_gdn", "fla's linear GDN"), ("ours_linear", "our linear GDN")):
            r = series("ours", peer)
            if TARGET_GDN_AT in r:
                out.append(f"at most {TARGET_OVER_GDN}x {name} at T={TARGET_GDN_AT}: "
                           f"{verdict(r[TARGET_GDN_AT] <= TARGET_OVER_GDN)} ({r[TARGET_GDN_AT]:.2f})")
        r = series("ours", "sdpa")
        if r:
            out.append(f"vs SDPA flash attention: crossover {_crossover(r)}")
    return out


def _series(r: dict[int, float]) -> str:
    return ", ".join(f"{T}: {x:.2f}" for T, x in r.items())


def _crossover(r: dict[int, float]) -> str:
    faster = [T for T, x in sorted(r.items()) if x < 1]
    if not faster:
        return "ours slower at every measured T"
    first = faster[0]
    everywhere = all(r[T] < 1 for T in r if T >= first)
    return f"ours faster from T={first}" + ("" if everywhere else " (not at every longer T)")


# ---------------------------------------------------------------------------------------------- run

def versions(peers: Peers) -> str:
    import triton

    dev = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU (no CUDA; Triton interpreter)"
    fla = peers.fla_version or "not installed"
    parts = [f"device {dev}", f"torch {torch.__version__} (CUDA {torch.version.cuda})", f"triton {triton.__version__}",
             f"fla-core {fla}"]
    if peers.mamba_ssm_version:
        parts.append(f"mamba_ssm {peers.mamba_ssm_version}")
    return ", ".join(parts)


def run_part(variant: str, shape_name: str, lengths: list[int], peers: Peers, device: torch.device,
             dtype: torch.dtype, smoke: bool) -> tuple[str, dict]:
    shape = (SMOKE_SHAPES if smoke else SHAPES)[(variant, shape_name)]
    methods = methods_for(variant, shape, peers, device)
    by_key = {m.key: m for m in methods}
    res: dict[str, dict[int, float | str]] = {m.key: {} for m in methods}
    notes: list[str] = []
    for i, T in enumerate(lengths):
        try:
            base = make_base(shape, T, variant == "gdn", dtype, device)
        except torch.cuda.OutOfMemoryError:
            for m in methods:
                res[m.key][T] = "OOM (inputs)"
            free_memory()
            continue
        if i == 0:
            if variant == "mamba2":
                pairs = [("ours", "fla_ll"), ("ours_linear", "mamba2")]
            else:
                pairs = [("ours_linear", "fla_gdn")]
            pairs = [(by_key[a], by_key[b]) for a, b in pairs if a in by_key and b in by_key]
            if variant == "mamba2" and "mamba_ssm" in by_key["mamba2"].label:
                pairs = pairs[:1]  # mamba_ssm's input is x*dt, not v: a different function of the same inputs
            agree = agreement(pairs, base)
            if agree:
                notes.append(f"forward agreement at T={T} (relative norm error, {str(dtype).split('.')[-1]}): "
                             + "; ".join(agree))
        for m in methods:
            res[m.key][T] = measure(m, base, device, smoke)
            print(f"  {variant}/{shape_name} T={T:>6} {m.label}: {fmt(res[m.key][T])}", flush=True)
        del base
        free_memory()

    title = (f"{TITLES[variant]}, {shape_name} shape: {shape.describe()}, chunk {CHUNK}, "
             f"{str(dtype).split('.')[-1]}, forward+backward ms (median)")
    lines = [f"### {title}\n"]
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    command = "python " + " ".join(shlex.quote(a) for a in sys.argv)
    lines.append(f"- run: {stamp}, `{command}`; {versions(peers)}")
    if variant == "mamba2":
        lines.append(
            "- ours: q/k shared by all heads (GQA, Hk=1), as in Mamba-2; fla's log-linear kernel gets the same "
            "Hk=1 q/k; chunk_simple_gla takes per-head q/k, so they are expanded (outside the timed region)"
        )
    lines += [f"- {n}" for n in notes]
    lines += [f"- target: {t}" for t in targets(variant, shape_name, res, lengths)]
    lines.append("")
    lines.append(table(variant, methods, res, lengths))
    raw = {"variant": variant, "shape": shape_name, "dims": shape.__dict__, "dtype": str(dtype),
           "ms": {m.label: {str(T): res[m.key][T] for T in lengths} for m in methods}, "notes": notes}
    return "\n".join(lines), raw


def merge_into_results(new_parts: dict[str, str]) -> str:
    """The section body: this run's parts plus the parts of the existing section that this run did not measure."""
    from results_md import RESULTS

    old = RESULTS.read_text() if RESULTS.exists() else ""
    m = re.search(rf"<!-- begin:{re.escape(SECTION)} -->(.*?)<!-- end:{re.escape(SECTION)} -->", old, re.S)
    parts = {}
    if m:
        for p in re.finditer(r"<!-- part:([\w.-]+) -->\n(.*?)<!-- /part:\1 -->\n", m.group(1), re.S):
            parts[p.group(1)] = p.group(2)
    parts.update(new_parts)
    intro = ("Forward+backward time of one call of the operator (benchmarks/kernels.py; its docstring says how the "
             "peers are called). Each table below is rewritten by the run that measured it; its first line names "
             "that run, its device and versions. Compare ratios within one table only.\n")
    ordered = [k for k in PART_ORDER if k in parts] + sorted(k for k in parts if k not in PART_ORDER)
    return intro + "\n" + "\n".join(f"<!-- part:{k} -->\n{parts[k].rstrip()}\n<!-- /part:{k} -->\n" for k in ordered)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", choices=["mamba2", "gdn", "all"], default="all")
    parser.add_argument("--shape", choices=["paper", "mqar", "all"], default="all",
                        help="mamba2: paper K=128 V=64, mqar K=V=16; gdn: paper K=V=64, mqar K=V=16")
    parser.add_argument("--T", type=int, nargs="+", help=f"sequence lengths (default {LENGTHS})")
    parser.add_argument("--quick", action="store_true", help="print only; do not write benchmarks/RESULTS.md")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny shapes on any device (CPU: Triton interpreter, wall-clock timing); prints only")
    parser.add_argument("--json", help="also write the raw measurements to this file")
    a = parser.parse_args()

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type != "cuda" and not a.smoke:
        parser.error("needs a CUDA device (use --smoke to check the script on CPU)")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    lengths = a.T or ([64, 100] if a.smoke else LENGTHS)
    variants = ["mamba2", "gdn"] if a.variant == "all" else [a.variant]
    shapes = ["paper", "mqar"] if a.shape == "all" else [a.shape]

    peers = load_peers()
    print(versions(peers), flush=True)
    for name, why in peers.missing.items():
        print(f"  {name}: {why}", flush=True)

    parts, raws = {}, []
    for variant in variants:
        for shape_name in shapes:
            text, raw = run_part(variant, shape_name, lengths, peers, device, dtype, a.smoke)
            parts[f"{variant}-{shape_name}"] = text
            raws.append(raw)
            print("\n" + text, flush=True)

    if a.json:
        with open(a.json, "w") as f:
            json.dump(raws, f, indent=1)
    if a.quick or a.smoke:
        return
    from results_md import write_section

    path = write_section(SECTION, merge_into_results(parts))
    print(f"\nwritten to {path}")


if __name__ == "__main__":
    assert math.log2(CHUNK).is_integer()
    main()
