"""The fused kernels compiled for a GPU that is not here.

Triton's interpreter runs the kernels on CPU tensors but never compiles them, so a kernel that only a
GPU build rejects (a dot shape, a type its lowering refuses, a constexpr branch the interpreter never
types) would first fail on a GPU. Two steps close that gap without one:

1. `recorded_launches()`: run the operator inside it (in the interpreter) and it records every kernel
   launch: the kernel, each runtime argument's Triton type (a tensor's dtype, a scalar's width), the
   constexprs' values and the launch options (num_warps) - exactly what the launchers chose.
2. `python -m tests.kernels.offline LAUNCHES.json [--arch 90a] [--report OUT.json]`, in a process
   without TRITON_INTERPRET: compiles each distinct launch for that architecture down to machine code
   (Triton and the ptxas it ships), reads the shared memory each asks for per block (`metadata.shared`,
   what the launch requests) and exits 1 naming every launch that failed to compile or asks for more
   than that architecture's block gets (kernels/triton_limits.SHARED_MEMORY); `--report` writes each
   launch's outcome. Triton keeps each compiled kernel in its cache (TRITON_CACHE_DIR), keyed by a
   digest of the kernel's source, the target and the options: a kernel compiled there before is read
   back, not compiled again.

A process cannot do both: `triton.jit` reads TRITON_INTERPRET when the kernel modules are imported.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import inspect
import json
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from loglinear.kernels.triton_limits import SHARED_MEMORY

FUSED = "loglinear.kernels.fused"
KERNEL_MODULES = ("intra", "scan", "delta_prep")
"""The modules of this package that define launched kernels."""
LAUNCH_OPTIONS = ("num_warps", "num_stages")
POINTER_TYPES = {torch.float64: "*fp64", torch.float32: "*fp32", torch.float16: "*fp16", torch.bfloat16: "*bf16",
                 torch.int64: "*i64", torch.int32: "*i32", torch.bool: "*i1"}
INT32 = range(-(2**31), 2**31)


@dataclass(frozen=True)
class Launch:
    """One kernel launch as the compiler sees it: each runtime argument by its Triton type, each constexpr
    (and each None, which Triton treats as one) by its value, and the launch options."""

    kernel: str  # "intra.intra_fwd_kernel"
    types: tuple[tuple[str, str], ...]  # every argument in order: "*bf16" / "i32" / "i64" / "i1" / "fp32" / "constexpr"
    constants: tuple[tuple[str, object], ...]  # (name, value) of the constexprs
    options: tuple[tuple[str, int], ...]

    def to_json(self) -> dict:
        return {"kernel": self.kernel, "types": dict(self.types), "constants": dict(self.constants),
                "options": dict(self.options)}

    @classmethod
    def from_json(cls, d: dict) -> Launch:
        return cls(d["kernel"], tuple(d["types"].items()), tuple(d["constants"].items()),
                   tuple(sorted(d["options"].items())))

    def signature(self) -> tuple[dict[str, str], dict[str, object]]:
        """Triton's (signature, constexprs) of this launch."""
        return dict(self.types), dict(self.constants)


def _triton_type(name: str, value: object) -> str:
    if isinstance(value, torch.Tensor):
        return POINTER_TYPES[value.dtype]
    if isinstance(value, bool):
        return "i1"
    if isinstance(value, int):
        return "i32" if value in INT32 else "i64"
    if isinstance(value, float):
        return "fp32"
    raise TypeError(f"argument {name}={value!r} has no Triton type")


def _launch(kernel: str, fn, args: tuple, kwargs: dict) -> Launch:
    params = inspect.signature(fn).parameters
    bound = dict(zip(list(params)[: len(args)], args, strict=True))
    bound.update({k: v for k, v in kwargs.items() if k not in LAUNCH_OPTIONS})
    constexpr = {name for name, p in params.items() if "constexpr" in str(p.annotation)}
    constants = tuple((n, bound[n]) for n in params if n in constexpr or bound[n] is None)
    types = tuple((n, "constexpr" if n in dict(constants) else _triton_type(n, bound[n])) for n in params)
    options = tuple(sorted((k, int(v)) for k, v in kwargs.items() if k in LAUNCH_OPTIONS))
    return Launch(kernel, types, constants, options)


