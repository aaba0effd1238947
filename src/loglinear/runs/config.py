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
import functools
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

from loglinear.checks import check_float, check_int
from loglinear.identity import ADDED, EXCLUDED, LABEL, field_types, with_role
from loglinear.identity import identity as declared_identity
from loglinear.models.config import SHARE_FROM_TRAINED, ModelConfig, share_from_for_training_length
from loglinear.models.mixers import MIXERS, check_model
from loglinear.runs.stopping import budget_validations
from loglinear.synthetics import DataConfig
from loglinear.synthetics.config import (
    check_data_config,
    check_same_vocabulary,
    evaluation_sets,
    training_set,
    validation_sets,
)

CONFIGS_DIR = Path(__file__).resolve().parent.parent / "configs"
GROUPS = ("data", "model", "train", "logger")
ID_LENGTH = 10


class ConfigError(ValueError):
    """A bad run configuration; the message is one line naming the key."""


SOLVED = 0.99
"""Validation accuracy strictly above which a task counts as solved (zoology, the paper): the default
early-stopping threshold, and the report's default threshold of solved."""


MAX_SEED = 2**32 - 1
"""The largest seed Lightning (numpy) accepts."""
PRECISIONS = ("auto", "32-true", "64-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true", "transformer-engine",
              "transformer-engine-float16")
