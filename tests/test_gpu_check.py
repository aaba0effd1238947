"""benchmarks.gpu_check and its parts, on the CPU: the dry run and the plan (the verdict first, caps within the
limit, the packing slot), the time limit, a failed step recorded while the next one runs, the GPU kind's record
written, removed or left by the verdict, the record of the check; the fault probe's exit status, the kernel
benchmark's time limit, the determinism probe in Triton's interpreter; the GPU-against-CPU comparison on made-up
runs; the GPU found deciding which of fla's kernels are tried."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from benchmarks import determinism, fault_probe, gpu_check, kernels, results_md, sweep_agreement
from benchmarks.kernel_inputs import SMOKE_SHAPES
from benchmarks.kernel_peers import Libraries, fla_refusal
from loglinear.kernels import selfcheck, verified_gpus
from loglinear.kernels.variant import Variant

from . import child_process

ROOT = Path(__file__).resolve().parent.parent


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_the_dry_run_lists_every_step_and_exits_0_on_any_machine():
    done = child_process.run([sys.executable, "-m", "benchmarks.gpu_check", "--dry-run", "--time-limit", "60"],
                             cwd=ROOT, cpu_s=300)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("would run, within 60 s")
    assert [line.split(" (")[0] for line in lines[1:]] == [
        f"{i}. {s.name}" for i, s in enumerate(gpu_check.plan(Path("logs")), 1)]
    assert lines[1] == "1. doctor (at most 175 s): -m loglinear doctor"
    assert lines[-1].startswith(f"{len(lines) - 1}. MQAR sweep, GPU against CPU (what is left): ")
    assert "pytest -m gpu" in done.stdout and "benchmarks.determinism" in done.stdout


def test_only_keeps_the_named_steps_in_order_and_refuses_a_word_that_names_none():
    steps = gpu_check.plan(Path("logs"))
    chosen = gpu_check.select(steps, ["Sweep", "compiled"])
    assert [s.name for s in chosen] == [s.name for s in steps if "compiled" in s.name] + ["MQAR sweep, GPU against CPU"]
    assert gpu_check.select(steps, None) == steps
    with pytest.raises(ValueError, match="matches no step; the steps are: doctor; GPU tests; determinism probe"):
        gpu_check.select(steps, ["nothing"])
    done = child_process.run([sys.executable, "-m", "benchmarks.gpu_check", "--dry-run", "--only", "doctor"],
                             cwd=ROOT, cpu_s=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[1:] == ["1. doctor (at most 540 s): -m loglinear doctor"], done.stdout


def test_a_failed_step_is_recorded_the_next_runs_and_the_limit_stops_the_rest(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_check, "MIN_STEP_S", 1.0)
    steps = [  # the two before the limit's step start no interpreter: milliseconds of CPU, on a busy machine too
        gpu_check.Step("fails", ["sh", "-c", "echo broken; exit 3"]),
        gpu_check.Step("passes", ["sh", "-c", "echo fine"]),
        gpu_check.Step("overruns", python("import time; time.sleep(120)")),
        gpu_check.Step("never starts", python("print('late')")),
    ]
    started = time.monotonic()
    outcomes = gpu_check.run_all(steps, tmp_path, limit_s=8)
    assert time.monotonic() - started < 120  # the sleeping step was stopped at the limit, not when its sleep ended
    assert [o.status.split(" ")[0] for o in outcomes] == ["failed", "passed", "timed", "skipped:"]
    assert outcomes[0].status == "failed (exit 3)"
    assert "broken" in outcomes[0].log.read_text() and "fine" in outcomes[1].log.read_text()
    assert outcomes[3].log is None and not list(tmp_path.glob("04-*"))


def test_the_record_is_a_dated_section_appended_to_the_results(tmp_path, monkeypatch):
    monkeypatch.setattr(results_md, "RESULTS", tmp_path / "RESULTS.md")
    steps = [gpu_check.Step("doctor", [sys.executable, "-m", "loglinear", "doctor"])]
    env = {"device": "NVIDIA H100", "capability": "9.0", "driver": "580.1", "torch": "2.11", "triton": "3.6.0",
           "fla-core": "0.6.0"}
    for stamp in ("2026-01-01 10:00", "2026-01-02 10:00"):
        outcome = gpu_check.Outcome("passed", 12.3, tmp_path / "01-doctor.log", "mean 40%")
        results_md.write_section(f"gpu check {stamp}", gpu_check.record(steps, [outcome], env, tmp_path, 1200))
    text = (tmp_path / "RESULTS.md").read_text()
    assert "## gpu check 2026-01-01 10:00" in text and "## gpu check 2026-01-02 10:00" in text
    for field in ("NVIDIA H100", "capability 9.0", "driver 580.1", "torch 2.11", "triton 3.6.0", "fla-core 0.6.0",
                  "- command: `", "- date: ", "Time limit 1200 s, 12 s used", "| 1 | doctor | `-m loglinear doctor` | "
                  "- | passed | 12 | `01-doctor.log` | mean 40% |"):
        assert field in text


def test_the_utilisation_summary_reads_nvidia_smi_lines():
    assert gpu_check.utilisation_summary("50\n100\n95\n15\n") == "mean 65%, > 90% in 50% of 4 samples"
    assert gpu_check.utilisation_summary("") == "no samples"


@pytest.mark.parametrize(("capability", "triton", "refused"), [
    ((9, 0), "3.6.0", True), ((9, 0), "3.4.0", True), ((9, 0), "3.7.0", True), ((9, 0), "3.7.1", False),
    ((9, 0), "3.3.1", False), ((8, 0), "3.6.0", False)])
def test_the_gpu_found_decides_which_fla_kernels_are_tried(capability, triton, refused, monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    reason = fla_refusal(torch.device("cuda"), triton)
    assert (reason is not None) == refused
    if refused:
        assert reason == f"refused by fla on Hopper (sm_90) with Triton {triton}"
    assert fla_refusal(torch.device("cpu"), triton) is None


def test_the_determinism_probe_runs_every_fused_kernel_in_the_interpreter():
    pytest.importorskip("triton")
    worst = determinism.probe("gdn", torch.float32, determinism.SIZES["tiny"], torch.device("cpu"))
    assert set(worst) == {"o", "final state", "d initial state", "dq", "dk", "dv", "dg", "dlam", "dbeta"}
    assert all(diff == 0 for diff in worst.values())


def test_the_determinism_probe_reports_the_largest_difference_between_calls(monkeypatch):
    calls = iter([0.0, 0.0, 0.5, 0.25])
    monkeypatch.setattr(determinism, "call", lambda *args: {"o": torch.full((2,), next(calls)), "dq": torch.zeros(2)})
    worst = determinism.probe("mamba2", torch.float32, determinism.SIZES["tiny"], torch.device("cpu"))
    assert worst == {"o": 0.5, "dq": 0.0}
    text = determinism.table([{"variant": "mamba2", "dtype": "fp32", "max_diff": worst},
                              {"variant": "gdn", "dtype": "bf16", "error": "RuntimeError: boom"}])
    assert "| mamba2 | fp32 | 0 | 0.5 | **differs** |" in text and "error: RuntimeError: boom" in text


def fake_run(sweep_out: Path, mixer: str, seed: int, steps_losses: dict[int, float], status: str = "max_steps"):
    folder = sweep_out / "runs" / f"{mixer}-{seed}"
    folder.mkdir(parents=True)
    (folder / "result.json").write_text(json.dumps({
        "status": status, "config": {"model": {"mixer": mixer}, "train": {"seed": seed}},
        "final_val": {"val/acc": 0.5, "val/loss": 2.1}, "test": {"test/acc": 0.4, "test/loss": 2.0}}))
    rows = ["step,train/loss,val/acc"] + [f"{s},{loss},\n{s},,0.1" for s, loss in steps_losses.items()]
    (folder / "metrics.csv").write_text("\n".join(rows) + "\n")


def test_the_window_ends_where_float32_parts_from_float64_on_the_cpu():
    exact = {9: 4.0, 19: 3.9, 29: 3.8, 39: 3.7, 49: 3.6}
    rounded = {9: 4.0, 19: 3.9 * (1 + 0.5 * sweep_agreement.WINDOW_RTOL), 29: 3.8, 39: 3.7 * 1.001, 49: 3.6}
    assert sweep_agreement.window(exact, rounded) == [9, 19, 29]


def test_a_gpu_run_agrees_only_within_its_window_and_a_short_window_cannot_be_judged():
    cpu = {9: 4.0, 19: 3.9, 29: 3.8, 39: 3.0}
    close = {9: 4.0, 19: 3.9 * (1 + 0.5 * sweep_agreement.AGREE_RTOL), 29: 3.8, 39: 3.5}
    assert sweep_agreement.judge(close, cpu, [9, 19, 29])[1] == "yes"
    far = {**close, 29: 3.8 * (1 + 2 * sweep_agreement.AGREE_RTOL)}
    worst, verdict = sweep_agreement.judge(far, cpu, [9, 19, 29])
    assert verdict == "**no**" and worst == pytest.approx(2 * sweep_agreement.AGREE_RTOL)
    assert "cannot judge" in sweep_agreement.judge(close, cpu, [9, 19])[1]
    assert "cannot judge" in sweep_agreement.judge({9: 4.0}, cpu, [9, 19, 29])[1]


def test_the_comparison_reads_each_sides_runs_and_a_missing_or_failed_run_does_not_agree(tmp_path):
    exact = {9: 4.0, 19: 3.9, 29: 3.8, 39: 3.7, 49: 3.0}
    parted = {**exact, 49: 3.2}  # the float32 CPU run leaves the float64 one at step 49
    for side, curve in (("gpu", {**parted, 49: 3.4}), ("cpu", parted), ("cpu64", exact)):
        fake_run(tmp_path / side, "mamba2", 0, curve)
    fake_run(tmp_path / "gpu", "attention", 0, exact)
    fake_run(tmp_path / "cpu", "attention", 0, exact, status="failed")
    fake_run(tmp_path / "cpu64", "attention", 0, exact)
    runs = {side: sweep_agreement.finished(tmp_path / side) for side in ("gpu", "cpu", "cpu64")}
    assert sweep_agreement.losses(runs["cpu"]["mamba2", 0]) == parted
    rows, every = sweep_agreement.compare(runs["gpu"], runs["cpu"], runs["cpu64"])
    assert not every
    assert [(r[0], r[2], r[-1]) for r in rows] == [("`attention`", "-", "**missing on the CPU**"),
                                                  ("`mamba2`", "39", "yes")]
    assert sweep_agreement.compare({("mamba2", 0): runs["gpu"]["mamba2", 0]}, {("mamba2", 0): runs["cpu"]["mamba2", 0]},
                                   {("mamba2", 0): runs["cpu64"]["mamba2", 0]})[1]


def test_the_sweeps_of_the_agreement_check_are_the_demos_shortened(tmp_path):
    spec = sweep_agreement.spec("cpu", 100, 2)
    assert spec["base"]["train.max_steps"] == 100 and spec["base"]["train.accelerator"] == "cpu"
    assert spec["base"]["train.val_every"] == sweep_agreement.LOG_EVERY
    path = tmp_path / "cpu.yaml"
    path.write_text(yaml.safe_dump(spec))
    done = child_process.run([sys.executable, "-m", "loglinear", "sweep", "run", str(path), "--dry-run", "--out",
                              str(tmp_path / "out")], cwd=ROOT, cpu_s=300)
    assert done.returncode == 0, done.stderr
    assert "6 runs" in done.stdout, done.stdout
    chunk = sweep_agreement.spec("gpu", 100, 2, "chunk")
    exact = sweep_agreement.spec("cpu", 100, 2, "chunk", "64-true")
    assert chunk["name"] == "gpu_check_mqar_gpu_chunk" and exact["name"] == "gpu_check_mqar_cpu_chunk_64"
    assert exact["base"]["train.precision"] == "64-true" and exact["base"]["model.impl"] == "chunk"
    varied = ("model.impl", "train.accelerator", "train.precision")
    for other in (chunk, exact):
        assert {k: v for k, v in other["base"].items() if k not in varied} == {
            k: v for k, v in spec["base"].items() if k not in varied}


def test_a_step_stops_at_its_own_cap_and_leaves_the_rest_for_the_next(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_check, "MIN_STEP_S", 1.0)
    steps = [gpu_check.Step("slow", python("import time; time.sleep(120)"), cap_s=2),
             gpu_check.Step("after it", python("print('ran')"))]
    outcomes = gpu_check.run_all(steps, tmp_path, limit_s=60)
    assert outcomes[0].status == "timed out after 2 s" and outcomes[0].seconds < 120
    assert outcomes[1].status == "passed"


def test_the_fault_probe_refuses_an_unknown_case_in_one_line():
    done = child_process.run([sys.executable, "-m", "benchmarks.fault_probe", "--case", "mamba2", "paper", "bf16",
                              "sideways"], cwd=ROOT, cpu_s=300)
    assert done.returncode == 2 and done.stderr.strip().splitlines()[-1].endswith(
        "--case: 'sideways' is not one of forward, backward")


def test_a_fault_probe_case_runs_the_fused_kernels_past_the_refusals_in_the_interpreter():
    done = child_process.run([sys.executable, "-m", "benchmarks.fault_probe", "--case", "gdn", "mqar", "fp32",
                              "backward", "--T", "80", "--device", "cpu", "--smoke"], cwd=ROOT, cpu_s=600,
                             env={**os.environ, "TRITON_INTERPRET": "1"})
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_fault_probe_refuses_no_workers_in_one_line():
    done = child_process.run([sys.executable, "-m", "benchmarks.fault_probe", "--jobs", "0"], cwd=ROOT, cpu_s=300)
    assert done.returncode == 2 and done.stderr.strip().splitlines()[-1].endswith("--jobs must be >= 1, got 0")


def test_the_plan_puts_the_verdict_first_and_its_caps_fit_the_default_limit():
    steps = gpu_check.plan(Path("logs"))
    names = [s.name for s in steps]
    assert tuple(names[:4]) == gpu_check.VERDICT
    later = ["kernel benchmark", "GPU training, eager", "GPU training, compiled", "GPU training, compiled, CUDA graphs",
             "MQAR sweep, GPU against CPU"]
    assert [n for n in names[4:] if n != "packing benchmark"] == later
    assert steps[-1].cap_s == float("inf")  # the sweep agreement gets what the others left
    assert sum(s.cap_s for s in steps[:-1]) <= gpu_check.DEFAULT_LIMIT_S
    for step in steps:
        if "--time-limit" in step.argv:  # it stops between its items before its cap kills it
            assert float(step.argv[step.argv.index("--time-limit") + 1]) == step.cap_s - gpu_check.STEP_LIMIT_MARGIN_S
    assert "--dtype" in steps[3].argv and steps[3].argv[steps[3].argv.index("--dtype") + 1] == "bf16"
    assert gpu_check.fit_caps(steps, gpu_check.DEFAULT_LIMIT_S) == steps  # the whole plan: its caps as they are
    training = gpu_check.fit_caps(gpu_check.select(steps, ["training"]), 540)
    assert [s.cap_s for s in training] == [180, 180, 180]  # a selection gets the time of the steps left out
    assert training[0].argv[-2:] == ["--time-limit", "170"]


@pytest.mark.parametrize("exists", [False, True])
def test_the_packing_step_is_planned_only_where_its_module_exists(monkeypatch, exists):
    real = gpu_check.importlib.util.find_spec

    def find_spec(name, *args):
        return (object() if exists else None) if name == gpu_check.PACKING else real(name, *args)

    monkeypatch.setattr(gpu_check.importlib.util, "find_spec", find_spec)
    names = [s.name for s in gpu_check.plan(Path("logs"))]
    assert ("packing benchmark" in names) == exists
    if exists:
        assert names.index("packing benchmark") == names.index("GPU training, eager") - 1
        assert gpu_check.PACKING_STEP.argv[1:4] == ["-m", "benchmarks.packing", "--d-models"]
        assert gpu_check.PACKING_STEP.argv[-2:] == ["--time-limit", "40"]


def test_the_verdict_hook_runs_once_after_the_last_verdict_step_and_before_the_next(tmp_path):
    seen: list[list[str]] = []
    steps = [gpu_check.Step(name, python("pass")) for name in (*gpu_check.VERDICT, "later")]
    outcomes = gpu_check.run_all(steps, tmp_path, limit_s=120,
                                 after_verdict=lambda done: seen.append([o.status for o in done]))
    assert seen == [["passed"] * 4] and len(outcomes) == 5


@pytest.fixture
def gpu_kind(monkeypatch, tmp_path):
    """An H200 with Triton 3.6.0 and a records file of the test's own holding an H100 record."""
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H200")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(selfcheck, "versions", lambda: {"torch": "2.11", "triton": "3.6.0", "loglinear": "0"})
    path = tmp_path / "verified_gpus.json"
    monkeypatch.setattr(verified_gpus, "RECORDS", path)
    h100 = verified_gpus.Record(verified_gpus.GpuKind("NVIDIA H100 80GB HBM3", "9.0", "3.6.0"), "0" * 16,
                                "2026-01-01", ("float32",), "a", "b", "records/gpu_checks/x")
    verified_gpus.save_records([h100])
    return verified_gpus.GpuKind("NVIDIA H200", "9.0", "3.6.0"), h100


