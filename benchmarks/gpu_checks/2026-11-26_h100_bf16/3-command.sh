#!/bin/bash
set -u
T0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONUNBUFFERED=1 LOGLINEAR_SELFCHECK=skip PYTHONPATH=/tmp/site:$PWD/src:$PWD
L=/tmp/logs3; mkdir -p $L
sed -i 's/(3, 7, 1), Variant\./(3, 4), Variant./' src/loglinear/kernels/triton_limits.py
grep -n "KnownFault(9" src/loglinear/kernels/triton_limits.py > $L/limits.txt
(timeout 200 python3 -m pytest -m gpu -q -rfE -n 12 -p no:cacheprovider tests > $L/gputests.log 2>&1; echo "exit $? at $(( $(date +%s) - T0 )) s" >> $L/gputests.log) &
(timeout 100 compute-sanitizer --tool memcheck --print-limit 3 --error-exitcode 99 python3 -m benchmarks.fault_probe --case gdn mqar bf16 backward --T 1024 > $L/probe.log 2>&1; echo "exit $? at $(( $(date +%s) - T0 )) s" >> $L/probe.log
 timeout 60 python3 benchmarks/gpu_checks/2026-11-26_h100_bf16/m2diag.py > $L/m2diag.log 2>&1; echo "exit $? at $(( $(date +%s) - T0 )) s" >> $L/m2diag.log) &
wait
tar -C /tmp -czf $OUT/logs3.tgz logs3
tail -4 $L/probe.log; cat $L/m2diag.log; grep -E "^(FAILED|ERROR)|passed|failed|exit" $L/gputests.log | cut -c1-220 | tail -30
