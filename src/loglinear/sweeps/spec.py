"""Sweep specs: a YAML grid of runs, expanded into `loglinear train` argument lists with stable ids.

A spec (configs/sweeps/*.yaml):

    name: demo_cpu                      # the sweep's name (and its default output folder)
    base:                               # what every run shares
      preset: mqar_cpu.yaml             # optional run preset: beside the spec, the working directory, configs/
      model.d_model: 64                 # dotted keys and/or nested mappings
      train: {max_steps: 600}
    grid:                               # cartesian product: config key -> list of values
      model.mixer: [attention, mamba2]
      train.lr: [1.0e-3, 3.0e-3]
    zip:                                # optional: keys that vary together, one group per entry
      - {model.d_model: [16, 64], model.attention_heads: [1, 2]}
    report: {threshold: 0.99, plateau: 0.5, primary: {...}}   # optional: what the report tests (spec_keys.py)
    protocol: {selection_seeds: [0, 1], confirmation_seeds: [2, 3, 4]}   # optional: two stages (spec_keys.py)

A run is the arguments of one `loglinear train` command: the preset, then `key=value` for each base
key, then for each grid and zip key (so a key in both base and grid takes the grid's values). The
sweep resolves them once, when it expands; local runs and Slurm jobs train from that resolved
config.yaml, and wandb agents pass the same arguments, which resolve to the same configuration.
A group key (`data`, `model`, `train`, `logger`) may take a YAML file (`data: [data/parity.yaml,
data/s5.yaml]`), looked up like the preset (a spec is never its own preset: a spec in configs/sweeps/
may share a run preset's name, and `../name.yaml` or `name.yaml` finds configs/name.yaml).

With a `protocol`, each seed sets `train.seed` and `data.seed`; `expand` gives stage 1 (every point on
the selection seeds) and `expand(spec, points)` the confirmation runs the report's selection asks for.

A run's id hashes its resolved configuration without `out_dir`, `logger`, `model.selfcheck` and the keys that only
label its end (each field's identity role, docs/runs.md "Run ids": how a run is logged, guarded or labelled is not
what it is): the same run has the same id in any process, whatever the key order of the spec. A run made while
those labels were part of the id, away from their defaults, has that id as its `alias`, and a sweep finds its
folder under it.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from loglinear.models import MIXERS
from loglinear.runs.config import (
    CONFIGS_DIR,
    GROUPS,
    ConfigError,
    RunConfig,
    find_config_file,
    legacy_run_id,
    load_mapping,
)
from loglinear.sweeps.arguments import override
from loglinear.sweeps.resolver import PointResolver
from loglinear.sweeps.spec_keys import (
    CONFIRMATION,
    SEED_KEYS,
    SELECTION,
    ReportConfig,
    TwoStage,
    report_config,
    seed_point,
    two_stage,
)

SPEC_KEYS = ("name", "base", "grid", "zip", "report", "protocol")
PLACEHOLDER_OUT_DIR = "{run_id}"


class SpecError(ConfigError):
    """A bad sweep spec; the message is one line naming the spec and the key."""


@dataclass
class SweepSpec:
    """A parsed spec. `base`, `grid` and each zip group map dotted config keys to values, in spec order;
    group files (and `preset`) are already paths that `loglinear train` finds from the working directory."""

    name: str
    path: Path | None = None
    preset: str | None = None
    base: dict[str, Any] = field(default_factory=dict)
    grid: dict[str, list[Any]] = field(default_factory=dict)
    zip: list[dict[str, list[Any]]] = field(default_factory=list)
    report: ReportConfig = field(default_factory=ReportConfig)
    protocol: TwoStage | None = None

    @property
    def varied_keys(self) -> list[str]:
        """The keys that differ between runs: grid keys, then zip keys (then the seeds of a protocol)."""
        keys = [*self.grid, *(key for group in self.zip for key in group)]
        return keys + (list(SEED_KEYS) if self.protocol else [])

    def base_overrides(self) -> list[str]:
        """The `key=value` arguments of `loglinear train` that every run shares."""
        return [override(k, v) for k, v in self.base.items()]


@dataclass
class Run:
    """One point of a sweep: its id, the values of the varied keys, its `loglinear train` arguments
    (without `out_dir`), and its resolved configuration."""

    run_id: str
    point: dict[str, Any]
    args: list[str]
    config: RunConfig
    stage: str | None = None
    """selection or confirmation under a two-stage protocol, else None."""
    alias: str | None = None
    """The run's other id, where it has one: the id it had before the keys that only label its end left its
    identity (runs/config.py, `legacy_run_id`), or, once its folder is found under that one (manifest.py,
    `adopt_legacy`), the current id."""

    @property
    def ids(self) -> tuple[str, ...]:
        """Every id the run is known by."""
        return (self.run_id,) if self.alias is None else (self.run_id, self.alias)




def load_spec(path: str | Path) -> SweepSpec:
    """Read and check a spec file; a `SpecError` names the file and the offending key."""
    path = Path(path)
    if not path.is_file():
        raise SpecError(f"sweep spec {str(path)!r} not found")
    try:
        raw = OmegaConf.to_container(load_mapping(path, "a sweep spec"), resolve=True)
    except ConfigError as e:
        raise SpecError(str(e)) from None
    except (OmegaConfBaseException, ValueError) as e:  # e.g. an interpolation that does not resolve
        raise SpecError(f"{path}: not a valid spec: {str(e).splitlines()[0]}") from None
    return parse_spec(raw, path)


def parse_spec(raw: Any, path: Path | None = None) -> SweepSpec:
    """Check a spec given as a mapping (`path`, if any, locates relative files and names the spec in errors)."""
    try:
        return _parse_spec(raw, path)
    except ConfigError as e:
        raise SpecError(f"{path or 'sweep spec'}: {e}") from None


def _parse_spec(raw: Any, path: Path | None) -> SweepSpec:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"must be a mapping with keys {', '.join(SPEC_KEYS)}")
    unknown = [k for k in raw if k not in SPEC_KEYS]
    if unknown:
        raise ConfigError(f"unknown key {unknown[0]!r}; a spec has {', '.join(SPEC_KEYS)}")
    name = raw.get("name")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
        raise ConfigError(f"name must be a folder-safe string (letters, digits, _ . -), got {name!r}")

    base_raw = raw.get("base") or {}
    if not isinstance(base_raw, Mapping):
        raise ConfigError("base must be a mapping of config keys")
    base = dict(_flatten(base_raw))
    preset = base.pop("preset", None)
    if preset is not None and not isinstance(preset, str):
        raise ConfigError(f"base.preset must be a path, got {preset!r}")
    if "out_dir" in base:
        raise ConfigError("base.out_dir: the sweep sets each run's directory (use --out)")

    grid_raw = raw.get("grid") or {}
    if not isinstance(grid_raw, Mapping):
        raise ConfigError("grid must be a mapping of config key -> list of values")
    grid = {str(k): _values(f"grid.{k}", v) for k, v in grid_raw.items()}

    zip_raw = raw.get("zip") or []
    if not isinstance(zip_raw, list) or not all(isinstance(g, Mapping) and g for g in zip_raw):
        raise ConfigError("zip must be a list of mappings, each config key -> list of values")
    groups = []
    for i, group in enumerate(zip_raw):
        values = {str(k): _values(f"zip[{i}].{k}", v) for k, v in group.items()}
        lengths = {k: len(v) for k, v in values.items()}
        if len(set(lengths.values())) > 1:
            raise ConfigError(f"zip[{i}]: the lists must have equal lengths, got {lengths}")
        groups.append(values)
    _check_disjoint([*grid, *(k for g in groups for k in g)])
    protocol = _protocol(raw.get("protocol"), [*base, *grid, *(k for g in groups for k in g)])
    report = report_config(raw.get("report"))

    return SweepSpec(
        name=name,
        path=path,
        preset=None if preset is None else _find_file(preset, path),
        base={k: _group_file(k, v, path) for k, v in base.items()},
        grid={k: [_group_file(k, v, path) for v in vs] for k, vs in grid.items()},
        zip=[{k: [_group_file(k, v, path) for v in vs] for k, vs in g.items()} for g in groups],
        report=report,
        protocol=protocol,
    )


def _protocol(raw: Any, keys: list[str]) -> TwoStage | None:
    """The two-stage protocol, whose seeds are the only ones: the spec must not set a seed key itself."""
    protocol = two_stage(raw)
    if protocol is not None:
        for key in keys:
            if key in SEED_KEYS:
                raise ConfigError(f"{key}: with a protocol, its selection and confirmation seeds set "
                                  f"{' and '.join(SEED_KEYS)}; leave them out of base, grid and zip")
    return protocol


def points(spec: SweepSpec) -> Iterator[dict[str, Any]]:
    """The varied keys' values of every run: the cartesian product of the grid and the zip groups."""
    axes: list[list[dict[str, Any]]] = [[{key: v} for v in values] for key, values in spec.grid.items()]
    for group in spec.zip:
        keys = list(group)
        axes.append([dict(zip(keys, row, strict=True)) for row in zip(*group.values(), strict=True)])
    for combination in itertools.product(*axes):
        point: dict[str, Any] = {}
        for part in combination:
            point.update(part)
        yield point


