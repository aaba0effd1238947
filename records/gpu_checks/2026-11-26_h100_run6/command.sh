#!/bin/bash
# Run from the repository root on one CUDA GPU: diverge.py's four sweeps (its docstring says which), their folders
# and its comparison in d6/ and d6.out.
set -u
export PYTHONUNBUFFERED=1
python3 records/gpu_checks/2026-11-26_h100_run6/diverge.py d6 > d6.out 2>&1
