"""`RunConfig`: everything one run needs, as an OmegaConf structured config built from a preset and overrides.

    cfg = load_run_config("configs/mqar_cpu.yaml", ["model.mixer=mamba2", "train.lr=3.0e-3"])

A preset is YAML with the top-level keys of `RunConfig`. A group (`data`, `model`, `train`,
`logger`) may instead be the path of a YAML file holding just that group (e.g.
`data: data/mqar_cpu.yaml`, or `data=configs/data/parity.yaml` on the command line); a relative
path is looked up beside the file that names it, then in the working directory, then in the
project's `configs/`. Unknown keys and badly typed values raise `ConfigError` naming the full key
and, for a typo, the closest valid key.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from loglinear.checks import check_int
from loglinear.models.config import SHARE_FROM_TRAINED, ModelConfig, share_from_for_training_length
from loglinear.synthetics import DataConfig
from loglinear.synthetics.config import as_data_config, evaluation_sets, training_set, validation_sets

CONFIGS_DIR = Path(__file__).resolve().parent.parent / "configs"
GROUPS = ("data", "model", "train", "logger")
ID_EXCLUDED = ("out_dir", "logger", "model.selfcheck")
"""Config keys that do not change what a run computes, so they are not part of its identity (its id, and what a
rerun in its folder must match): where it lives, how it is logged (a run may move, or be resumed by a wandb
agent), whether the fused kernels check themselves first (result.json records what ran)."""
ID_LENGTH = 10


class ConfigError(ValueError):
    """A bad run configuration; the message is one line naming the key."""


SOLVED = 0.99
"""Validation accuracy strictly above which a task counts as solved (zoology, the paper): the default
early-stopping threshold, and the report's "runs above" threshold."""


@dataclass
class TrainConfig:
    """How a run trains (the `train.` keys of `loglinear train`).

    seed:            every initial weight, each module from its own generator keyed by (seed, module name)
                     (models/init.py); the data has its own `data.seed`.
    lr:              peak AdamW learning rate, reached after `warmup_steps`, then a cosine decay to
                     `lr * min_lr_ratio` at `max_steps`.
    weight_decay:    AdamW decay of the weight matrices (none on norms, biases, embeddings, A_log,
                     dt_bias, D and lambda parameters).
    max_steps:       the step budget.
    val_every:       validate (and checkpoint) every this many steps.
    early_stop_threshold: stop once validation accuracy is strictly above it (zoology, the paper: 0.99);
                     None trains to max_steps.
    patience:        None (default): a plateau is no reason to stop; an int: also stop after this
                     many validations without improvement.
    grad_clip:       gradient-norm clipping (0 disables).
    precision:       "auto" is bf16-mixed on GPU and 32-true on CPU; else any Lightning precision.
    accelerator, devices, strategy: passed to the Lightning Trainer. One device by default, so a run's
                     batch never depends on the machine; data parallel: devices=N strategy=ddp (each rank
                     draws its own batches: the effective batch is N x data.batch_size).
    deterministic:   torch deterministic algorithms (Triton atomics are not covered).
    init_from:       a finished run's folder: start from its final weights, matched by name (weights it
                     does not have keep their initialisation; a shape mismatch is an error), runs/init_from.py.
    """

    seed: int = 0
    lr: float = 1e-3
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.98
    warmup_steps: int = 50
    min_lr_ratio: float = 0.1
    max_steps: int = 2000
    val_every: int = 100
    early_stop_threshold: float | None = SOLVED
    patience: int | None = None
    grad_clip: float = 1.0
    precision: str = "auto"
    accelerator: str = "auto"
    devices: Any = 1
    strategy: str = "auto"
    deterministic: bool = False
    init_from: str | None = None

    def __post_init__(self) -> None:
        for name in ("max_steps", "val_every"):
            check_int(f"train.{name}", getattr(self, name), minimum=1)
        if not self.lr > 0 or not math.isfinite(self.lr):
            raise ValueError(f"train.lr must be a positive number, got {self.lr!r}")
        if self.warmup_steps < 0:
            raise ValueError(f"train.warmup_steps must be >= 0, got {self.warmup_steps}")
        if not 0 <= self.min_lr_ratio <= 1:
            raise ValueError(f"train.min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")
        if self.patience is not None and self.patience < 1:
            raise ValueError(f"train.patience must be None or >= 1, got {self.patience}")

    def lr_factor(self, step: int) -> float:
        """Learning-rate multiplier at `step`: linear warmup, then cosine to `min_lr_ratio`."""
        if step < self.warmup_steps:
            return (step + 1) / self.warmup_steps
        progress = min(1.0, (step - self.warmup_steps) / max(1, self.max_steps - self.warmup_steps))
        return self.min_lr_ratio + (1 - self.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


@dataclass
class WandbConfig:
    """mode: "offline" (default: logs under the run directory, `wandb sync` later), "online", or "disabled"."""

    mode: str = "offline"
    project: str = "loglinear"
    entity: str | None = None
    group: str | None = None


@dataclass
class LoggerConfig:
    """progress: a progress bar with loss and val/acc; False prints nothing per step (sweeps)."""

    wandb: WandbConfig = field(default_factory=WandbConfig)
    progress: bool = True


@dataclass
class RunConfig:
    """One run: `data` (task, arguments, seed), `model`, `train`, `logger`, and `out_dir`, its directory.

    `model.vocab_size` and `model.max_len` follow the data (the task's vocabulary, the longest
    sequence of any set) unless given; `model.lambda_share_from_level: trained` becomes the deepest
    level the longest training sequence reaches.
    """

    out_dir: str = MISSING
    data: DataConfig = MISSING
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)


