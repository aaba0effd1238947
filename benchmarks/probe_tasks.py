"""Generation throughput of the needle in a haystack, RegBench and stacked MQAR at their presets' settings, written to
benchmarks/RESULTS.md.

Each setting: examples per second of the process's CPU time of `task.sample(64, seed)` (the CPU presets' batch size
or near it), a new seed per batch, the best of several timed runs after a warm-up, in this process with torch's
thread count set by `--threads`; CPU time, not wall time, as other work on a shared machine stretches wall time far
more (with one thread the two agree on an idle machine). The load average before and after is stated.

Usage: python3 -m benchmarks.probe_tasks [--threads N] [--repeats R] [--note TEXT]
"""

from __future__ import annotations

import os
import time

from benchmarks.mad_tasks import generation_arguments, seconds_per_batch
from benchmarks.results_md import markdown_table, write_section

BATCH = 64
GPU_NEEDLE = {"key_vocab": 64, "value_vocab": 64, "noise_vocab": 128}
SETTINGS = [  # (task, arguments, what the setting is)
    ("niah", {"seq_len": 128}, "configs/data/niah.yaml, training"),
    ("niah", {"seq_len": 1024, "depth": 0.5}, "its longest test set"),
    ("niah", {"seq_len": 1024, "haystack": "needles", "num_needle_keys": 4}, "a haystack of needles, 4 needle keys"),
    ("niah", {"seq_len": 1024, "num_needle_keys": 4, "num_needle_values": 2, "num_needle_queries": 2, "key_len": 2,
              "value_len": 3}, "multi-key, -value, -query, keys of 2 and values of 3 tokens"),
    ("niah", {"seq_len": 2048, **GPU_NEEDLE}, "configs/data/niah_gpu.yaml, training"),
    ("niah", {"seq_len": 16384, "depth": 0.5, **GPU_NEEDLE}, "its longest test set"),
    ("regbench", {}, "configs/data/regbench.yaml (the authors' settings)"),
    ("regbench", {"automata": "held_out"}, "its held-out languages (1 in 10 drawn)"),
    ("regbench", {"seq_len": 128, "min_strings": 3, "max_strings": 6, "max_string_len": 19},
     "configs/regbench_cpu.yaml"),
    ("stacked_mqar", {"num_keys": 16, "num_kv_pairs": 8}, "configs/data/stacked_mqar.yaml, training"),
    ("stacked_mqar", {"num_keys": 64, "num_kv_pairs": 64, "num_passes": 2}, "64 pairs, 2 passes"),
]


def main() -> None:
    args = generation_arguments(__doc__.splitlines()[0])
    load_before = os.getloadavg()[0]
    rows = []
    for name, arguments, what in SETTINGS:
        best = seconds_per_batch(name, arguments, args.repeats, BATCH, time.process_time)
        setting = ", ".join(f"{k}={v}" for k, v in arguments.items()) or "defaults"
        rows.append([f"`{name}`", setting, what, f"{BATCH / best:,.0f}", f"{best * 1e3:.2f}"])
        print(rows[-1], flush=True)
    load = f"Load average of the machine (other processes included) before/after: {load_before:.2f}/" \
           f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} cores."
    body = (
        f"`get_task(name, **setting).sample({BATCH}, seed)`, a new seed per batch, best of the timed runs in the "
        f"process's CPU time ({args.threads} thread{'s' * (args.threads != 1)}). {load} The needle "
        "task and stacked MQAR are vectorised over the batch; RegBench draws its automata as tensors, names each "
        "one's language in Python (its minimal automaton, for the held-out split) and walks every string in one "
        f"loop over string positions. {args.note}".rstrip() + "\n\n"
        + markdown_table(["task", "setting", "what", "examples per CPU second", "CPU ms/batch"], rows)
    )
    print(write_section("synthetics: probe task generation", body))


if __name__ == "__main__":
    main()
