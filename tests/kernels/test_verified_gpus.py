"""The records of GPU checks (kernels/verified_gpus.py): a known fault stands on every GPU kind in its range until
a record of a passing check on that kind, of the current fused code, in that dtype, lifts it; the refusal names
the record that is missing and the command that checks."""

from __future__ import annotations

import ast
import dataclasses
import json
import re
import shutil
from pathlib import Path

import pytest
import torch

from loglinear.kernels import selfcheck, verified_gpus
from loglinear.kernels.selfcheck import SelfCheckFailed, SelfCheckWarning, checked_impl
from loglinear.kernels.variant import Variant
from loglinear.kernels.verified_gpus import (
    FUSED_SOURCES,
    GpuKind,
    Record,
    fused_digest,
    load_records,
    refusal,
    save_records,
)

from .selfcheck_helpers import new_process

ROOT = Path(__file__).resolve().parents[2]
H100 = GpuKind("NVIDIA H100 80GB HBM3", "9.0", "3.6.0")
H200 = GpuKind("NVIDIA H200", "9.0", "3.6.0")
DELTA, SCALAR = Variant.DELTA_RULE, Variant.SCALAR_DECAY


def record(kind: GpuKind = H100, dtypes: tuple[str, ...] = ("float32", "bfloat16"), kernels: str | None = None
           ) -> Record:
    return Record(kind, kernels or fused_digest(), "2026-01-02", dtypes, "every step", "float16",
                  "records/gpu_checks/somewhere")


@pytest.fixture
def records(monkeypatch, tmp_path):
    """The records read from a file of the test's own (empty until the test saves some)."""
    path = tmp_path / "verified_gpus.json"
    path.write_text("[]")
    monkeypatch.setattr(verified_gpus, "RECORDS", path)
    return path


def test_the_committed_records_are_well_formed_and_point_at_their_logs():
    found = load_records()
    assert len({r.kind for r in found}) == len(found)  # one record per kind
    for r in found:
        assert (ROOT / r.logs).is_dir(), r.logs
        assert re.fullmatch(r"\d{4}-\d\d-\d\d", r.date) and re.fullmatch(r"[0-9a-f]{16}", r.kernels)
        assert set(r.dtypes) <= {"float32", "bfloat16", "float16"} and r.passed and r.not_verified


def test_a_fault_stands_on_every_hopper_kind_in_bf16_without_a_record(records):
    for kind in (H100, H200):
        for variant in Variant:
            why = refusal(kind, variant, torch.bfloat16)
            assert why.startswith(f"a known fault: {variant.value} in bfloat16, float16 on compute capability 9.x")
            assert f"no record of a passing check on {kind} in loglinear/kernels/verified_gpus.json" in why
            assert "`python -m benchmarks.gpu_check`" in why and "\n" not in why
            assert refusal(kind, variant, torch.float32) is None  # no fault covers float32
    assert refusal(GpuKind("NVIDIA A100-SXM4-80GB", "8.0", "3.6.0"), DELTA, torch.bfloat16) is None
    assert refusal(dataclasses.replace(H200, triton="3.7.1"), DELTA, torch.bfloat16) is None


def test_a_record_lifts_its_kind_its_dtypes_and_its_kernel_code_only(records):
    save_records([record(H100, ("float32", "bfloat16"))], records)
    assert refusal(H100, SCALAR, torch.bfloat16) is None and refusal(H100, DELTA, torch.bfloat16) is None
    assert "verified float32, bfloat16, not float16" in refusal(H100, SCALAR, torch.float16)
    assert "no record of a passing check on NVIDIA H200" in refusal(H200, SCALAR, torch.bfloat16)
    assert "no record" in refusal(dataclasses.replace(H100, triton="3.6.1"), SCALAR, torch.bfloat16)
    assert "no record" in refusal(dataclasses.replace(H100, device="NVIDIA H100 PCIe"), SCALAR, torch.bfloat16)
    save_records([record(H100, ("float32", "bfloat16"), kernels="0123456789abcdef")], records)
    assert (f"the record of 2026-01-02 for {H100} checked other kernel code (0123456789abcdef, these "
            f"{fused_digest()})") in refusal(H100, SCALAR, torch.bfloat16)