def planned_runs(spec: SweepSpec) -> int:
    """How many runs the sweep makes: every point, on each selection seed under a protocol, which then adds
    each configuration at its chosen candidate (one per point without the selected keys, `report.select`) on each
    confirmation seed."""
    configurations = list(points(spec))
    if spec.protocol is None:
        return len(configurations)
    selected = set(spec.report.select)
    chosen = {json.dumps({k: v for k, v in p.items() if k not in selected}, sort_keys=True) for p in configurations}
    protocol = spec.protocol
    return len(configurations) * len(protocol.selection_seeds) + len(chosen) * len(protocol.confirmation_seeds)


def stage_one(spec: SweepSpec) -> Iterator[tuple[dict[str, Any], str | None]]:
    """The points of the first stage with their stage: every point, on each selection seed under a protocol."""
    if spec.protocol is None:
        yield from ((point, None) for point in points(spec))
        return
    for point in points(spec):
        for seed in spec.protocol.selection_seeds:
            yield {**point, **seed_point(seed)}, SELECTION


def confirmation_points(spec: SweepSpec, chosen: list[dict[str, Any]]) -> list[tuple[dict[str, Any], str]]:
    """Stage 2: each chosen point (its seed keys dropped) on each confirmation seed."""
    assert spec.protocol is not None
    stripped = list({json.dumps(p, sort_keys=True): p for p in
                     ({k: v for k, v in c.items() if k not in SEED_KEYS} for c in chosen)}.values())
    return [({**p, **seed_point(seed)}, CONFIRMATION) for p in stripped for seed in spec.protocol.confirmation_seeds]


