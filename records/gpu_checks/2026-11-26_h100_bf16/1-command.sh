#!/bin/bash
# Command 1, run from the repository root on one CUDA GPU: five copies of the tree, each with the Mamba-2 bf16
# refusal lifted and one variation of the kernels, run the Mamba-2 bf16 and determinism GPU tests side by side with
# the fault probe (every case, past the refusals) and the sweep agreement; then GPU training at d_model 64 alone.
# A log that ends early is where a command was stopped (timeout, exit 124).
set -u
L=${LOGS:-logs}; mkdir -p "$L"; L=$(realpath "$L")
WORK=$(mktemp -d)
export PYTHONUNBUFFERED=1
mk() {  # a copy of the tree named $1, then sed expressions and the files they edit, in pairs
  local d=$WORK/$1; shift; cp -r "$PWD" "$d"
  sed -i 's/KnownFault(9, (3, 4), (3, 7, 1), Variant.SCALAR_DECAY/KnownFault(9, (3, 4), (3, 4), Variant.SCALAR_DECAY/' \
    "$d/src/loglinear/kernels/triton_limits.py"
  while [ $# -gt 0 ]; do sed -i "$1" "$d/$2"; shift 2; done
  (cd "$d" && git diff src/loglinear/kernels/fused) > "$L/$(basename "$d").diff" 2>&1
}
mk v0_base
mk v1_ieee_all 's/return "ieee" if dtype == torch.float32 else "tf32"/return "ieee"/' src/loglinear/kernels/fused/common.py
mk v2_ieee_intra 's/PREC=dot_precision(v.dtype)/PREC="ieee"/' src/loglinear/kernels/fused/intra.py
mk v3_ieee_scan 's/PREC=dot_precision(v.dtype)/PREC="ieee"/' src/loglinear/kernels/fused/scan.py
mk v4_stages1 's/num_warps=num_warps(/num_stages=1, num_warps=num_warps(/' src/loglinear/kernels/fused/intra.py \
  's/num_warps=num_warps(/num_stages=1, num_warps=num_warps(/' src/loglinear/kernels/fused/scan.py
for v in v0_base v1_ieee_all v2_ieee_intra v3_ieee_scan v4_stages1; do
  (cd "$WORK/$v" && PYTHONPATH=$WORK/$v/src:$WORK/$v LOGLINEAR_SELFCHECK=skip TRITON_CACHE_DIR=$WORK/tc_$v \
   python3 -m pytest -m gpu tests/kernels/test_fused_gpu.py -k "mamba2 and (bf16 or deterministic)" \
   -n 2 -q -rA -p no:cacheprovider > "$L/$v.log" 2>&1) &
done
python3 -m benchmarks.fault_probe --T 1024 --sanitize-failures --jobs 4 > "$L/fault_probe.log" 2>&1 &
python3 -m benchmarks.sweep_agreement --out "$L/gc_sweep/sweep" > "$L/gc_sweep.out" 2>&1 &
wait
python3 -m benchmarks.gpu_training --d-model 64 --steps 100 > "$L/gpu-training-d64-eager.log" 2>&1
python3 -m benchmarks.gpu_training --d-model 64 --steps 100 --compile > "$L/gpu-training-d64-compiled.log" 2>&1
