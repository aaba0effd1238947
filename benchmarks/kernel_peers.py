"""What the kernel benchmark (benchmarks/kernels.py) times: `PEERS`, one registry of our fused operator and its
peers, each turning a variant, shape and device into a `Method` (a forward on fresh leaves, or why it cannot run).

The peers come from optional libraries (`load_libraries`): flash-linear-attention (fla) and mamba_ssm; a missing
or broken one makes its peers' cells say so instead of stopping the run.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

# kernel_inputs before loglinear.kernels: it selects Triton's interpreter on a machine without CUDA
from benchmarks.kernel_inputs import CHUNK, Shape, expand_heads, leaves
from loglinear.kernels import log_linear_attn, value_checks
from loglinear.registry import Registry

VARIANTS = ("mamba2", "gdn")


@dataclass
class Libraries:
    """Optional peer libraries: the callables, or why they are missing."""

    fla_version: str | None = None
    fla_loglinear: Callable | None = None
    fla_simple_gla: Callable | None = None
    fla_gdn: Callable | None = None
    mamba_ssm_version: str | None = None
    mamba_scan: Callable | None = None
    missing: dict[str, str] = field(default_factory=dict)


def short_error(e: BaseException, n: int = 90) -> str:
    """The first line of `e`, at most `n` characters, safe in a markdown table cell."""
    text = f"{type(e).__name__}: {e}".splitlines()[0] if str(e) else type(e).__name__
    return text[:n].replace("|", "/")


def load_libraries() -> Libraries:
    libs = Libraries()
    try:
        import fla

        libs.fla_version = getattr(fla, "__version__", "?")
    except Exception as e:  # noqa: BLE001  (a broken install is reported, not fatal)
        libs.missing["fla"] = short_error(e)
    if libs.fla_version is not None:
        for attr, module, name in (
            ("fla_loglinear", "fla.ops.log_linear_attn", "chunk_log_linear_attn"),
            ("fla_simple_gla", "fla.ops.simple_gla", "chunk_simple_gla"),
            ("fla_gdn", "fla.ops.gated_delta_rule", "chunk_gated_delta_rule"),
        ):
            try:
                setattr(libs, attr, getattr(__import__(module, fromlist=[name]), name))
            except Exception as e:  # noqa: BLE001
                libs.missing[name] = short_error(e)
    if libs.fla_simple_gla is None:
        try:
            import mamba_ssm
            from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined

            libs.mamba_ssm_version, libs.mamba_scan = getattr(mamba_ssm, "__version__", "?"), mamba_chunk_scan_combined
        except Exception as e:  # noqa: BLE001
            libs.missing["mamba_ssm"] = short_error(e)
    return libs


def missing_reason(libs: Libraries, *names: str) -> str:
    """The cell of a peer whose library (one of `names`) is missing."""
    for n in names:
        if n in libs.missing:
            return "not installed" if "ModuleNotFound" in libs.missing[n] else f"error: {libs.missing[n]}"
    return "not installed" if "fla" in libs.missing else "n/a"


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


FLA_HOPPER_REFUSED = ((3, 4, 0), (3, 7, 0))
"""Triton versions (inclusive) with which fla 0.6 refuses `chunk_gated_delta_rule` and `chunk_simple_gla` on Hopper
(compute capability 9.x): a miscompile of the gated chunk backward there, fixed from Triton 3.7.1."""


def triton_triple(version: str) -> tuple[int, ...]:
    return tuple(int("".join(c for c in part if c.isdigit()) or 0) for part in version.split("+")[0].split(".")[:3])


def fla_refusal(device: torch.device, triton_version: str | None = None) -> str | None:
    """Why fla's gated kernels (`chunk_gated_delta_rule`, `chunk_simple_gla`) are not tried on `device`, or None.

    The GPU found decides: fla refuses them on Hopper with the Triton versions of FLA_HOPPER_REFUSED (it raises
    when called), so they are not called there and the cell says why."""
    if device.type != "cuda":
        return None
    if triton_version is None:
        import triton

        triton_version = triton.__version__
    major, minor = torch.cuda.get_device_capability(device)
    low, high = FLA_HOPPER_REFUSED
    if major == 9 and low <= triton_triple(triton_version) <= high:
        return f"refused by fla on Hopper (sm_{major}{minor}) with Triton {triton_version}"
    return None


Setup = Callable[[dict], "tuple[Callable[[], torch.Tensor], list[torch.Tensor]]"]


@dataclass(frozen=True)
class Method:
    label: str
    setup: Setup | None  # base inputs -> (forward returning o, leaves); None: not runnable
    reason: str = ""  # the cell when setup is None


@dataclass(frozen=True)
class Setting:
    """What a peer is built for: the variant ("mamba2": beta None; "gdn": beta given), shape, libraries, device."""

    variant: str
    shape: Shape
    libs: Libraries
    device: torch.device

    @property
    def delta(self) -> bool:
        return self.variant == "gdn"


@dataclass(frozen=True)
class Peer:
    variants: tuple[str, ...]
    build: Callable[[Setting], Method]


PEERS: Registry[Peer] = Registry("kernel peer")


def peer(name: str, *variants: str) -> Callable[[Callable[[Setting], Method]], Callable[[Setting], Method]]:
    """Register `build` under `name` for `variants`; the registry's order is the order of a table's rows."""

    def add(build: Callable[[Setting], Method]) -> Callable[[Setting], Method]:
        PEERS.register(name)(Peer(variants, build))
        return build

    return add


def methods_for(variant: str, shape: Shape, libs: Libraries, device: torch.device) -> dict[str, Method]:
    """Every peer of `variant`, by name, in the registry's order."""
    setting = Setting(variant, shape, libs, device)
    return {name: p.build(setting) for name, p in PEERS.items() if variant in p.variants}