def outcomes_of(statuses: list[str]) -> tuple[list[gpu_check.Step], list[gpu_check.Outcome]]:
    steps = [gpu_check.Step(name, ["true"]) for name in gpu_check.VERDICT]
    return steps, [gpu_check.Outcome(s, 1.0, None) for s in statuses]


def test_a_passing_verdict_writes_the_kinds_record_and_lifts_its_faults(gpu_kind, tmp_path):
    h200, h100 = gpu_kind
    assert verified_gpus.refusal(h200, Variant.SCALAR_DECAY, torch.bfloat16) is not None
    text = gpu_check.update_trust(*outcomes_of(["passed"] * 4), tmp_path / "logs", "2026-02-03")
    assert text.startswith(f"{h200}: verified in float32, bfloat16, record written to ")
    records = verified_gpus.load_records()
    assert records[0] == h100 and len(records) == 2
    new = records[1]
    assert (new.kind, new.dtypes, new.date, new.kernels) == (h200, ("float32", "bfloat16"), "2026-02-03",
                                                            verified_gpus.fused_digest())
    assert new.logs == str(tmp_path / "logs")  # outside the repository: the path as given
    for variant in Variant:
        assert verified_gpus.refusal(h200, variant, torch.bfloat16) is None
    assert verified_gpus.refusal(h200, Variant.SCALAR_DECAY, torch.float16) is not None