"""`train.precision`: auto, or a precision of Lightning's Trainer."""
ACCELERATORS = ("auto", "cpu", "gpu", "cuda", "mps", "tpu")
"""`train.accelerator`: the accelerators of Lightning's Trainer."""


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
    early_stop_threshold: stop once the run is solved: validation accuracy strictly above it (zoology, the
                     paper: 0.99) on `threshold_evals` consecutive validations; None trains to max_steps (the run
                     is then solved at SOLVED, recorded without stopping).
    threshold_evals: how many consecutive validations the accuracy must stay above the threshold (1: the first
                     validation above it, as zoology; docs/runs.md, "Solved", has the pilot behind the default).
    plateau_window, plateau_min_delta: a run ended by its budget is on a plateau when its best validation
                     accuracy rose by less than `plateau_min_delta` over its last `plateau_window` validations,
                     else still improving (result.json `convergence`, runs/stopping.py). Labels only: no part
                     of a run's identity, but of its legacy one (`legacy_run_id`).
    patience:        None (default): a plateau is no reason to stop; an int: also stop after this
                     many validations without improvement.
    grad_clip:       gradient-norm clipping (0 disables).
    precision:       "auto" is bf16-mixed on GPU and 32-true on CPU; else one of Lightning's (PRECISIONS).
    accelerator, devices, strategy: passed to the Lightning Trainer. One device by default, so a run's
                     batch never depends on the machine; data parallel: devices=N strategy=ddp (each rank
                     draws its own batches: the effective batch is N x data.batch_size).
    deterministic:   torch deterministic algorithms (Triton atomics are not covered).
    compile:         torch.compile each block of the model (mixer, norms, MLP; the fused kernels run inside
                     it as calls the compiler leaves alone); off by default. On the CPU torch.compile needs a
                     C++ compiler (`loglinear doctor` says whether there is one).
    cuda_graphs:     with `compile`, replay each compiled block as CUDA graphs (torch.compile's mode
                     "reduce-overhead": fewer kernel launches per step); CUDA only.
    fused_loss:      the training loss fused with the LM head and computed in chunks of positions
                     (models/linear_cross_entropy.py), without the logits of every scored position: the same
                     loss and gradients to float32's rounding, so a run's numbers move at that rounding; off by
                     default. Validation and test compute the unfused loss either way.
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
    threshold_evals: int = field(default=1, metadata=ADDED)
    plateau_window: int = field(default=10, metadata=LABEL)
    plateau_min_delta: float = field(default=0.01, metadata=LABEL)
    patience: int | None = None
    grad_clip: float = 1.0
    precision: str = "auto"
    accelerator: str = "auto"
    devices: Any = 1
    strategy: str = "auto"
    deterministic: bool = False
    compile: bool = field(default=False, metadata=ADDED)
    cuda_graphs: bool = field(default=False, metadata=ADDED)
    fused_loss: bool = field(default=False, metadata=ADDED)
    init_from: str | None = None

    def __post_init__(self) -> None:
        check_int("train.seed", self.seed, minimum=0, maximum=MAX_SEED)
        for name in ("max_steps", "val_every"):
            check_int(f"train.{name}", getattr(self, name), minimum=1)
        check_int("train.warmup_steps", self.warmup_steps, minimum=0)
        for name in ("threshold_evals", "plateau_window"):
            check_int(f"train.{name}", getattr(self, name), minimum=1)
        check_float("train.plateau_min_delta", self.plateau_min_delta, minimum=0, maximum=1)
        validations = budget_validations(self.max_steps, self.val_every)
        if self.threshold_evals > validations:
            raise ValueError(f"train.threshold_evals={self.threshold_evals} is more than the {validations} "
                             f"validation(s) of the budget (train.max_steps={self.max_steps}, train.val_every="
                             f"{self.val_every}): no run could ever be solved")
        if self.patience is not None:
            check_int("train.patience", self.patience, minimum=1)
        check_float("train.lr", self.lr, above=0)
        check_float("train.weight_decay", self.weight_decay, minimum=0)
        for name in ("beta1", "beta2"):
            check_float(f"train.{name}", getattr(self, name), minimum=0, below=1)
        check_float("train.min_lr_ratio", self.min_lr_ratio, minimum=0, maximum=1)
        try:
            check_float("train.grad_clip", self.grad_clip, minimum=0)
        except ValueError as e:
            raise ValueError(f"{e} (0 disables clipping)") from None
        if self.early_stop_threshold is not None:
            try:
                check_float("train.early_stop_threshold", self.early_stop_threshold, minimum=0, below=1)
            except ValueError as e:
                raise ValueError(f"{e} (a validation accuracy; null trains to max_steps)") from None
        _check_choice("train.precision", self.precision, PRECISIONS)
        _check_choice("train.accelerator", self.accelerator, ACCELERATORS)
        if self.cuda_graphs and not self.compile:
            raise ValueError("train.cuda_graphs=true needs train.compile=true (CUDA graphs of the compiled blocks)")
        _check_devices(self.devices)

    def lr_factor(self, step: int) -> float:
        """Learning-rate multiplier at `step`: linear warmup, then cosine to `min_lr_ratio`."""
        if step < self.warmup_steps:
            return (step + 1) / self.warmup_steps
        progress = min(1.0, (step - self.warmup_steps) / max(1, self.max_steps - self.warmup_steps))
        return self.min_lr_ratio + (1 - self.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def solved_threshold(train: TrainConfig) -> float:
    """The validation accuracy above which a run of `train` counts as solved: its early-stopping threshold, SOLVED
    when it trains without one."""
    return SOLVED if train.early_stop_threshold is None else train.early_stop_threshold


def _check_choice(name: str, value: object, choices: Sequence[str]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}, got {value!r}")


def _check_devices(devices: Any) -> None:
    """Lightning's forms: "auto", a count (-1: every device) or a list of device indices."""
    if devices == "auto" or devices == -1:
        return
    if isinstance(devices, list) and devices and len(set(devices)) == len(devices):
        for index in devices:
            check_int("train.devices", index, minimum=0)
        return
    if isinstance(devices, int) and not isinstance(devices, bool) and devices >= 1:
        return
    raise ValueError(f"train.devices must be auto, a count >= 1 (-1: every device) or a list of distinct device "
                     f"indices, got {devices!r}")


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
    sequence of any set) unless given; `model.output_head` and `model.input_embedding` are the task's
    (`Task.output_head`, `Task.input_embedding`);
    `model.lambda_share_from_level: trained` becomes the deepest level the longest training sequence reaches.
    Where a run lives and how it is logged are no part of its identity: it may move, or be resumed by a wandb agent.
    """

    out_dir: str = field(default=MISSING, metadata=EXCLUDED)
    data: DataConfig = MISSING
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig, metadata=EXCLUDED)


ID_LABELS: dict[str, Any] = with_role(RunConfig, LABEL)
"""The keys that only label how a run ended (plateau or improving, runs/stopping.py), with their defaults: a study
that labels its runs otherwise reuses them (the report labels each run with the study's values). Runs made while
they were part of the identity, away from their defaults, keep that id: `legacy_run_id`."""


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
    """Replace group values that are paths of YAML files by the files' contents; a group given as anything
    else but a mapping (`model=5`, `model=null`) is a ConfigError (it would drop the preset's group)."""
    for group in GROUPS:
        if group not in cfg:
            continue
        value = cfg[group]
        if isinstance(value, str):
            cfg[group] = load_mapping(find_config_file(value, beside), f"a {group} group file")
        elif not OmegaConf.is_dict(value):
            raise ConfigError(f"{group}={value if value is not None else 'null'}: a group is a mapping of its keys "
                              f"or the path of a YAML file ({group}={group}/NAME.yaml)")
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
    return build(typed(user), given_model_keys(user))


def typed(user: DictConfig, require: bool = True) -> dict[str, Any]:
    """`user` merged into `RunConfig`'s defaults as plain containers: unknown keys and values of the wrong
    type are refused here, values out of range by `build`. `require=False` leaves a required key that is
    missing as "???" (a part of a run's keys, completed by others; `check_required` on the whole)."""
    try:
        merged = OmegaConf.merge(_schema(), user)
        values = OmegaConf.to_container(merged, resolve=True)
    except OmegaConfBaseException as e:
        raise ConfigError(_one_line(e)) from None
    if require:
        check_required(values)  # type: ignore[arg-type]
    return values  # type: ignore[return-value]


@functools.cache
def _schema() -> DictConfig:
    """`RunConfig` as a structured config, made once: `OmegaConf.merge` copies it, never changes it."""
    return OmegaConf.structured(RunConfig)


def check_required(values: dict[str, Any]) -> None:
    """Refuse `typed` values that lack out_dir or data.task (both "???" until given)."""
    if values.get("out_dir", MISSING) == MISSING:
        raise ConfigError("out_dir is required: the run's directory (out_dir=runs/my_run)")
    data = values.get("data", MISSING)
    if data == MISSING or data.get("task", MISSING) == MISSING:
        raise ConfigError("data.task is required: give a data preset (data=data/mqar_cpu.yaml) or data.task=...")


def given_model_keys(user: DictConfig) -> set[str]:
    """The `model` keys the user gave (the others take their defaults, or follow the data)."""
    model = user.get("model") if "model" in user else None
    return set(model) if OmegaConf.is_dict(model) else set()


def build(values: dict[str, Any], given_model: set[str]) -> RunConfig:
    """The `RunConfig` of `typed` values (which it fills in and takes over): every value checked,
    `model.vocab_size` and `model.max_len` following the data unless in `given_model` (then checked against it)."""
    try:
        data = _instance(DataConfig, values["data"])
        try:
            check_data_config(data)
        except (ValueError, TypeError) as e:
            raise ConfigError(f"data.{str(e).splitlines()[0]}") from None
        try:
            vocab, longest, train_longest, head, embedding = _data_sizes(json.dumps(values["data"], sort_keys=True))
        except (ValueError, TypeError) as e:
            raise ConfigError(f"data ({data.task}): {str(e).splitlines()[0]}") from None
        model = values["model"]
        for key, needed, what in (("vocab_size", vocab, f"the task's vocabulary ({data.task}: {vocab} tokens)"),
                                  ("max_len", longest, f"the longest sequence of the data ({longest} tokens)")):
            if key not in given_model:
                model[key] = needed
            elif isinstance(model[key], int) and model[key] < needed:
                raise ConfigError(f"model.{key}={model[key]} is smaller than {what}: leave it out to follow the "
                                  f"data, or give at least {needed}")
        for key, needed, what in (("output_head", head, "is scored through the"),
                                  ("input_embedding", embedding, "reads its tokens through the")):
            if key in given_model and model[key] != needed:
                raise ConfigError(f"model.{key}={model[key]}: task {data.task} {what} {needed!r} {key.split('_')[1]}; "
                                  f"leave model.{key} out to follow the task")
            model[key] = needed
        if model.get("lambda_share_from_level") == SHARE_FROM_TRAINED:
            model["lambda_share_from_level"] = share_from_for_training_length(train_longest)
        cfg = _instance(RunConfig, values)
        check_model(cfg.model)
    except ConfigError:
        raise
    except (ValueError, TypeError) as e:
        raise ConfigError(str(e).splitlines()[0]) from None
    if "{run_id}" in cfg.out_dir:  # a sweep's run folder: out_dir=sweeps_out/<name>/runs/{run_id} (wandb agents)
        cfg.out_dir = cfg.out_dir.replace("{run_id}", run_id(cfg))
    if cfg.logger.wandb.mode not in ("offline", "online", "disabled"):
        raise ConfigError(f"logger.wandb.mode must be offline, online or disabled, got {cfg.logger.wandb.mode!r}")
    if cfg.train.compile:
        refused = compile_refusal(cfg.model.mixer)
        if refused:
            raise ConfigError(f"train.compile=true with model.mixer={cfg.model.mixer}: {refused}")
    return cfg


def compile_refusal(mixer: str) -> str | None:
    """Why the mixer that `mixer` names (a name or an import path) is not trained compiled: the `compile_defect` of
    its class, inherited by a subclass that does not set its own; None when none is known."""
    cls = MIXERS[mixer]
    if cls.compile_defect is None:
        return None
    declared = next(c for c in cls.__mro__ if "compile_defect" in vars(c))
    inherited = "" if declared is cls else f" (as {declared.__module__}:{declared.__qualname__}, which it extends)"
    return f"{cls.compile_defect}{inherited}"


@functools.lru_cache(maxsize=1024)
def _data_sizes(data_json: str) -> tuple[int, int, int, str, str]:
    """The vocabulary every set of the data shares, its longest sequence, its longest training sequence and the
    output head and input embedding its task needs (a ValueError naming a set whose tasks cannot be built or whose
    vocabulary differs); cached by the data's JSON: a sweep's runs share a few."""
    data = _instance(DataConfig, json.loads(data_json))
    train = training_set(data)
    sets = [train, *validation_sets(data), *evaluation_sets(data)]
    longest = max(task.seq_len for s in sets for task in s.tasks)
    task = train.tasks[0]
    return (check_same_vocabulary(sets), longest, max(t.seq_len for t in train.tasks), task.output_head,
            task.input_embedding)


def _instance(cls: type, values: Mapping[str, Any]) -> Any:
    """The dataclass `cls` of plain `values`, nested config groups built as their dataclasses (what
    `OmegaConf.to_object` builds, without OmegaConf)."""
    hints = field_types(cls)
    return cls(**{k: _instance(hints[k], v) if dataclasses.is_dataclass(hints[k]) else v for k, v in values.items()})


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


def identity(config: dict[str, Any], legacy: bool = False) -> dict[str, Any]:
    """What a run computes: its configuration (a plain dict) less what its fields' identity roles leave out
    (loglinear/identity.py); `legacy`: as before the labels of its end were left out (ID_LABELS)."""
    return declared_identity(RunConfig, config, legacy)


def run_id(cfg: RunConfig, legacy: bool = False) -> str:
    """The stable id of a run: a hash of its resolved configuration's `identity` (`legacy`: the earlier one)."""
    config = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
    return config_id({k: _fields(v) if dataclasses.is_dataclass(v) else v for k, v in config.items()}, legacy)


def config_id(config: dict[str, Any], legacy: bool = False) -> str:
    """`run_id` of a configuration as a plain dict (a manifest's, a result's)."""
    canonical = json.dumps(identity(config, legacy), sort_keys=True, separators=(",", ":"), allow_nan=True,
                           default=_fields)
    return hashlib.sha1(canonical.encode()).hexdigest()[:ID_LENGTH]


def legacy_run_id(cfg: RunConfig) -> str | None:
    """The id the run had while ID_LABELS were part of its identity, where that differs from its id (labels away
    from their defaults), else None: the folder of such a run made then is still its folder."""
    earlier = run_id(cfg, legacy=True)
    return None if earlier == run_id(cfg) else earlier


def identity_difference(before: Any, now: Any, key: str = "") -> str | None:
    """The first key whose value differs between two identities, as `key: before -> now` (None when none does)."""
    if isinstance(before, dict) and isinstance(now, dict):
        for name in sorted(set(before) | set(now)):
            found = identity_difference(before.get(name), now.get(name), f"{key}.{name}" if key else name)
            if found:
                return found
        return None
    return None if before == now else f"{key}: {before!r} -> {now!r}"


def _fields(group: Any) -> dict[str, Any]:
    """A config group (a dataclass) as JSON sees it: its fields (what `dataclasses.asdict` gives, faster)."""
    return {f.name: getattr(group, f.name) for f in dataclasses.fields(group)}
