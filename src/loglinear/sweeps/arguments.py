"""Values as `key=value` arguments of `loglinear train` that read back as exactly the same values."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from loglinear.runs.config import ConfigError


def override(key: str, value: Any) -> str:
    """`key=value` that `loglinear train` (OmegaConf's dotlist) reads back as exactly `value`.

    `str(value)` when that round-trips (what a wandb agent's `${args_no_hyphens}` passes), else
    YAML-quoted text; a value with no faithful text form is a ConfigError naming the key.
    """
    for text in _renderings(value):
        if _same(_parse(text), value):
            return f"{key}={text}"
    raise ConfigError(f"{key}: value {value!r} cannot be passed as {key}=... on the command line")


def command_line_value(value: Any) -> Any:
    """The value to write for a wandb agent, which passes `f"{key}={value}"`: `value` itself when its
    `str` round-trips, else the text `override` uses."""
    text = override("x", value)[2:]
    return value if text == str(value) else text


def _renderings(value: Any) -> Iterator[str]:
    yield str(value)
    if value is None:
        yield "null"
    elif isinstance(value, float):
        yield {float("inf"): ".inf", float("-inf"): "-.inf"}.get(value, ".nan")
    elif isinstance(value, str):
        yield "'" + value.replace("'", "''") + "'"
    else:
        yield json.dumps(value)


def _parse(text: str) -> Any:
    try:
        return OmegaConf.to_container(OmegaConf.from_dotlist([f"value={text}"]))["value"]
    except (OmegaConfBaseException, ValueError):
        return _Unparsable


class _Unparsable:
    """Marks text that OmegaConf cannot read."""


def _same(a: Any, b: Any) -> bool:
    """Equal values of equal types, recursively (1, 1.0 and True differ; NaN equals NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and a != a:
        return b != b
    return a == b