def test_a_failed_verdict_removes_the_kinds_record_and_an_inconclusive_one_leaves_it(gpu_kind, tmp_path):
    h200, h100 = gpu_kind
    gpu_check.update_trust(*outcomes_of(["passed"] * 4), tmp_path, "2026-02-03")
    before = verified_gpus.load_records()
    text = gpu_check.update_trust(*outcomes_of(["passed", "timed out after 120 s", "passed", "passed"]), tmp_path,
                                  "2026-02-04")
    assert text.startswith(f"{h200}: not judged (GPU tests timed out after 120 s)")
    assert verified_gpus.load_records() == before
    steps, outcomes = outcomes_of(["passed"] * 4)
    text = gpu_check.update_trust(steps[:1], outcomes[:1], tmp_path, "2026-02-04")  # --only doctor
    assert "not judged (GPU tests, determinism probe, fault probe not in the steps run (--only))" in text
    assert verified_gpus.load_records() == before
    text = gpu_check.update_trust(*outcomes_of(["passed", "passed", "failed (exit 1)", "passed"]), tmp_path,
                                  "2026-02-05")
    assert text == (f"{h200}: not verified (determinism probe failed (exit 1)); the known faults stand there; its "
                    "record removed from loglinear/kernels/verified_gpus.json")
    assert verified_gpus.load_records() == [h100]


