"""Parametrised cases split between the default run and the `slow` tests: the default run keeps representative
cases and `-m slow`, which CI runs after it, the others, so that every case still runs where CI runs."""

from __future__ import annotations

from collections.abc import Collection, Sequence

import pytest


def default_and_slow(cases: Sequence, default: Collection) -> list:
    """`cases` for `pytest.mark.parametrize`, those in `default` in the default run and the others marked `slow`
    (their ids unchanged). A case of a parametrisation that names several arguments is a tuple of them."""
    return [pytest.param(*(case if isinstance(case, tuple) else (case,)),
                         marks=() if case in default else pytest.mark.slow) for case in cases]
