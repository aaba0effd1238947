"""Resolving the runs of a sweep with one OmegaConf merge per value of a varied key, not one per run.

`loglinear train` resolves a run by merging the preset, the base keys and the run's varied keys into
`RunConfig` with OmegaConf (`runs.config.resolve`: tens of milliseconds a run, minutes for a sweep of
thousands). The runs of a sweep differ only in their varied keys, and those never overlap
(`spec._check_disjoint`): `PointResolver` merges once for the base and once for each value of each
varied key, keeps the part of the typed values that key sets, and builds each run from the base's
values with its keys' parts put in, through the same `runs.config.build` (every check, the
data-derived keys) as `resolve`. `reference` is the run-by-run resolution; it is used for a config
with interpolations (`${...}`: one key's value may follow another's) and for a run whose keys do not
resolve (so its error is the reference's).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from loglinear.runs.config import (
    GROUPS,
    ConfigError,
    RunConfig,
    build,
    check_required,
    given_model_keys,
    load_run_config,
    typed,
    user_config,
)
from loglinear.sweeps.arguments import override


@dataclass(frozen=True)
class Part:
    """What one varied key's value sets: the typed value at the key, and the model keys it gives."""

    value: Any
    given_model: frozenset[str]


class PointResolver:
    """The `RunConfig` of each point (varied key -> value) of a sweep on `preset` and the `base` arguments."""

    def __init__(self, preset: str | None, base: list[str], out_dir: str) -> None:
        self.preset, self.base, self.out_dir = preset, base, out_dir
        self.parts: dict[tuple[str, str], Part | None] = {}
        self.values: dict[str, Any] | None = None
        self.base_user: DictConfig | None = None
        try:
            user = self._user({})  # the base alone may lack a required key that the varied keys give
            if not _interpolates(user):
                self.values, self.given = typed(user, require=False), given_model_keys(user)
                self.base_user = user
        except ConfigError:
            pass  # each run says what is wrong (`reference`)

    def reference(self, point: Mapping[str, Any]) -> RunConfig:
        """The run as `loglinear train` resolves it: the preset, the base, the varied keys, then out_dir."""
        return load_run_config(self.preset, self._arguments(point))

    def resolve(self, point: Mapping[str, Any]) -> RunConfig:
        if self.values is None:
            return self.reference(point)
        values, given = _copy(self.values), set(self.given)
        for key, value in point.items():
            part = self._part(key, value)
            if part is None:
                return self.reference(point)
            _put(values, key, _copy(part.value))
            given |= part.given_model
        check_required(values)  # the base alone may lack what the varied keys did not give either
        return build(values, given)

    def _part(self, key: str, value: Any) -> Part | None:
        cache_key = (key, repr(value))
        if cache_key not in self.parts:
            self.parts[cache_key] = None
            try:
                user = self._user_with(key, value)
                if not _interpolates(user):
                    self.parts[cache_key] = Part(_get(typed(user, require=False), key),
                                                 frozenset(given_model_keys(user)))
            except (ConfigError, OmegaConfBaseException, KeyError, TypeError):
                pass
        return self.parts[cache_key]

    def _user_with(self, key: str, value: Any) -> DictConfig:
        """The user config of the base with `key` set to `value`: the base's (read once) with the key merged on top,
        as `user_config` merges single keys last; a group key replaces its group there, so it is read whole."""
        if self.base_user is None or key in GROUPS or key == "out_dir":
            return self._user({key: value})
        return OmegaConf.merge(self.base_user, OmegaConf.from_dotlist([override(key, value)]))

    def _arguments(self, point: Mapping[str, Any]) -> list[str]:
        return [*self.base, *(override(k, v) for k, v in point.items()), override("out_dir", self.out_dir)]

    def _user(self, point: Mapping[str, Any]) -> DictConfig:
        return user_config(self.preset, self._arguments(point))


def _copy(value: Any) -> Any:
    """A copy of plain typed values (dicts, lists, scalars): what `copy.deepcopy` gives, faster."""
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _interpolates(user: DictConfig) -> bool:
    return "${" in OmegaConf.to_yaml(user)


def _get(values: dict[str, Any], key: str) -> Any:
    for part in key.split("."):
        values = values[part]
    return values


def _put(values: dict[str, Any], key: str, value: Any) -> None:
    *path, last = key.split(".")
    for part in path:
        values = values.setdefault(part, {})
    values[last] = value