def test_a_standing_fault_sends_auto_to_chunk_with_one_line_naming_the_missing_record(monkeypatch, records, tmp_path):
    monkeypatch.setenv(selfcheck.CACHE_ENV, str(tmp_path / "cache"))
    new_process(monkeypatch)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: H200.device)
    monkeypatch.setattr(selfcheck, "versions", lambda: {"torch": "2.11.0", "triton": "3.6.0", "loglinear": "0"})
    monkeypatch.setattr(selfcheck, "run_check", lambda *a, **k: pytest.fail("a refused call is not checked"))
    gpu = torch.device("cuda", 0)
    with pytest.warns(SelfCheckWarning) as caught:
        assert checked_impl("auto", gpu, torch.bfloat16, "auto", SCALAR)[0] == "chunk"
    (message,) = [str(w.message) for w in caught]
    assert "\n" not in message and message.startswith("the fused Triton kernels are refused on NVIDIA H200 (bfloat16)")
    assert f"no record of a passing check on {H200}" in message and "impl='auto' uses 'chunk'" in message
    with pytest.raises(SelfCheckFailed, match="impl='triton' refuses to run them"):
        checked_impl("triton", gpu, torch.bfloat16, "auto", DELTA)
    save_records([record(H200, ("bfloat16",))], records)
    new_process(monkeypatch)
    monkeypatch.setattr(selfcheck, "run_check", lambda *a, **k: selfcheck.Outcome(None, "none"))
    monkeypatch.setattr(selfcheck, "run_check_in_child", lambda device, dtype: (None, "none"))
    assert checked_impl("triton", gpu, torch.bfloat16, "auto", DELTA)[0] == "triton"  # lifted: the check decides


def test_records_round_trip_and_a_malformed_file_is_named(records):
    save_records([record(H100), record(H200, ("float32",))], records)
    assert load_records(records) == [record(H100), record(H200, ("float32",))]
    entry = json.loads(records.read_text())[0]
    for bad in ([{**entry, "torch": "2.11"}], [{k: v for k, v in entry.items() if k != "logs"}], {"a": 1}, "[{"):
        records.write_text(bad if isinstance(bad, str) else json.dumps(bad))
        with pytest.raises(ValueError, match=f"{re.escape(str(records))}: not a list of GPU records"):
            load_records(records)


def kernel_imports(path: Path) -> dict[str, set[str]]:
    """The loglinear.kernels modules (outside fused/) a file imports, with the names it takes from each."""
    found: dict[str, set[str]] = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("loglinear.kernels."):
            module = node.module.removeprefix("loglinear.kernels.")
            if not module.startswith("fused"):
                found.setdefault(module, set()).update(alias.name for alias in node.names)
    return found


def test_the_digest_covers_every_module_the_fused_path_imports():
    imported: dict[str, set[str]] = {}
    for path in (verified_gpus.KERNELS / "fused").glob("*.py"):
        for module, names in kernel_imports(path).items():
            imported.setdefault(module, set()).update(names)
    for module in list(imported):
        for inner, names in kernel_imports(verified_gpus.KERNELS / f"{module}.py").items():
            imported.setdefault(inner, set()).update(names)
    # of triton_limits (which also holds the faults) the digest takes the two sizes the fused path reads
    assert imported.pop("triton_limits") == {"MAX_CHUNK", "MAX_K"}
    assert {f"{m}.py" for m in imported} | {"fused"} == set(FUSED_SOURCES)


def test_the_digest_changes_with_the_fused_source(monkeypatch, tmp_path):
    copy = tmp_path / "kernels"
    shutil.copytree(verified_gpus.KERNELS, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(verified_gpus, "KERNELS", copy)
    digest = verified_gpus.fused_digest.__wrapped__
    assert digest() == fused_digest()
    (copy / "selfcheck.py").write_text("# not the fused path\n")
    assert digest() == fused_digest()
    with (copy / "fused" / "scan.py").open("a") as f:
        f.write("# an edit\n")
    assert digest() != fused_digest()
