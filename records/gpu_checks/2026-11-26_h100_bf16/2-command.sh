#!/bin/bash
# Command 2, run from the repository root on one CUDA GPU: copies of the tree with the bf16 refusals lifted and
# one variation each (Mamba-2 with float32 copies of its inputs; the delta rule as committed, with exact dots in its
# preparation, with exact dots everywhere) run the bf16 and determinism GPU tests of their variant; beside them,
# m2diag.py (which inputs make Mamba-2's bf16 output differ between calls) and compute-sanitizer racecheck on one
# failing call (m2race.py), and memcheck on the delta rule's failing probe case with exact preparation dots.
# A log that ends early is where a command was stopped (timeout, exit 124).
set -u
L=${LOGS:-logs}; mkdir -p "$L"; L=$(realpath "$L")
WORK=$(mktemp -d)
export PYTHONUNBUFFERED=1 LOGLINEAR_SELFCHECK=skip
F=src/loglinear/kernels/fused
mk() {  # a copy of the tree named $1, then sed expressions and the files they edit, in pairs
  local d=$WORK/$1; shift; cp -r "$PWD" "$d"
  sed -i 's/(3, 7, 1), Variant\./(3, 4), Variant./' "$d/src/loglinear/kernels/triton_limits.py"
  while [ $# -gt 0 ]; do sed -i "$1" "$d/$2"; shift 2; done
  (cd "$d" && git diff src/loglinear/kernels/fused) > "$L/$(basename "$d").diff" 2>&1
}
mk m5_upcast_tf32 's/PREC=dot_precision(v.dtype)/PREC="tf32"/' $F/intra.py 's/PREC=dot_precision(v.dtype)/PREC="tf32"/' $F/scan.py \
  's/q, k, v = q.contiguous(), k.contiguous(), v.contiguous()/q, k, v = q.float().contiguous(), k.float().contiguous(), v.float().contiguous()/' $F/function.py \
  's/lam = None if lam is None else lam.contiguous()/lam = None if lam is None else lam.float().contiguous()/' $F/function.py
mk m0_base
mk g0_base
mk g1_prep_ieee 's/PREC=dot_precision(q.dtype)/PREC="ieee"/' $F/delta_prep.py
mk g2_ieee_all 's/return "ieee" if dtype == torch.float32 else "tf32"/return "ieee"/' $F/common.py
t() {  # the bf16 and determinism GPU tests of variant $2 in the copy $1
  (cd "$WORK/$1" && PYTHONPATH=$WORK/$1/src:$WORK/$1 TRITON_CACHE_DIR=$WORK/tc_$1 python3 -m pytest -m gpu \
   tests/kernels/test_fused_gpu.py -k "$2 and (bf16 or deterministic)" -n 3 -q -rA -p no:cacheprovider > "$L/$1.log" 2>&1) &
}
t m5_upcast_tf32 mamba2; t g0_base gdn; t g1_prep_ieee gdn; t g2_ieee_all gdn
(cd "$WORK/m0_base" && export PYTHONPATH=$WORK/m0_base/src:$WORK/m0_base TRITON_CACHE_DIR=$WORK/tc_m0 &&
 python3 records/gpu_checks/2026-11-26_h100_bf16/m2diag.py > "$L/m2diag.log" 2>&1 &&
 compute-sanitizer --tool racecheck --racecheck-report hazard --print-limit 5 \
   python3 records/gpu_checks/2026-11-26_h100_bf16/m2race.py 2048 > "$L/m2race.log" 2>&1) &
(cd "$WORK/g1_prep_ieee" && PYTHONPATH=$WORK/g1_prep_ieee/src:$WORK/g1_prep_ieee TRITON_CACHE_DIR=$WORK/tc_gp \
 compute-sanitizer --tool memcheck --print-limit 3 --error-exitcode 99 \
   python3 -m benchmarks.fault_probe --case gdn mqar bf16 backward --T 1024 > "$L/g1_probe.log" 2>&1) &
wait
