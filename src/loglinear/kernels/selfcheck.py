"""The fused kernels check themselves before their first use on a device, and keep the verdict on disk.

The first time a process is about to run `impl="triton"` on a CUDA device (in a dtype), it runs, in a
child process (kernels/selfcheck_process.py: a kernel fault fails the check instead of the caller), the
fused kernels and `chunk` on `CASES` (both variants, odd T, K and V that are not powers of two,
grouped heads, an initial state, lam and lam=None, two chunk sizes) and, on a GPU, `FAULT_CASES` (the
shapes where GPUs have faulted: 2,048 tokens over many chunks, K 64 with V 64 and V 128, one q/k head, lam
and an initial state) in float32 and in the dtype in use, and compares the output, the final state and every
gradient. A known fault that stands on this GPU kind (kernels/triton_limits.py, kernels/verified_gpus.py)
refuses its calls whatever the verdict; the check runs its cases all the same, so the verdict says what the
kernels do there (how `loglinear doctor` and benchmarks/gpu_check.py verify a GPU kind). The
verdict is stored in the cache directory (`cache_dir()`), one file per key: the device's name and compute
capability, the torch, Triton and loglinear versions, a digest of the kernels' source and the dtype; any change
checks again. A failed check makes `impl="auto"` use `chunk` on that device (one warning) and an
explicit `impl="triton"` raise `SelfCheckFailed`, both with the same message.

LOGLINEAR_SELFCHECK (or `ModelConfig.selfcheck`): `auto` (use the stored verdict, check when there is
none), `force` (check again, once per process), `skip` (run the kernels unchecked).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.metadata
import json
import os
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from loglinear.kernels.fenwick import num_levels
from loglinear.kernels.impls import run_impl
from loglinear.kernels.selfcheck_process import run_check_in_child
from loglinear.kernels.state import LogLinearState
from loglinear.kernels.variant import Variant
from loglinear.kernels.verified_gpus import GpuKind, dtype_name, refusal

MODE_ENV = "LOGLINEAR_SELFCHECK"
CACHE_ENV = "LOGLINEAR_CACHE_DIR"
MODES = ("auto", "force", "skip")
CHECKED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
"""The input dtypes the fused kernels take (float64 is refused), so the dtypes a check can be for."""


@dataclass(frozen=True)
class Case:
    """One comparison: shapes, the variant, lam or None, an initial state's positions (one per sequence)."""

    B: int
    T: int
    H: int
    HK: int  # q/k heads (grouped when < H)
    K: int
    V: int
    delta: bool  # the delta rule (Gated DeltaNet) or a scalar decay (Mamba-2)
    levels: bool  # lam given, or None (a single state)
    positions: tuple[int, ...] | None  # where an initial state leaves each sequence; None: no initial state
    chunk_size: int

    def __str__(self) -> str:
        state = "" if self.positions is None else " state@" + ",".join(map(str, self.positions))
        return (f"{'gated_deltanet' if self.delta else 'mamba2'} B{self.B} T{self.T} H{self.H} HK{self.HK} "
                f"K{self.K} V{self.V} {'lam' if self.levels else 'lam=None'}{state} chunk{self.chunk_size}")


CASES = (
    Case(2, 21, 2, 1, 20, 12, delta=False, levels=True, positions=(3, 18), chunk_size=16),
    Case(1, 21, 2, 1, 20, 12, delta=True, levels=True, positions=(18,), chunk_size=16),
    Case(1, 97, 2, 1, 20, 12, delta=False, levels=False, positions=(5,), chunk_size=64),
    Case(1, 45, 2, 1, 20, 12, delta=True, levels=False, positions=None, chunk_size=32),
    # 64-token chunks over several chunks, at the largest head dims the kernels take (triton_limits.MAX_K)
    Case(2, 150, 2, 2, 16, 16, delta=True, levels=True, positions=(37, 100), chunk_size=64),
    Case(1, 130, 2, 1, 64, 24, delta=True, levels=False, positions=(37,), chunk_size=64),
    Case(1, 200, 2, 1, 128, 20, delta=False, levels=True, positions=(5,), chunk_size=64),
)
"""Small enough for Triton's interpreter on a CPU (tens of seconds); they run on every device."""

