#!/bin/bash
set -u
T0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src:$PWD PYTHONUNBUFFERED=1
timeout 250 python3 benchmarks/gpu_checks/2026-11-26_h100_run6/diverge.py /tmp/d6 > /tmp/d6.out 2>&1; echo "exit $? at $(( $(date +%s) - T0 )) s" >> /tmp/d6.out
tar -C /tmp -czf $OUT/d6.tgz d6 d6.out
cat /tmp/d6.out | cut -c1-900
