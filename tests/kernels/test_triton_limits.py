"""The sizes the fused kernels take and the ranges of the known faults (kernels/triton_limits.py; where a record lifts
one: tests/kernels/test_verified_gpus.py)."""

from __future__ import annotations

import pytest
import torch

from loglinear.kernels import triton_limits
from loglinear.kernels.triton_limits import KNOWN_FAULTS, MAX_K, KnownFault, known_fault, unsupported
from loglinear.kernels.variant import Variant

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


def test_the_faults_seen_on_hopper_cover_both_variants_in_half_precision_and_not_float32():
    for variant in Variant:
        for dtype in (torch.bfloat16, torch.float16):
            assert known_fault((9, 0), "3.6.0", variant, dtype) in KNOWN_FAULTS
        assert known_fault((9, 0), "3.6.0", variant, torch.float32) is None
