"""The self-check's child process (kernels/selfcheck_process.py starts it): run the check, print its outcome
as one JSON line.

    python -m loglinear.kernels.selfcheck_child DEVICE DTYPE [--cases N]
"""

from __future__ import annotations

import argparse
import json

import torch

from loglinear.kernels.selfcheck import cases_for, run_check


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Run the fused kernels' self-check; print its outcome as JSON.")
    parser.add_argument("device")
    parser.add_argument("dtype", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--cases", type=int, default=None, help="only the first N cases (a quick check)")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    cases = cases_for(device)[: args.cases]
    outcome = run_check(device, getattr(torch, args.dtype), cases)
    print(json.dumps({"failure": outcome.failure, "closest": outcome.closest}))


if __name__ == "__main__":
    main()
