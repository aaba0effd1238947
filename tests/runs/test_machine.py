"""The machine a run records: the processor's name from /proc/cpuinfo or the platform, the GPU's name with how
many, and the one-line label a report prints."""

from __future__ import annotations

import pytest
import torch

from loglinear.runs import machine as module
from loglinear.runs.machine import gpu_name, machine, machine_label, processor_name, started_gpu

CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 9654 96-Core Processor
flags\t\t: fpu avx2

processor\t: 1
model name\t: AMD EPYC 9654 96-Core Processor
"""


def test_the_processor_is_cpuinfos_model_name(tmp_path, monkeypatch):
    (tmp_path / "cpuinfo").write_text(CPUINFO)
    monkeypatch.setattr(module, "CPUINFO", tmp_path / "cpuinfo")
    assert processor_name() == "AMD EPYC 9654 96-Core Processor"


@pytest.mark.parametrize("text", [None, "processor\t: 0\nmodel name\t: \n"])
def test_without_a_model_name_the_platform_names_the_processor(text, tmp_path, monkeypatch):
    if text is not None:
        (tmp_path / "cpuinfo").write_text(text)
    monkeypatch.setattr(module, "CPUINFO", tmp_path / "cpuinfo")
    monkeypatch.setattr(module.platform, "processor", lambda: "")
    monkeypatch.setattr(module.platform, "machine", lambda: "aarch64")
    assert processor_name() == "aarch64"


def test_a_cpu_run_names_no_gpu():
    assert gpu_name(torch.device("cpu"), 1) is None
    if not torch.cuda.is_available():
        assert started_gpu() is None
    record = machine(None)
    assert record["gpu"] is None and record["cpu_capability"] == torch.backends.cpu.get_cpu_capability()


def test_the_label_puts_the_gpu_first_and_counts_threads():
    cpu = {"processor": "AMD EPYC", "cpu_capability": "AVX512", "gpu": None, "torch": "2.13.0+cpu", "threads": 1}
    assert machine_label(cpu) == "AMD EPYC (AVX512), torch 2.13.0+cpu, 1 thread"
    gpu = {**cpu, "gpu": "NVIDIA H100 80GB HBM3 x 2", "threads": 8}
    assert machine_label(gpu) == "NVIDIA H100 80GB HBM3 x 2; AMD EPYC (AVX512), torch 2.13.0+cpu, 8 threads"


@pytest.mark.gpu
def test_a_gpu_run_names_its_gpu_and_how_many():
    device = torch.device("cuda", 0)
    name = torch.cuda.get_device_name(device)
    assert gpu_name(device) == name and gpu_name(device, 2) == f"{name} x 2"


@pytest.mark.parametrize("record, label", [
    ("AMD EPYC", "malformed machine record (str)"),
    ([1, 2], "malformed machine record (list)"),
    ({"processor": "AMD EPYC", "cpu_capability": "AVX2", "torch": "2.1.0"},
     "AMD EPYC (AVX2), torch 2.1.0, threads not recorded"),
    ({"gpu": "NVIDIA A100"}, "NVIDIA A100; not recorded (not recorded), torch not recorded, threads not recorded"),
])
def test_a_record_of_another_version_is_labelled_as_far_as_it_goes(record, label):
    assert machine_label(record) == label