def test_the_record_says_what_passed_failed_and_was_skipped_the_self_checks_cost_and_the_kinds_record(tmp_path):
    (tmp_path / "01-doctor.log").write_text(
        "cuda:0: NVIDIA H200, compute capability 9.0\n"
        "self-check on NVIDIA H200, float32: passed (closest: dg ...); stored in /x.json; took 41 s\n"
        "self-check on NVIDIA H200, bfloat16: FAILED: mamba2 B2 T2048 ...: not deterministic; stored in /y.json; "
        "took 63 s\n")
    costs = gpu_check.selfcheck_costs(tmp_path / "01-doctor.log")
    assert costs == ["NVIDIA H200, float32: passed, 41 s", "NVIDIA H200, bfloat16: FAILED, 63 s"]
    steps = [gpu_check.Step("doctor", ["x", "-m", "loglinear", "doctor"], cap_s=180),
             gpu_check.Step("kernel benchmark", ["x", "-m", "benchmarks.kernels"], cap_s=45),
             gpu_check.Step("MQAR sweep, GPU against CPU", ["x", "-m", "benchmarks.sweep_agreement"])]
    outcomes = [gpu_check.Outcome("failed (exit 1)", 104.0, tmp_path / "01-doctor.log"),
                gpu_check.Outcome("timed out after 45 s", 45.0, tmp_path / "02-kernel-benchmark.log"),
                gpu_check.Outcome("skipped: 3 s of --time-limit left", 0.0, None)]
    env = {"device": "NVIDIA H200", "capability": "9.0", "driver": "580.1", "torch": "2.11", "triton": "3.6.0",
           "fla-core": "0.6.0"}
    text = gpu_check.record(steps, outcomes, env, tmp_path, 540, "NVIDIA H200 (...): not verified", costs,
                            "/root/.triton/cache (0 files at the start)")
    assert ("- steps: passed: none; failed: doctor; stopped at its cap or the limit: kernel benchmark; skipped for "
            "time: MQAR sweep, GPU against CPU") in text
    assert "- self-check (doctor): NVIDIA H200, float32: passed, 41 s; NVIDIA H200, bfloat16: FAILED, 63 s" in text
    assert "- this GPU kind's record: NVIDIA H200 (...): not verified" in text
    assert "- Triton's compile cache: /root/.triton/cache (0 files at the start)" in text
    assert "| 2 | kernel benchmark | `-m benchmarks.kernels` | 45 | timed out after 45 s | 45 |" in text
    assert "| 3 | MQAR sweep, GPU against CPU | `-m benchmarks.sweep_agreement` | - | skipped: 3 s" in text