def shared_resolver(spec: SweepSpec) -> PointResolver | None:
    """A resolver for several `expand` calls made together, which would each read the preset and merge each varied
    value again; None when the base does not resolve (`expand` says why)."""
    try:
        return PointResolver(spec.preset, spec.base_overrides(), PLACEHOLDER_OUT_DIR)
    except ConfigError:
        return None


def expand(spec: SweepSpec, staged: list[tuple[dict[str, Any], str | None]] | None = None,
           resolver: PointResolver | None = None) -> list[Run]:
    """Every run of the sweep (`staged`: these points with their stages; default the first stage), resolved and
    checked: one bad run fails the whole sweep before anything starts. `resolver`: one from `shared_resolver(spec)`."""
    runs: list[Run] = []
    seen: dict[str, dict[str, Any]] = {}
    where = spec.path or spec.name
    try:
        base = spec.base_overrides()
    except ConfigError as e:
        raise SpecError(f"{where}: base: {e}") from None
    if resolver is None:
        resolver = PointResolver(spec.preset, base, PLACEHOLDER_OUT_DIR)
    preset = [spec.preset] if spec.preset else []
    texts: dict[tuple[str, str], str] = {}  # override() reads each value back through OmegaConf: once per value
    for point, stage in stage_one(spec) if staged is None else staged:
        try:
            varied = [texts.get((k, repr(v))) or texts.setdefault((k, repr(v)), override(k, v))
                      for k, v in point.items()]
            cfg = resolver.resolve(point)
        except ConfigError as e:
            raise SpecError(f"{where}: run {describe(point)}: {e}") from None
        rid = cfg.out_dir  # the run's id, put in place of PLACEHOLDER_OUT_DIR when it was resolved
        if rid in seen:
            raise SpecError(
                f"{where}: runs {describe(seen[rid])} and {describe(point)} resolve to the same configuration"
            )
        seen[rid] = point
        runs.append(Run(run_id=rid, point=point, args=[*preset, *base, *varied], config=cfg, stage=stage,
                        alias=legacy_run_id(cfg)))
    _check_labels(runs, where)
    return runs