def find_config_file(path: str, beside: Path | None, skip: Path | None = None) -> Path:
    """A config file named on the command line or in a file: in the folder `beside` (the file that names
    it), then in the working directory, then in configs/; never `skip` (a sweep spec may share its
    preset's name). Not found: a ConfigError naming every folder looked in."""
    candidates = ([beside / path] if beside else []) + [Path(path), CONFIGS_DIR / path]
    for candidate in candidates:
        if candidate.is_file() and not (skip and candidate.resolve() == skip.resolve()):
            return candidate
    raise ConfigError(f"config file {path!r} not found (looked in {', '.join(str(c.parent) for c in candidates)})")


def load_mapping(path: Path, what: str) -> DictConfig:
    """The YAML mapping in `path`; a file that is not one is a one-line ConfigError naming it."""
    try:
        loaded = OmegaConf.load(path)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        raise ConfigError(f"{path}: not valid YAML{where}: {getattr(e, 'problem', None) or e}") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot be read ({e.strerror})") from None
    if not isinstance(loaded, DictConfig):
        raise ConfigError(f"{path}: {what} must be a YAML mapping (key: value lines), got a {type(loaded).__name__}")
    return loaded


def _load_groups(cfg: DictConfig, beside: Path | None) -> DictConfig:
    """Replace group values that are paths of YAML files by the files' contents."""
    for group in GROUPS:
        value = cfg.get(group) if group in cfg else None
        if isinstance(value, str):
            cfg[group] = load_mapping(find_config_file(value, beside), f"a {group} group file")
    return cfg


def user_config(preset: str | Path | None, overrides: Sequence[str] = (), base: Mapping | None = None) -> DictConfig:
    """The keys the user gave (preset, then `base`, then `key=value` overrides), unchecked."""
    try:
        cfg = OmegaConf.create({})
        if preset is not None:
            path = find_config_file(str(preset), None)
            cfg = OmegaConf.merge(cfg, _load_groups(load_mapping(path, "a run preset"), path.parent))
        if base:
            cfg = OmegaConf.merge(cfg, _load_groups(OmegaConf.create(dict(base)), None))
        # whole-group files first, replacing the preset's group (data=data/s5.yaml inherits nothing from
        # the preset's data), then single keys on top of them
        groups = [o for o in overrides if o.split("=", 1)[0] in GROUPS]
        keys = [o for o in overrides if o not in groups]
        for group, value in _load_groups(OmegaConf.from_dotlist(groups), None).items():
            cfg[group] = value
        return OmegaConf.merge(cfg, OmegaConf.from_dotlist(keys))
    except OmegaConfBaseException as e:
        raise ConfigError(_one_line(e)) from None


