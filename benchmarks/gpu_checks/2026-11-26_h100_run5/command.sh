#!/bin/bash
# one device call: doctor beside the GPU-against-CPU MQAR sweep, then the Mamba-2 kernel benchmark alone
set -u
T0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src:$PWD PYTHONUNBUFFERED=1
L=/tmp/logs5; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L/env.txt
python3 -c "import torch,triton;print(torch.__version__,triton.__version__,torch.cuda.get_device_name())" >> $L/env.txt 2>&1
(timeout 160 python3 -m loglinear doctor > $L/doctor.log 2>&1; echo "exit $? at $(( $(date +%s) - T0 )) s" >> $L/doctor.log) &
(timeout 330 python3 -m benchmarks.gpu_check --only sweep --time-limit 325 --logs $L/gc_sweep > $L/gc_sweep.out 2>&1; echo "exit $? at $(( $(date +%s) - T0 )) s" >> $L/gc_sweep.out) &
wait
echo "stage A done at $(( $(date +%s) - T0 )) s" | tee -a $L/env.txt
timeout 140 python3 -m benchmarks.kernels --variant mamba2 --shape paper --json $L/kernels.json > $L/kernels.log 2>&1; echo "exit $? at $(( $(date +%s) - T0 )) s" >> $L/kernels.log
cp benchmarks/RESULTS.md $L/RESULTS.device.md
tar -C /tmp -czf $OUT/logs5.tgz logs5
cat $L/env.txt; tail -30 $L/doctor.log; tail -40 $L/gc_sweep/*sweep*.log 2>/dev/null | tail -40; tail -25 $L/kernels.log
