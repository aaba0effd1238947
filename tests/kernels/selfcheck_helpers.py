"""What the self-check tests share: a fresh process as far as the check goes, and deliberately broken kernels."""

from __future__ import annotations

import pytest

from loglinear.kernels import selfcheck
from loglinear.kernels.fused import function


def new_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """No verdict, forced check or warning in this process yet (the stored verdicts stay)."""
    monkeypatch.setattr(selfcheck, "_VERDICTS", {})
    monkeypatch.setattr(selfcheck, "_FORCED", set())
    monkeypatch.setattr(selfcheck, "_WARNED", set())


def break_output(monkeypatch: pytest.MonkeyPatch) -> None:
    """The intra-chunk kernel's output off by 0.1%: a bug rounding does not explain."""
    real = function.intra_forward
    monkeypatch.setattr(function, "intra_forward", lambda *args: real(*args) * 1.001)


def break_gradient(monkeypatch: pytest.MonkeyPatch) -> None:
    """The inter-chunk backward's gradient of the effective queries off by 0.1% (so dq and dg are wrong)."""
    real = function.scan_backward

    def wrong(*args):
        dR, *rest = real(*args)
        return (dR * 1.001, *rest)

    monkeypatch.setattr(function, "scan_backward", wrong)
