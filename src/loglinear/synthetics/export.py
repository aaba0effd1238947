"""A data preset's training, validation and test sets as NumPy `.npy` files with a JSON manifest, and back.

Another framework reads them without this package: `np.load("test.0.inputs.npy")` is an `(n, T)` int64 array
of token ids and `test.0.targets.npy` the same shape, -100 where a position is not scored; `data.json` names
each file's set, the task and its arguments, the seed and how every batch's seed is derived from it.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from loglinear.synthetics.batch import IGNORE_INDEX
from loglinear.synthetics.config import DataConfig, evaluation_sets, training_set, validation_sets
from loglinear.synthetics.seeding import TEST, TRAIN, VALIDATION
from loglinear.synthetics.streams import FixedBatches, TrainStream

MANIFEST = "data.json"


def export_data(config: DataConfig, folder: Path, train_size: int) -> Path:
    """Write `train_size` training examples (the first batches of the training stream, steps 0, 1, ...), every
    validation set (`config.val_size` examples each) and every test set (`config.test_size` each), exactly the
    examples a run with `config` trains on and is scored on, to `folder` (which must not hold a manifest yet)."""
    if (folder / MANIFEST).exists():
        raise FileExistsError(f"{folder / MANIFEST} exists: export into a new folder")
    train = TrainStream(training_set(config), config.batch_size, config.seed)
    batches = [train.batch(step) for step in range(-(-train_size // config.batch_size))]
    lengths = sorted({b["inputs"].shape[1] for b in batches})
    if len(lengths) > 1:
        raise ValueError(f"the training mixture mixes sequence lengths {lengths}: one array cannot hold them; "
                         "export each component as a preset of its own")
    trained = {part: array[:train_size] for part, array in _concatenate(batches).items()}
    splits: dict[str, list[tuple[str, dict[str, torch.Tensor]]]] = {"train": [("train", trained)]}
    for split, sets, size in (("validation", validation_sets(config), config.val_size),
                              ("test", evaluation_sets(config), config.test_size)):
        fixed = FixedBatches(sets, size, config.batch_size, config.seed, split)
        splits[split] = [(s.name, _concatenate([fixed[j] for j, (i, _, _) in enumerate(fixed.index) if i == k]))
                         for k, s in enumerate(sets)]
    folder.mkdir(parents=True, exist_ok=True)
    files: dict[str, list[dict[str, Any]]] = {}
    for split, sets in splits.items():
        files[split] = []
        for index, (name, arrays) in enumerate(sets):
            stem = split if split == "train" else f"{split}.{index}"
            for part in ("inputs", "targets"):
                np.save(folder / f"{stem}.{part}.npy", arrays[part].numpy())
            files[split].append({"name": name, "inputs": f"{stem}.inputs.npy", "targets": f"{stem}.targets.npy",
                                 "examples": len(arrays["inputs"])})
    manifest = {
        "data": asdict(config),
        "vocab_size": training_set(config).tasks[0].vocab_size,
        "num_classes": training_set(config).tasks[0].num_classes,
        "ignore_index": IGNORE_INDEX,
        "seeds": f"training batch n: derive_seed(seed, {TRAIN}, n); validation (test) batch b of set i: "
                 f"derive_seed(seed, {VALIDATION} ({TEST}), i, b), in loglinear.synthetics.seeding",
        "files": files,
    }
    path = folder / MANIFEST
    path.write_text(json.dumps(manifest, indent=2) + "\n")
    return path


def read_exported(folder: Path) -> dict[str, list[tuple[str, torch.Tensor, torch.Tensor]]]:
    """The sets of an exported folder: split -> [(set name, inputs, targets)], as int64 tensors."""
    manifest = json.loads((folder / MANIFEST).read_text())
    return {split: [(entry["name"], torch.from_numpy(np.load(folder / entry["inputs"])),
                     torch.from_numpy(np.load(folder / entry["targets"]))) for entry in entries]
            for split, entries in manifest["files"].items()}


def _concatenate(batches: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
    return {part: torch.cat([b[part] for b in batches]) for part in ("inputs", "targets")}