FAULT_CASES = (
    Case(2, 2048, 4, 1, 64, 128, delta=False, levels=True, positions=(37, 100), chunk_size=64),
    Case(2, 2048, 4, 1, 64, 64, delta=False, levels=True, positions=(37, 100), chunk_size=64),
    Case(2, 2048, 4, 1, 64, 128, delta=True, levels=True, positions=(37, 100), chunk_size=64),
    Case(2, 2048, 4, 1, 64, 64, delta=True, levels=True, positions=(37, 100), chunk_size=64),
    Case(2, 1000, 4, 4, 64, 128, delta=False, levels=True, positions=(37, 100), chunk_size=64),
    Case(2, 1000, 4, 4, 16, 16, delta=True, levels=True, positions=None, chunk_size=64),
)
"""The shapes of tests/kernels/test_fused_gpu.py where GPUs faulted in bf16 before the fused path read float32
copies of its inputs (records/README.md): outputs that differed between identical calls and one
element off by 0.24 (Mamba-2, T 2048, K 64, V 128 and V 64, one q/k head, lam and an initial state at 37 and 100;
and at T 1000 with four q/k heads), an out-of-bounds read and wrong gradients in the delta rule's backward
(the same shapes, and K = V = 16). Run on a GPU only: in Triton's interpreter one of them takes about a minute."""


def cases_for(device: torch.device) -> tuple[Case, ...]:
    """The cases of a check on `device`: CASES, and FAULT_CASES on a GPU."""
    return CASES + FAULT_CASES if device.type == "cuda" else CASES


# Tolerances. A correct fused path differs from the float32 chunk reference by rounding only:
# - the rounding of its inputs and outputs in the dtype, which chunk run in that dtype shows too, so it is
#   measured on each case: chunk in the dtype against chunk in float64 on the same inputs, per quantity;
# - the rounding of its dots, which chunk does not share: float32 for float32 inputs, tf32 (an 11-bit
#   significand, unit roundoff 2^-11) for half-precision ones (`fused.common.dot_precision`); its unit
#   roundoff is the floor of the measured rounding.
# Measured in Triton's interpreter on CASES, the fused path's error against float64 is at most 1.6 times
# chunk's own in float32, bf16 and fp16 (every quantity); the float32 reference's own error adds up to as
# much again, and a GPU sums in another order: SLACK covers that about ten times over. The float32
# tolerances it gives on CASES are 2.5e-6 to 4.5e-5, below what a bug costs: the tests' kernels off by 0.1%
# (1e-3), a tf32 dot in a float32 kernel (~5e-4), a wrong index or an unwritten block (order 1, or NaN).
SLACK = 32.0


@dataclass(frozen=True)
class Outcome:
    """A check's result: `failure` (None when it passed) and its closest call, the largest error / tolerance."""

    failure: str | None
    closest: str  # e.g. "dg of mamba2 B2 T21 ... (bfloat16): 2.1e-03, 0.07 of its tolerance"


def run_check(device: torch.device, dtype: torch.dtype, cases: tuple[Case, ...] | None = None) -> Outcome:
    """`triton` against `chunk` on every case (None: `cases_for(device)`) in float32 and in `dtype`; stops at the
    first failure.

    On a CPU device the kernels run in Triton's interpreter (TRITON_INTERPRET=1 must be set before
    they are imported). Runs with gradients on and autocast off, whatever the caller's context.
    """
    dtypes = (torch.float32,) if dtype == torch.float32 else (torch.float32, dtype)
    cases = cases_for(device) if cases is None else cases
    closest, worst = "", -1.0
    with torch.inference_mode(False), torch.enable_grad(), torch.autocast(device.type, enabled=False):
        for d in dtypes:
            for i, case in enumerate(cases):
                where = f"{case} ({dtype_name(d)})"
                try:
                    errors = _compare(case, i, device, d)
                except Exception as e:  # a compile error, a launch failure: the kernels cannot run here
                    return Outcome(f"{where}: the fused kernels raised {type(e).__name__}: {_first_line(e)}",
                                   closest)
                if isinstance(errors, str):
                    return Outcome(f"{where}: {errors}", closest)
                for quantity, error, tolerance in errors:
                    if not error <= tolerance:  # NaN (an element no kernel wrote) fails too
                        return Outcome(f"{where}: {quantity} relative error {error:.1e}, tolerance {tolerance:.1e}",
                                       closest)
                    if error / tolerance > worst:
                        worst = error / tolerance
                        closest = f"{quantity} of {where}: {error:.1e}, {worst:.2f} of its tolerance"
    return Outcome(None, closest)