def _ours(s: Setting, levels: bool) -> Setup:
    def setup(base: dict):
        names = ["q", "k", "v", "g"] + (["lam"] if levels else []) + (["beta"] if s.delta else [])
        x = dict(zip(names, leaves(base, names), strict=True))

        def fwd() -> torch.Tensor:
            with value_checks(False):  # the checks' host sync is the caller's choice, not the kernels' cost
                return log_linear_attn(x["q"], x["k"], x["v"], x["g"], x.get("lam"), x.get("beta"),
                                       impl="triton", chunk_size=CHUNK)[0]

        return fwd, list(x.values())

    return setup


@peer("ours", *VARIANTS)
def ours(s: Setting) -> Method:
    return Method("ours log-linear (triton)", _ours(s, levels=True))


@peer("ours_linear", *VARIANTS)
def ours_linear(s: Setting) -> Method:
    return Method("ours linear (triton, lam=None)", _ours(s, levels=False))


@peer("fla_ll", "mamba2")
def fla_log_linear(s: Setting) -> Method:
    # fla's log-linear op: q/k (B, T, G, K) with H % G == 0 (fla 0.6.0; older versions require G == 1),
    # v (B, T, H, V), g (B, T, H) log-decays, level_scales (B, T, H, L) with L >= num_levels(T).
    label = "fla chunk_log_linear_attn"
    if s.libs.fla_loglinear is None:
        return Method(label, None, missing_reason(s.libs, "chunk_log_linear_attn"))
    if s.shape.K % 64:
        return Method(label, None, "n/a (K%64)")
    if s.shape.V & (s.shape.V - 1):
        return Method(label, None, "n/a (V not 2^n)")
    fn = s.libs.fla_loglinear
    kw = layout_kwargs(fn)

    def setup(base: dict):
        q, k, v, g, lam = leaves(base, ["q", "k", "v", "g", "lam"])
        return (lambda: fn(q, k, v, g, lam, **kw)[0]), [q, k, v, g, lam]

    return Method(label, setup)


@peer("mamba2", "mamba2")
def linear_mamba2(s: Setting) -> Method:
    """fla's simple GLA (scalar per-head decay; per-head q/k, so the shared ones are expanded), else mamba_ssm's
    chunked scan."""
    H = s.shape.H
    refusal = fla_refusal(s.device) if s.libs.fla_simple_gla is not None else None
    if s.libs.fla_simple_gla is not None and refusal is None:
        fn = s.libs.fla_simple_gla
        kw = layout_kwargs(fn)

        def simple_gla(base: dict):
            v, g = leaves(base, ["v", "g"])
            q, k = (expand_heads(base[n], H).requires_grad_() for n in ("q", "k"))
            return (lambda: fn(q, k, v, g, **kw)[0]), [q, k, v, g]

        return Method("linear Mamba-2 (fla chunk_simple_gla, q/k expanded)", simple_gla)
    if s.libs.mamba_scan is not None:
        fn = s.libs.mamba_scan

        def ssd(base: dict):
            # x (B, T, H, P), dt (B, T, H) > 0, A (H,), B = k, C = q (B, T, ngroups=1, N): exp(dt*A) = exp(g)
            x = base["v"].detach().clone().requires_grad_()
            dt = (-base["g"]).detach().clone().requires_grad_()
            A = (-torch.ones(H, device=s.device)).requires_grad_()
            C, Bm = leaves(base, ["q", "k"])
            return (lambda: fn(x, dt, A, Bm, C, CHUNK)), [x, dt, A, Bm, C]

        return Method("linear Mamba-2 (mamba_ssm mamba_chunk_scan_combined)", ssd)
    return Method("linear Mamba-2", None, refusal or missing_reason(s.libs, "chunk_simple_gla", "mamba_ssm"))


@peer("fla_gdn", "gdn")
def fla_gated_delta_rule(s: Setting) -> Method:
    # fla's gated delta rule: q, k (B, T, H, K), v (B, T, H, V), g (B, T, H) log-decays, beta (B, T, H)
    label = "linear GDN (fla chunk_gated_delta_rule)"
    if s.libs.fla_gdn is None:
        return Method(label, None, missing_reason(s.libs, "chunk_gated_delta_rule"))
    refusal = fla_refusal(s.device)
    if refusal:
        return Method(label, None, refusal)
    fn = s.libs.fla_gdn
    kw = layout_kwargs(fn)
    H = s.shape.H

    def setup(base: dict):
        q, k, v, g, beta = leaves(base, ["q", "k", "v", "g", "beta"])
        if s.shape.Hk != H:
            q, k = (expand_heads(x.detach(), H).requires_grad_() for x in (q, k))
        return (lambda: fn(q, k, v, g, beta, **kw)[0]), [q, k, v, g, beta]

    return Method(label, setup)


@peer("sdpa", *VARIANTS)
def sdpa_flash(s: Setting) -> Method:
    """Softmax attention: H heads of the value head dim (SDPA's GQA shares k/v, not q/k: no form of Hk < H)."""
    H, D, device = s.shape.H, s.shape.V, s.device

    def setup(base: dict):
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

    return Method(f"SDPA flash attention (causal, {H} heads x {D})", setup)
