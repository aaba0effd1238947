"""One Mamba-2 bf16 forward at the failing shape (T from the command line), for compute-sanitizer racecheck."""

import sys

import torch

from tests.kernels.test_fused_gpu import Case, make_problem, run, seed_of

p = make_problem(Case(int(sys.argv[1]), 64, 128, 1, True, (37, 100)), False, torch.bfloat16, seed_of("det-fwd", False))
run(p, "triton", grads=False)
torch.cuda.synchronize()
print("done")
