"""`train.init_from=RUN_DIR`: start a run from a finished run's final weights, matched by parameter name."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from loglinear.runs.config import ConfigError
from loglinear.runs.folder import FINISHED, LAST, read_result

PREFIX = "model."
"""The LightningModule keeps the language model under `model`: checkpoint keys are `model.<name>`."""


def load_initial_weights(model: nn.Module, run_dir: str | Path) -> list[str]:
    """Copy the final weights of the finished run in `run_dir` into `model` by name; returns the names of
    `model`'s weights the run does not have (they keep their initialisation).

    A run that has not finished, a weight whose shape differs, or a weight `model` has no place for is
    one ConfigError naming every such weight."""
    folder = Path(run_dir)
    try:
        result = read_result(folder)
    except ValueError as e:
        raise ConfigError(f"train.init_from: {e}") from None
    if result is None or result.get("status") not in FINISHED or not (folder / LAST).is_file():
        status = "no result" if result is None else f"status {result.get('status')}"
        raise ConfigError(f"train.init_from={folder} is not a finished run ({status}; needs {LAST} and a result "
                          f"with status {', '.join(FINISHED)})")
    checkpoint = torch.load(folder / LAST, map_location="cpu", weights_only=True)
    weights = {k[len(PREFIX):]: v for k, v in checkpoint["state_dict"].items() if k.startswith(PREFIX)}
    own = model.state_dict()
    problems = [f"{k} {tuple(v.shape)} here but {tuple(weights[k].shape)} there"
                for k, v in own.items() if k in weights and weights[k].shape != v.shape]
    problems += [f"{k} (no such weight here)" for k in weights if k not in own]
    if problems:
        raise ConfigError(f"train.init_from={folder} does not fit this model: {'; '.join(problems)}")
    model.load_state_dict(weights, strict=False)
    return [k for k in own if k not in weights]