def _check_labels(runs: list[Run], where: object) -> None:
    """Two architectures never share a row label (`display_name`) in one sweep: the report would pool their runs
    into one row and pair against the pool (a subclass of a suite mixer keeps its display name unless it sets one)."""
    named: dict[str, str] = {}
    for mixer in dict.fromkeys(run.config.model.mixer for run in runs):
        label = MIXERS[mixer].display_name
        if label in named:
            paths = " and ".join(f"{m!r} ({_import_path(m)})" for m in (named[label], mixer))
            raise SpecError(f"{where}: model.mixer {paths} share the row label {label!r}, so the report would pool "
                            f"them: give one its own display_name, or run them in separate sweeps")
        named[label] = mixer


def _import_path(mixer: str) -> str:
    cls = MIXERS[mixer]
    return f"{cls.__module__}:{cls.__qualname__}"


def describe(point: Mapping[str, Any]) -> str:
    """A run's varied values as `key=value ...` (`(base)` for a sweep of one run)."""
    return " ".join(f"{k}={v}" for k, v in point.items()) or "(base)"


def _flatten(mapping: Mapping, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Nested mappings as dotted leaf keys (an empty mapping is a value); `preset` stays top-level."""
    for key, value in mapping.items():
        full = f"{prefix}{key}"
        if isinstance(value, Mapping) and value and full != "preset":
            yield from _flatten(value, f"{full}.")
        else:
            yield full, value


def _values(where: str, values: Any) -> list[Any]:
    if not isinstance(values, list) or not values:
        raise ConfigError(f"{where} must be a non-empty list of values, got {values!r}")
    return values


def _check_disjoint(varied: list[str]) -> None:
    """Varied keys appear once and never inside one another (their order on the command line would matter)."""
    for i, key in enumerate(varied):
        if key in varied[:i]:
            raise ConfigError(f"{key} is varied twice (grid and zip keys must be distinct)")
        for other in varied[:i]:
            if key.startswith(other + ".") or other.startswith(key + "."):
                raise ConfigError(f"{key} and {other} overlap: vary one key of a group, or the group file alone")


def _group_file(key: str, value: Any, spec: Path | None) -> Any:
    """A group given as a file: its path as `loglinear train` will find it (see `_find_file`)."""
    return _find_file(value, spec) if key in GROUPS and isinstance(value, str) else value


def _find_file(path: str, spec: Path | None) -> str:
    """Find a file as `find_config_file` does (beside the spec, never the spec itself); return the
    shortest of `path`, its path under configs/ and its absolute path that `loglinear train` (working
    directory, then configs/) finds as the same file."""
    found = find_config_file(path, spec.parent if spec else None, skip=spec).resolve()
    forms = [path] + (
        [str(found.relative_to(CONFIGS_DIR.resolve()))] if found.is_relative_to(CONFIGS_DIR.resolve()) else []
    )
    for form in forms:
        seen_by_train = next((c for c in (Path(form), CONFIGS_DIR / form) if c.is_file()), None)
        if seen_by_train is not None and seen_by_train.resolve() == found:
            return form
    return str(found)
