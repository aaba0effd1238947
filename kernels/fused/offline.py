"""The fused kernels compiled for a GPU that is not here.

Triton's interpreter runs the kernels on CPU tensors but never compiles them, so a kernel that only a
GPU build rejects (a dot shape, a type its lowering refuses, a constexpr branch the interpreter never
types) would first fail on a lent GPU. Two steps close that gap without one:

1. `recorded_launches()`: run the operator inside it (in the interpreter) and it records every kernel
   launch: the kernel, each argument's type (a tensor's dtype, a scalar's kind) and constexpr values,
   and the launch options (num_warps) - exactly what the launchers chose.
2. `python -m loglinear.kernels.fused.offline LAUNCHES.json [--arch 90a]`, in a process without
   TRITON_INTERPRET: compiles each distinct launch for that architecture down to machine code (Triton
   and the ptxas it ships) and exits 1 naming every launch that failed.

A process cannot do both: `triton.jit` reads TRITON_INTERPRET when the kernel modules are imported.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

import torch

KERNEL_MODULES = ("intra", "scan", "delta_prep")
"""The modules of this package that define launched kernels."""
LAUNCH_OPTIONS = ("num_warps", "num_stages")
POINTER_TYPES = {torch.float64: "*fp64", torch.float32: "*fp32", torch.float16: "*fp16", torch.bfloat16: "*bf16",
                 torch.int64: "*i64", torch.int32: "*i32", torch.bool: "*i1"}
INT32 = range(-(2**31), 2**31)


@dataclass(frozen=True)
class Launch:
    """One kernel launch as the compiler sees it: runtime values are reduced to their types."""

    kernel: str  # "intra.intra_fwd_kernel"
    args: tuple[tuple[str, str | int | bool | float | None], ...]  # (name, "*bf16" / "i32" / "fp32" / value)
    options: tuple[tuple[str, int], ...]

    def to_json(self) -> dict:
        return {"kernel": self.kernel, "args": [list(a) for a in self.args], "options": dict(self.options)}

    @classmethod
    def from_json(cls, d: dict) -> Launch:
        return cls(d["kernel"], tuple(tuple(a) for a in d["args"]), tuple(sorted(d["options"].items())))


def _describe(value: object) -> str | int | bool | float | None:
    """A tensor by its pointer type; a scalar as it is (a runtime int's width, or a constexpr's value)."""
    return POINTER_TYPES[value.dtype] if isinstance(value, torch.Tensor) else value


def _launch(kernel: str, arg_names: list[str], args: tuple, kwargs: dict) -> Launch:
    bound = dict(zip(arg_names[: len(args)], args, strict=True))
    bound.update({k: v for k, v in kwargs.items() if k not in LAUNCH_OPTIONS})
    options = tuple(sorted((k, int(v)) for k, v in kwargs.items() if k in LAUNCH_OPTIONS))
    return Launch(kernel, tuple((name, _describe(bound[name])) for name in arg_names), options)


def _kernels() -> Iterator[tuple[str, object]]:
    for name in KERNEL_MODULES:
        module = importlib.import_module(f"{__package__}.{name}")
        for attr, obj in vars(module).items():
            if hasattr(obj, "run") and hasattr(obj, "arg_names") and getattr(obj, "fn", None) is not None:
                if obj.fn.__module__ == module.__name__:
                    yield f"{name}.{attr}", obj


@contextlib.contextmanager
def recorded_launches() -> Iterator[list[Launch]]:
    """Every fused-kernel launch made inside the block, in order (the kernels still run)."""
    launches: list[Launch] = []
    wrapped = []
    for name, kernel in _kernels():
        def run(*args, _name=name, _kernel=kernel, _run=kernel.run, **kwargs):
            launch_kwargs = {k: v for k, v in kwargs.items() if k not in ("grid", "warmup")}
            launches.append(_launch(_name, _kernel.arg_names, args, launch_kwargs))
            return _run(*args, **kwargs)

        kernel.run = run  # an instance attribute: kernel[grid](...) calls self.run
        wrapped.append(kernel)
    try:
        yield launches
    finally:
        for kernel in wrapped:
            del kernel.run


def signature(fn, launch: Launch) -> tuple[dict[str, str], dict[str, object]]:
    """Triton's (signature, constexprs) of a launch of the JIT function `fn`."""
    values = dict(launch.args)
    sig, constants = {}, {}
    for p in fn.params:
        value = values[p.name]
        if p.is_constexpr or value is None:
            sig[p.name], constants[p.name] = "constexpr", value
        elif isinstance(value, str) and value.startswith("*"):
            sig[p.name] = value
        elif isinstance(value, bool):
            sig[p.name] = "i1"
        elif isinstance(value, int):
            sig[p.name] = "i32" if value in INT32 else "i64"
        elif isinstance(value, float):
            sig[p.name] = "fp32"
        else:
            raise TypeError(f"{launch.kernel}: argument {p.name}={value!r} has no Triton type")
    return sig, constants


def compile_launch(launch: Launch, arch: str = "90a"):
    """The compiled kernel of `launch` for CUDA architecture `arch` (e.g. "90a", "80"); raises on failure."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    module, attr = launch.kernel.split(".")
    fn = getattr(importlib.import_module(f"{__package__}.{module}"), attr)
    sig, constants = signature(fn, launch)
    capability = int(arch.rstrip("a"))
    return triton.compile(ASTSource(fn, sig, constants), target=GPUTarget("cuda", capability, 32),
                          options=dict(launch.options))


def distinct(launches: list[Launch]) -> list[Launch]:
    """One launch per compiled kernel: runtime ints only matter by their width."""
    seen: dict[tuple, Launch] = {}
    for launch in launches:
        key = (launch.kernel, launch.options,
               tuple((n, ("i64" if v not in INT32 else "i32")) if isinstance(v, int) and not isinstance(v, bool)
                     else (n, v) for n, v in launch.args))
        seen.setdefault(key, launch)
    return list(seen.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Compile recorded fused-kernel launches for a GPU architecture.")
    parser.add_argument("launches", help="a JSON list of launches (Launch.to_json)")
    parser.add_argument("--arch", default="90a", help="CUDA compute capability to compile for (default 90a, H100)")
    args = parser.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        parser.error("unset TRITON_INTERPRET: the interpreter never compiles")
    import triton

    with open(args.launches) as f:
        launches = distinct([Launch.from_json(d) for d in json.load(f)])
    failed = []
    for launch in launches:
        start = time.perf_counter()
        try:
            compile_launch(launch, args.arch)
        except Exception as e:  # every failure is reported; the exit status says there was one
            failed.append(launch.kernel)
            print(f"FAILED {launch.kernel} {dict(launch.args)} {dict(launch.options)}\n  {type(e).__name__}: {e}")
            continue
        print(f"ok {launch.kernel} ({time.perf_counter() - start:.1f} s)", flush=True)
    print(f"{len(launches) - len(failed)} of {len(launches)} launches compiled for sm_{args.arch} "
          f"with Triton {triton.__version__}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