def test_every_step_shares_one_folder_of_self_check_verdicts_in_the_logs(tmp_path):
    env = gpu_check.step_env(tmp_path)
    assert env["LOGLINEAR_CACHE_DIR"] == str(tmp_path / "selfcheck")
    step = gpu_check.Step("reads it", python("import os; print(os.environ['LOGLINEAR_CACHE_DIR'])"))
    outcome = gpu_check.run_step(step, tmp_path / "01.log", 60, env)
    assert outcome.status == "passed" and str(tmp_path / "selfcheck") in outcome.log.read_text()


def test_the_fault_probe_exits_1_when_a_case_fails_and_runs_only_the_dtype_asked(monkeypatch, capsys):
    ran = []

    def probe(case, T, sanitizer, smoke):
        ran.append(case)
        return ("exit 1", 1.0, "illegal memory access") if case == ("gdn", "mqar", "bf16", "backward") else \
            ("ok", 1.0, "")

    monkeypatch.setattr(fault_probe, "probe", probe)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(sys, "argv", ["fault_probe", "--dtype", "bf16", "--jobs", "1"])
    with pytest.raises(SystemExit) as ended:
        fault_probe.main()
    assert ended.value.code == 1
    assert len(ran) == 8 and {case[2] for case in ran} == {"bf16"}
    assert "| gdn | mqar | bf16 | backward | exit 1 | 1 | illegal memory access |" in capsys.readouterr().out