def resolve(user: DictConfig) -> RunConfig:
    """Check `user` against `RunConfig`, fill the data-derived model keys (vocab_size, max_len, a
    lambda_share_from_level of "trained"), and build the typed config."""
    try:
        merged = OmegaConf.merge(OmegaConf.structured(RunConfig), user)
        if OmegaConf.is_missing(merged, "out_dir"):
            raise ConfigError("out_dir is required: the run's directory (out_dir=runs/my_run)")
        if OmegaConf.is_missing(merged, "data") or OmegaConf.is_missing(merged.data, "task"):
            raise ConfigError("data.task is required: give a data preset (data=data/mqar_cpu.yaml) or data.task=...")
        data: DataConfig = OmegaConf.to_object(merged.data)  # type: ignore[assignment]
        try:
            as_data_config(data)
        except (ValueError, TypeError) as e:
            raise ConfigError(f"data.{str(e).splitlines()[0]}") from None
        try:
            train_set = training_set(data)
            sets = [train_set, *validation_sets(data), *evaluation_sets(data)]
        except (ValueError, TypeError) as e:
            raise ConfigError(f"data ({data.task}): {str(e).splitlines()[0]}") from None
        model_keys = user.get("model") or {}
        if "vocab_size" not in model_keys:
            merged.model.vocab_size = train_set.tasks[0].vocab_size
        if "max_len" not in model_keys:
            merged.model.max_len = max(task.seq_len for s in sets for task in s.tasks)
        if merged.model.lambda_share_from_level == SHARE_FROM_TRAINED:
            train_len = max(task.seq_len for task in train_set.tasks)
            merged.model.lambda_share_from_level = share_from_for_training_length(train_len)
        cfg: RunConfig = OmegaConf.to_object(merged)  # type: ignore[assignment]
    except OmegaConfBaseException as e:
        raise ConfigError(_one_line(e)) from None
    except ConfigError:
        raise
    except (ValueError, TypeError) as e:
        raise ConfigError(str(e).splitlines()[0]) from None
    if "{run_id}" in cfg.out_dir:  # a sweep's run folder: out_dir=sweeps_out/<name>/runs/{run_id} (wandb agents)
        cfg.out_dir = cfg.out_dir.replace("{run_id}", run_id(cfg))
    if cfg.logger.wandb.mode not in ("offline", "online", "disabled"):
        raise ConfigError(f"logger.wandb.mode must be offline, online or disabled, got {cfg.logger.wandb.mode!r}")
    return cfg


def load_run_config(
    preset: str | Path | None = None, overrides: Sequence[str] = (), base: Mapping | None = None
) -> RunConfig:
    return resolve(user_config(preset, overrides, base))


def to_yaml(cfg: RunConfig) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))


def to_container(cfg: RunConfig) -> dict[str, Any]:
    return OmegaConf.to_container(OmegaConf.structured(cfg))  # type: ignore[return-value]


def _one_line(e: OmegaConfBaseException) -> str:
    message = str(e).splitlines()[0] if str(e) else type(e).__name__
    key = getattr(e, "full_key", None)
    return f"{key}: {message}" if key else message

def identity(config: dict[str, Any]) -> dict[str, Any]:
    """What a run computes: its configuration (a plain dict) without the ID_EXCLUDED keys."""
    kept = {k: v for k, v in config.items() if k not in ID_EXCLUDED}
    for group, _, name in (key.partition(".") for key in ID_EXCLUDED if "." in key):
        if isinstance(kept.get(group), dict):
            kept[group] = {k: v for k, v in kept[group].items() if k != name}
    return kept


def run_id(cfg: RunConfig) -> str:
    """The stable id of a run: a hash of its resolved configuration's `identity`."""
    canonical = json.dumps(identity(dataclasses.asdict(cfg)), sort_keys=True, separators=(",", ":"), allow_nan=True)
    return hashlib.sha1(canonical.encode()).hexdigest()[:ID_LENGTH]
