#!/bin/bash
# Run from the repository root on one CUDA GPU: `loglinear doctor` beside the sweep agreement, then the Mamba-2
# kernel benchmark at the paper's shape alone. As recorded, doctor was stopped after 160 s and the benchmark after
# 140 s (timeout, exit 124): their logs end there.
set -u
L=${LOGS:-logs}; mkdir -p "$L"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$L/env.txt"
python3 -c "import torch,triton;print(torch.__version__,triton.__version__,torch.cuda.get_device_name())" >> "$L/env.txt"
python3 -m loglinear doctor > "$L/doctor.log" 2>&1 &
python3 -m benchmarks.sweep_agreement --out "$L/gc_sweep/sweep" > "$L/gc_sweep.out" 2>&1 &
wait
python3 -m benchmarks.kernels --variant mamba2 --shape paper --json "$L/kernels.json" > "$L/kernels.log" 2>&1