def fault_on(device: torch.device, variant: Variant, dtype: torch.dtype) -> str | None:
    """Why `variant` in `dtype` is refused on this device: a known fault (kernels/triton_limits.py) that no record
    of a passing check on this GPU kind lifts (kernels/verified_gpus.py); None where the kernels may run."""
    if device.type != "cuda" or versions()["triton"] is None:
        return None
    return refusal(GpuKind.of(device, versions()["triton"]), variant, dtype)


def _compare(case: Case, seed: int, device: torch.device,
             dtype: torch.dtype) -> list[tuple[str, float, float]] | str:
    """(quantity, relative error of triton against the float32 chunk reference, tolerance) per quantity and
    per measure (the norm of the error, and its largest element), or what differed between two identical
    triton calls (the first of them the first at this shape)."""
    from loglinear.kernels.fused.common import dot_precision, poison_outputs

    inputs, state, weights = _inputs(case, seed, device, dtype)
    with poison_outputs():  # an element a kernel forgets to write comes back as NaN
        got = _outputs("triton", case, inputs, state, weights, dtype)
        again = _outputs("triton", case, inputs, state, weights, dtype)
    for name in got:
        if not _identical(got[name], again[name]):
            largest = float((got[name].double() - again[name].double()).abs().nan_to_num(float("inf")).max())
            return (f"not deterministic: {name} differs between two identical calls (largest difference "
                    f"{largest:.1e})")
    reference = _outputs("chunk", case, inputs, state, weights, torch.float32)
    exact = _outputs("chunk", case, inputs, state, weights, torch.float64)
    own = reference if dtype == torch.float32 else _outputs("chunk", case, inputs, state, weights, dtype)
    dot_roundoff = 2.0**-24 if dot_precision(dtype) == "ieee" else 2.0**-11
    return [(f"{name}{label}", measure(got[name], reference[name]),
             SLACK * max(measure(own[name], exact[name]), dot_roundoff))
            for name in reference for label, measure in (("", _relative), (" (largest element)", _largest))]


def _inputs(case: Case, seed: int, device: torch.device, dtype: torch.dtype):
    """float64 inputs, initial state and loss weights, each rounded to `dtype` (so every run sees the same values)."""
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    def uniform(*shape: int) -> Tensor:
        return torch.rand(*shape, generator=gen, dtype=torch.float64)

    B, T, H, HK, K, V = case.B, case.T, case.H, case.HK, case.K, case.V
    start = max(case.positions or (0,))
    L = num_levels(start + T) if case.levels else 1
    k = rand(B, T, HK, K)
    inputs = {
        "q": rand(B, T, HK, K) / K**0.5, "k": k / k.norm(dim=-1, keepdim=True), "v": rand(B, T, H, V),
        "g": -1.5 * uniform(B, T, H), "lam": uniform(B, T, H, L) + 0.1 if case.levels else None,
        "beta": 2 * uniform(B, T, H) if case.delta else None,
    }
    state = None if case.positions is None else (0.3 * rand(B, H, L, V, K), torch.tensor(case.positions))
    weights = (rand(B, T, H, V), rand(B, H, L, V, K))  # the loss: a fixed projection of the output and final state

    def put(x: Tensor) -> Tensor:
        return x.to(dtype).to(torch.float64).to(device)

    inputs = {n: None if x is None else put(x) for n, x in inputs.items()}
    state = None if state is None else (put(state[0]), state[1].to(device))
    return inputs, state, tuple(put(w) for w in weights)


def _outputs(impl: str, case: Case, inputs: dict, state, weights, dtype: torch.dtype) -> dict[str, Tensor]:
    """Output, final state and the gradients of every input (and of the initial state) of one run in `dtype`."""
    xs = {n: None if x is None else x.to(dtype, copy=True).requires_grad_() for n, x in inputs.items()}
    initial = None if state is None else LogLinearState(state[0].to(dtype, copy=True).requires_grad_(), state[1])
    o, final = run_impl(impl, *xs.values(), initial_state=initial, output_final_state=True,
                        chunk_size=case.chunk_size)
    ((o * weights[0].to(o.dtype)).sum() + (final.levels * weights[1].to(final.levels.dtype)).sum()).backward()
    out = {"o": o.detach(), "final": final.levels.detach()}
    out.update({f"d{n}": x.grad for n, x in xs.items() if x is not None})
    if initial is not None:
        out["dstate"] = initial.levels.grad
    return out


