#!/bin/bash
# Command 3, run from the repository root on one CUDA GPU, on the working tree of the change (float32 copies of the
# inputs, exact dots in the delta rule's preparation) with both bf16 refusals lifted: every GPU test, with the
# self-check skipped; beside them, compute-sanitizer memcheck on the delta rule's formerly failing probe case, then
# m2diag.py. A log that ends early is where a command was stopped (timeout, exit 124).
set -u
L=${LOGS:-logs}; mkdir -p "$L"
export PYTHONUNBUFFERED=1 LOGLINEAR_SELFCHECK=skip
sed -i 's/(3, 7, 1), Variant\./(3, 4), Variant./' src/loglinear/kernels/triton_limits.py
python3 -m pytest -m gpu -q -rfE -n 12 -p no:cacheprovider tests > "$L/gputests.log" 2>&1 &
(compute-sanitizer --tool memcheck --print-limit 3 --error-exitcode 99 \
   python3 -m benchmarks.fault_probe --case gdn mqar bf16 backward --T 1024 > "$L/probe.log" 2>&1
 python3 records/gpu_checks/2026-11-26_h100_bf16/m2diag.py > "$L/m2diag.log" 2>&1) &
wait