class Stopping:
    """A TimeLimit whose first `items` items fit and the rest do not."""

    def __init__(self, items: int) -> None:
        self.left, self.seconds = items, 40.0

    def fits(self) -> bool:
        self.left -= 1
        return self.left >= 0

    def done(self) -> None:
        pass


def test_the_kernel_benchmark_stops_at_its_time_limit_and_marks_what_it_left(monkeypatch):
    monkeypatch.setattr(kernels, "measure", lambda *args: 1.0)
    monkeypatch.setattr(kernels, "agreement", lambda *args: [])
    text, raw = kernels.run_part("mamba2", "mqar", [64, 100, 128], Libraries(missing={"fla": "x", "mamba_ssm": "x"}),
                                 torch.device("cpu"), torch.float32, True, Stopping(1))
    ours = raw["ms"]["ours log-linear (triton)"]
    assert ours == {"64": 1.0, "100": kernels.NOT_MEASURED, "128": kernels.NOT_MEASURED}
    assert "**Partial**: T=100 and longer not measured (--time-limit 40 s)" in text
    assert SMOKE_SHAPES["mamba2", "mqar"].describe() in text


def last_error_line(argv: list[str]) -> str:
    done = child_process.run([sys.executable, "-m", *argv], cwd=ROOT, cpu_s=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    return done.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize(("arguments", "message"), [
    (["--logs", "/proc/loglinear-logs"], "--logs /proc/loglinear-logs: cannot write in /proc"),
])
def test_the_dry_run_refuses_what_the_check_would_find_later(arguments, message):
    assert message in last_error_line(["benchmarks.gpu_check", "--dry-run", *arguments])


def test_the_dry_run_refuses_logs_that_are_a_file(tmp_path):
    (tmp_path / "file").write_text("")
    line = last_error_line(["benchmarks.gpu_check", "--dry-run", "--logs", str(tmp_path / "file")])
    assert f"--logs {tmp_path / 'file'} is a file, not a folder" in line
    assert [p.name for p in tmp_path.iterdir()] == ["file"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the fault probe of a machine without CUDA")
def test_the_fault_probe_without_cuda_says_so_rather_than_fail_every_case():
    line = last_error_line(["benchmarks.fault_probe", "--smoke"])
    assert "the table of cases needs a CUDA device, and none is here" in line


@pytest.mark.parametrize(("arguments", "message"), [
    (["--T", "0"], "argument --T: must be >= 1, got 0"),
    (["--T", "-8"], "argument --T: must be >= 1, got -8"),
    (["--T", "80", "--device", "bogus"], "--device: 'bogus' is not a device (cpu, cuda or cuda:N)"),
])
def test_a_fault_probe_case_with_a_bad_length_or_device_is_one_line(arguments, message):
    line = last_error_line(["benchmarks.fault_probe", "--case", "gdn", "mqar", "fp32", "backward", *arguments])
    assert line.endswith(message), line
