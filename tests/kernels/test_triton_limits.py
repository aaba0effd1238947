"""The sizes the fused kernels take and the known faults refused by version (kernels/triton_limits.py)."""

from __future__ import annotations

import pytest
import torch

from loglinear.kernels import selfcheck, triton_limits
from loglinear.kernels.selfcheck import SelfCheckFailed, SelfCheckWarning, checked_impl
from loglinear.kernels.triton_limits import MAX_K, KnownFault, known_fault, unsupported
from loglinear.kernels.variant import Variant

from .selfcheck_helpers import new_process

DELTA, SCALAR = Variant.DELTA_RULE, Variant.SCALAR_DECAY
HOPPER_BF16 = KnownFault(9, (3, 4), (3, 7, 1), DELTA, (torch.bfloat16, torch.float16), "a fault for the tests")


def test_head_dims_beyond_the_limits_are_named():
    assert unsupported(MAX_K[DELTA], DELTA) is None and unsupported(MAX_K[SCALAR], SCALAR) is None
    assert "K <= 64 for delta rule" in unsupported(65, DELTA) and "got K=65" in unsupported(65, DELTA)
    assert "K <= 128 for scalar decay" in unsupported(129, SCALAR)


@pytest.fixture
def hopper_fault(monkeypatch):
    """A known fault of the delta rule in half precision on Hopper with Triton 3.4 to before 3.7.1."""
    monkeypatch.setattr(triton_limits, "KNOWN_FAULTS", (HOPPER_BF16,))


@pytest.mark.parametrize("capability, triton, variant, dtype, refused", [
    ((9, 0), "3.6.0", DELTA, torch.bfloat16, True),
    ((9, 0), "3.4.0", DELTA, torch.float16, True),
    ((9, 0), "3.7.0+git0123abc", DELTA, torch.bfloat16, True),
    ((9, 0), "3.7.1", DELTA, torch.bfloat16, False),
    ((9, 0), "3.9.0", DELTA, torch.bfloat16, False),
    ((9, 0), "3.3.1", DELTA, torch.bfloat16, False),
    ((9, 0), "3.6.0", DELTA, torch.float32, False),
    ((9, 0), "3.6.0", SCALAR, torch.bfloat16, False),
    ((8, 0), "3.6.0", DELTA, torch.bfloat16, False),
    ((9, 0), None, DELTA, torch.bfloat16, False),
])
def test_a_known_fault_covers_its_generation_version_range_variant_and_dtypes(capability, triton, variant, dtype,
                                                                             refused, hopper_fault):
    assert (known_fault(capability, triton, variant, dtype) is not None) == refused


def test_a_known_fault_sends_auto_to_chunk_with_one_warning_and_refuses_triton(monkeypatch, tmp_path, hopper_fault):
    monkeypatch.setenv(selfcheck.CACHE_ENV, str(tmp_path))
    new_process(monkeypatch)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(selfcheck, "versions", lambda: {"torch": "2.11.0", "triton": "3.6.0", "loglinear": "0"})
    monkeypatch.setattr(selfcheck, "run_check", lambda *a, **k: pytest.fail("a refused combination is not checked"))
    gpu = torch.device("cuda", 0)
    with pytest.warns(SelfCheckWarning) as caught:
        first = checked_impl("auto", gpu, torch.bfloat16, "auto", DELTA)
        second = checked_impl("auto", gpu, torch.bfloat16, "skip", DELTA)  # skipping the check does not lift it
    assert first[0] == second[0] == "chunk" and len(caught) == 1
    assert "refused on NVIDIA H100 80GB HBM3 (bfloat16)" in str(caught[0].message)
    assert "Triton 3.4 to before 3.7.1" in str(caught[0].message)
    with pytest.raises(SelfCheckFailed, match="impl='triton' refuses to run them"):
        checked_impl("triton", gpu, torch.bfloat16, "auto", DELTA)
