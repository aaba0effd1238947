"""Mamba-2 bf16 forward on the GPU: the largest difference between 3 identical calls, per configuration (T 2,048,
K 64, V 128); run from the repository root with the tests importable."""

import torch

from tests.kernels.test_fused_gpu import Case, make_problem, run, seed_of

CONFIGS = [(1, True, (37, 100), "bf16"), (1, True, None, "bf16"), (1, False, (37, 100), "bf16"),
           (4, True, (37, 100), "bf16"), (1, True, (0, 0), "bf16"), (1, True, (37, 100), "up32")]

for HK, levels, prefix, kind in CONFIGS:
    case = Case(2048, 64, 128, HK, levels, prefix if prefix != (0, 0) else None)
    p = make_problem(case, False, torch.bfloat16, seed_of("det-fwd", False))
    if kind == "up32":  # the same bf16-rounded values, handed over as float32
        p.inputs = {n: None if t is None else t.float() for n, t in p.inputs.items()}
    outs = [run(p, "triton", grads=False) for _ in range(3)]
    d = max((outs[0]["o"].float() - o["o"].float()).abs().max().item() for o in outs[1:])
    ds = max((outs[0]["final_state.levels"] - o["final_state.levels"]).abs().max().item() for o in outs[1:])
    print(f"HK{HK} lam={levels} prefix={prefix} {kind}: o max diff {d:.3e}, final max diff {ds:.3e}", flush=True)
