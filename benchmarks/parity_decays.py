"""Mamba-2's decay per head and input bit in parity runs, at initialisation and at the end of training.

In the first layer of a parity model, dt = softplus(W x_t + dt_bias) reads only the current token (the bit), so
each head has exactly two decays, alpha(0) and alpha(1) (alpha = 2 exp(dt A) - 1 with negative eigenvalues,
exp(dt A) without). Parity is tracked by a head with alpha(b) near +1 for one bit and near -1 for the other.
The initial weights are rebuilt from the run's config (the seeding of `loglinear train`); the final ones are
its last.ckpt. Prints one line per run and head: dt*A and alpha for each bit, then the run's validation accuracy.

Usage: python benchmarks/parity_decays.py RUN_DIR [RUN_DIR ...]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import lightning as L
import torch
import torch.nn.functional as F

from loglinear.models.mamba2 import Mamba2
from loglinear.runs.config import load_run_config
from loglinear.runs.lit import LitLanguageModel
from loglinear.synthetics import SyntheticDataModule


def initial_module(run_dir: Path) -> LitLanguageModel:
    cfg = load_run_config(run_dir / "config.yaml")
    L.seed_everything(cfg.train.seed, workers=True, verbose=False)  # as runs/train.py does before building
    SyntheticDataModule(cfg.data)
    return LitLanguageModel(cfg.model, cfg.train)


def decays_per_bit(module: LitLanguageModel) -> tuple[torch.Tensor, torch.Tensor]:
    """dt * A and alpha, each (2 bits, H heads), of the first layer's Mamba-2 mixer."""
    block = module.model.blocks[0]
    mixer = block.mixer
    if not isinstance(mixer, Mamba2):
        raise SystemExit(f"not a Mamba-2 model: {type(mixer).__name__}")
    with torch.no_grad():
        x = block.mixer_norm(module.model.embedding(torch.tensor([0, 1])))
        _, rest, _ = mixer._project(x)
        dtA = F.softplus(rest[1] + mixer.dt_bias) * mixer.A_log.exp()
        alpha = 2 * torch.exp(-dtA) - 1 if mixer.signed_decay else torch.exp(-dtA)
    return dtA, alpha


def describe(name: str, module: LitLanguageModel) -> list[str]:
    dtA, alpha = decays_per_bit(module)
    return [f"  {name} head {h}: dt*A {dtA[0, h]:.3f} / {dtA[1, h]:.3f}, alpha {alpha[0, h]:+.3f} / {alpha[1, h]:+.3f}"
            for h in range(dtA.shape[1])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path)
    args = parser.parse_args()
    for run_dir in args.runs:
        module = initial_module(run_dir)
        lines = describe("init", module)
        checkpoint = torch.load(run_dir / "last.ckpt", map_location="cpu", weights_only=False)
        module.load_state_dict(checkpoint["state_dict"])
        lines += describe("end ", module)
        result = json.loads((run_dir / "result.json").read_text())
        print(f"{run_dir.name}: best val/acc {result['val_accuracy']:.3f} (bit 0 / bit 1)")
        print("\n".join(lines))


if __name__ == "__main__":
    main()
