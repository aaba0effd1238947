"""The report's files, byte for byte: two fixed sweep folders (an MQAR sweep with a log-linear mixer and its base
on shared seeds, learning curves, a failed and a missing run, two operator implementations; a parity sweep tested
at three lengths) give exactly the committed table.md, results.csv, paired.csv and paired_by_length.csv in
tests/reports/golden/. A change to what a report says shows here as a diff to review; rewrite the files on purpose
with `python tests/reports/test_golden_report.py`."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pytest

from loglinear.reports.report import write_report

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report_helpers import finished, make_sweep, run_entry  # noqa: E402  (beside this file, also run as a script)

GOLDEN = Path(__file__).resolve().parent / "golden"
FILES = ("table.md", "results.csv", "paired.csv", "paired_by_length.csv")


def curve(accuracies: list[float]) -> list[tuple[int, float]]:
    return [(100 * (i + 1), a) for i, a in enumerate(accuracies)]


SMALL = {"processor": "AMD EPYC", "cpu_capability": "AVX2", "gpu": None, "torch": "2.13.0+cpu", "threads": 1}
LARGE = {"processor": "Intel Xeon", "cpu_capability": "AVX512", "gpu": "NVIDIA H100 80GB HBM3", "torch": "2.13.0",
         "threads": 8}


def mqar_entries() -> list[dict]:
    """Runs on two machines: the log-linear runs of the larger learning rate on the GPU machine."""
    entries = []
    for lr, shift in ((1e-3, 0.0), (1e-2, -0.1)):
        for seed in range(3):
            entries.append(run_entry("attention", 16, lr, seed, finished(
                0.995 + shift + 0.001 * seed, "early_stopped", steps_to_threshold=200 + 100 * seed,
                implementations={}, machine=SMALL), curve=curve([0.3, 0.9 + shift, 0.995 + shift])))
            entries.append(run_entry("mamba2", 16, lr, seed, finished(
                0.4 + shift + 0.05 * seed, machine=SMALL,
                implementations={"blocks.0.mixer": [{"impl": "chunk", "selfcheck": None}]}),
                curve=curve([0.2, 0.3, 0.35, 0.4 + shift + 0.05 * seed])))
            solved = seed != 1
            entries.append(run_entry("log_linear_mamba2", 16, lr, seed, finished(
                (0.996 if solved else 0.6) + shift, "early_stopped" if solved else "max_steps",
                steps_to_threshold=300 if solved else None, machine=LARGE if lr > 1e-3 else SMALL,
                implementations={"blocks.0.mixer": [{"impl": "triton" if seed else "chunk", "selfcheck": None}]}),
                curve=curve([0.2, 0.7, (0.996 if solved else 0.6) + shift])))
    entries.append(run_entry("mamba2", 32, 1e-3, 0, {"status": "failed", "error": "RuntimeError: boom"}))
    entries.append(run_entry("mamba2", 32, 1e-3, 1, None))
    entries.append(run_entry("mamba2", 32, 1e-3, 2, finished(0.55)))
    return entries


def parity_entries() -> list[dict]:
    entries = []
    for mixer, base in (("gated_deltanet", 0.9), ("log_linear_gated_deltanet", 0.95)):
        for seed in range(3):
            acc = base - 0.1 * seed
            test = {f"test/acc/seq_len={n}": min(1.0, acc * f) for n, f in ((40, 1.1), (80, 0.8), (160, 0.6))}
            test |= {f"test/acc_seq/seq_len={n}": min(1.0, acc * f) ** 2 for n, f in ((40, 1.1), (80, 0.8), (160, 0.6))}
            entries.append(run_entry(mixer, 32, 1e-3, seed, finished(acc, test=test), task="parity",
                                     data="data/parity.yaml"))
    return entries


SWEEPS = {"mqar": mqar_entries, "parity": parity_entries}


def report_files(name: str, folder: Path) -> dict[str, bytes]:
    """The report files of sweep `name`, built in `folder`."""
    write_report(make_sweep(folder, SWEEPS[name](), name=name))
    return {f: (folder / f).read_bytes() for f in FILES if (folder / f).is_file()}


@pytest.mark.parametrize("name", sorted(SWEEPS))
def test_the_report_is_byte_identical_to_the_committed_one(name, tmp_path):
    files = report_files(name, tmp_path)
    expected = sorted(p.name.split("-", 1)[1] for p in GOLDEN.glob(f"{name}-*"))
    assert sorted(files) == expected
    for file, content in files.items():
        assert content == (GOLDEN / f"{name}-{file}").read_bytes(), f"{name}: {file} differs from the committed one"


if __name__ == "__main__":
    for name in SWEEPS:
        with tempfile.TemporaryDirectory() as folder:
            for file, content in report_files(name, Path(folder)).items():
                (GOLDEN / f"{name}-{file}").write_bytes(content)