def _kernels() -> Iterator[tuple[str, object]]:
    for name in KERNEL_MODULES:
        module = importlib.import_module(f"{FUSED}.{name}")
        for attr, obj in vars(module).items():
            if hasattr(obj, "run") and getattr(obj, "fn", None) is not None and obj.fn.__module__ == module.__name__:
                yield f"{name}.{attr}", obj


@contextlib.contextmanager
def recorded_launches() -> Iterator[list[Launch]]:
    """Every fused-kernel launch made inside the block, in order (the kernels still run)."""
    launches: list[Launch] = []
    wrapped = []
    for name, kernel in _kernels():
        def run(*args, _name=name, _fn=kernel.fn, _run=kernel.run, **kwargs):
            launch_kwargs = {k: v for k, v in kwargs.items() if k not in ("grid", "warmup")}
            launches.append(_launch(_name, _fn, args, launch_kwargs))
            return _run(*args, **kwargs)

        kernel.run = run  # an instance attribute: kernel[grid](...) calls self.run
        wrapped.append(kernel)
    try:
        yield launches
    finally:
        for kernel in wrapped:
            del kernel.run


def compile_launch(launch: Launch, arch: str = "90a"):
    """The compiled kernel of `launch` for CUDA architecture `arch` (e.g. "90a", "80"); raises on failure."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    module, attr = launch.kernel.split(".")
    fn = getattr(importlib.import_module(f"{FUSED}.{module}"), attr)
    sig, constants = launch.signature()
    capability = int(arch.rstrip("a"))
    return triton.compile(ASTSource(fn, sig, constants), target=GPUTarget("cuda", capability, 32),
                          options=dict(launch.options))


def distinct(launches: list[Launch]) -> list[Launch]:
    """Each compiled kernel once, in the order first launched."""
    return list(dict.fromkeys(launches))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Compile recorded fused-kernel launches for a GPU architecture.")
    parser.add_argument("launches", help="a JSON list of launches (Launch.to_json)")
    parser.add_argument("--arch", default="90a", choices=sorted(SHARED_MEMORY),
                        help="CUDA compute capability to compile for (default 90a, H100; 80, A100)")
    parser.add_argument("--report", help="write each distinct launch's outcome here: a JSON list of "
                                         "{launch, shared (bytes per block), error (null if none)}")
    args = parser.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        parser.error("unset TRITON_INTERPRET: the interpreter never compiles")
    import triton

    limit = SHARED_MEMORY[args.arch]
    with open(args.launches) as f:
        launches = distinct([Launch.from_json(d) for d in json.load(f)])
    outcomes = []
    for launch in launches:
        start = time.perf_counter()
        shared = None
        try:
            shared = compile_launch(launch, args.arch).metadata.shared
            if shared > limit:
                raise MemoryError(f"asks for {shared} bytes of shared memory, sm_{args.arch} has {limit}")
        except Exception as e:  # every failure is reported; the exit status says there was one
            error = f"{type(e).__name__}: {e}"
            print(f"FAILED {launch.kernel} {dict(launch.constants)} {dict(launch.options)}\n  {error}", flush=True)
        else:
            error = None
            print(f"ok {launch.kernel} {shared} B shared ({time.perf_counter() - start:.1f} s)", flush=True)
        outcomes.append({"launch": launch.to_json(), "shared": shared, "error": error})
    failed = sum(o["error"] is not None for o in outcomes)
    print(f"{len(launches) - failed} of {len(launches)} launches compiled for sm_{args.arch} "
          f"with Triton {triton.__version__}")
    if args.report:
        with open(args.report, "w") as f:
            json.dump(outcomes, f)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