def _relative(a: Tensor, b: Tensor) -> float:
    """||a - b|| / ||b|| in float64 (NaN when `a` has a non-finite entry)."""
    a, b = a.double(), b.double()
    if not bool(torch.isfinite(a).all()):
        return float("nan")
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def _largest(a: Tensor, b: Tensor) -> float:
    """max |a - b| / max |b| in float64 (NaN when `a` has a non-finite entry): a few wrong elements that the
    norm hides show here."""
    a, b = a.double(), b.double()
    if not bool(torch.isfinite(a).all()):
        return float("nan")
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def _identical(a: Tensor, b: Tensor) -> bool:
    """Bitwise the same values (NaN where the other has NaN)."""
    return bool(((a == b) | (a.isnan() & b.isnan())).all())


def _first_line(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return text[0][:300] if text else ""


# --- verdicts and their cache ---------------------------------------------------------------------


class SelfCheckFailed(RuntimeError):
    """`impl="triton"` on a device whose fused kernels failed the self-check."""


class SelfCheckWarning(UserWarning):
    """`impl="auto"` falls back to `chunk` on a device whose fused kernels failed the self-check."""


@dataclass(frozen=True)
class Verdict:
    """The self-check's verdict for one key (device, versions, dtype).

    status: "passed", "failed" or "skipped" (the check was turned off); source: "run" (this process ran
    it), "cache" (read from `path`), "skip" or "known fault" (a fault that stands on this GPU kind: `fault_on`);
    path: the file that stores it (None when skipped, refused by a known fault, or run but not stored: the cache
    folder could not be written).
    """

    status: str
    key: dict[str, str | None]
    path: str | None
    source: str
    failure: str | None = None
    closest: str = ""
    checked_at: str | None = None

    def record(self) -> dict[str, Any]:
        """What result.json keeps of it."""
        return {"status": self.status, "device": self.key["device"], "dtype": self.key["dtype"],
                "failure": self.failure, "source": self.source, "checked_at": self.checked_at, "path": self.path}

    @property
    def stored_text(self) -> str:
        return f"The verdict is stored in {self.path}" if self.path else "The verdict could not be stored"

    def message(self, consequence: str) -> str:
        if self.source == "known fault":
            return (f"the fused Triton kernels are refused on {self.key['device']} ({self.key['dtype']}): "
                    f"{self.failure}. {consequence}.")
        return (f"the fused Triton kernels failed their self-check on {self.key['device']} ({self.key['dtype']}): "
                f"{self.failure}. {consequence}. {self.stored_text}; {MODE_ENV}=force checks "
                f"again (so does `loglinear doctor`), {MODE_ENV}=skip runs the kernels unchecked.")


def mode_of(setting: str | None = None) -> str:
    """The self-check mode: `setting` (a model's `selfcheck` key) when given, else LOGLINEAR_SELFCHECK (empty: unset),
    else auto; an unknown mode is a ValueError naming where it came from and the valid ones."""
    mode = setting if setting is not None else os.environ.get(MODE_ENV) or "auto"
    if mode not in MODES:
        source = "ModelConfig.selfcheck" if setting is not None else MODE_ENV
        raise ValueError(f"{source}: unknown self-check mode {mode!r}; valid: {', '.join(MODES)}")
    return mode


def cache_dir() -> Path:
    """LOGLINEAR_CACHE_DIR, else $XDG_CACHE_HOME/loglinear, else ~/.cache/loglinear."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "loglinear"


def cache_key(device: torch.device, dtype: torch.dtype) -> dict[str, str | None]:
    """What a verdict holds for: the device, every version that could change the kernels' numbers, the dtype."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        capability: str | None = "{}.{}".format(*torch.cuda.get_device_capability(device))
    else:
        name, capability = f"{device.type} (Triton interpreter)", None
    return {"device": name, "capability": capability, **versions(), "kernels": kernels_digest(),
            "dtype": dtype_name(dtype)}


@functools.cache
def versions() -> dict[str, str | None]:
    """torch, Triton and loglinear versions (None: not installed); read once per process."""
    return {"torch": torch.__version__, "triton": package_version("triton"), "loglinear": package_version("loglinear")}


def package_version(distribution: str) -> str | None:
    """The installed version of a distribution, None when it is not installed."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.cache
def kernels_digest() -> str:
    """A digest of the kernels' source (this package): an edited checkout checks again without a new version."""
    digest = hashlib.sha256()
    root = Path(__file__).parent
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def cache_path(key: dict[str, str | None]) -> Path:
    text = json.dumps(key, sort_keys=True)
    return cache_dir() / f"selfcheck-{hashlib.sha256(text.encode()).hexdigest()[:16]}.json"


_VERDICTS: dict[str, Verdict] = {}  # this process's verdicts by cache path
_FORCED: set[str] = set()  # paths checked again in this process under `force`
_WARNED: set[str] = set()  # paths whose fallback warning was given


def verdict(device: torch.device, dtype: torch.dtype, mode: str = "auto") -> Verdict:
    """The verdict for (device, dtype): this process's, else the stored one, else a check run now (and stored)."""
    key = cache_key(device, dtype)
    path = cache_path(key)
    if mode == "skip":
        return Verdict("skipped", key, None, "skip")
    slot = str(path)
    if mode == "force" and slot not in _FORCED:
        _FORCED.add(slot)
        _VERDICTS.pop(slot, None)
    elif slot not in _VERDICTS:
        stored = None if mode == "force" else _read(path, key)
        if stored is not None:
            _VERDICTS[slot] = stored
    if slot not in _VERDICTS:
        if device.type == "cuda":
            outcome = Outcome(*run_check_in_child(str(device), dtype_name(dtype)))
        else:
            outcome = run_check(device, dtype)
        checked_at = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        status = "passed" if outcome.failure is None else "failed"
        found = Verdict(status, key, slot, "run", outcome.failure, outcome.closest, checked_at)
        _VERDICTS[slot] = found if _write(path, found) else replace(found, path=None)
    return _VERDICTS[slot]


@torch.compiler.disable  # file reads and a warning: run as Python, never traced into a compiled model's graph
def checked_impl(requested: str, device: torch.device, dtype: torch.dtype, mode: str,
                 variant: Variant = Variant.SCALAR_DECAY) -> tuple[str, Verdict]:
    """The implementation to run where "triton" was chosen (`requested` "auto" or "triton"), and the verdict
    behind it: "triton" unless the check failed or a known fault stands for this GPU kind, variant and dtype
    (`fault_on`: no record of a passing check lifts it); then "chunk" with one warning for "auto", and
    `SelfCheckFailed` for an explicit "triton"."""
    refused = fault_on(device, variant, dtype)
    if refused is not None:
        key = cache_key(device, dtype)
        found = Verdict("failed", key, None, "known fault", refused)
        slot = f"known fault: {refused}"
    else:
        found = verdict(device, dtype, mode)
        slot = str(cache_path(found.key))
        if found.status != "failed":
            return "triton", found
    if requested == "triton":
        raise SelfCheckFailed(found.message("impl='triton' refuses to run them"))
    if slot not in _WARNED:
        _WARNED.add(slot)
        warnings.warn(found.message("impl='auto' uses 'chunk' on this device instead"), SelfCheckWarning,
                      stacklevel=4)
    return "chunk", found


def _read(path: Path, key: dict[str, str | None]) -> Verdict | None:
    """The stored verdict for `key`, or None (no file, an unreadable one, or one for another key)."""
    try:
        stored = json.loads(path.read_text())
        if stored.get("key") != key or stored.get("status") not in ("passed", "failed"):
            return None
        return Verdict(stored["status"], key, str(path), "cache", stored.get("failure"), stored.get("closest", ""),
                       stored.get("checked_at"))
    except (OSError, ValueError, AttributeError):
        return None


def _write(path: Path, found: Verdict) -> bool:
    """Store a verdict atomically (a temporary file renamed over the target); False when it could not be: a cache
    that cannot be written only costs a check in the next process, so that is a warning."""
    fields = {k: v for k, v in asdict(found).items() if k not in ("path", "source")}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(fields, f, indent=2)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
    except OSError as e:
        warnings.warn(f"the self-check verdict could not be stored in {path} ({e}); the next process checks again",
                      SelfCheckWarning, stacklevel=3)
        return False
    return True
