"""A data preset's training, validation and test sets as NumPy `.npy` files with a JSON manifest, and back.

Another framework reads them without this package: `np.load("test.0.inputs.npy")` is an `(n, T)` int64 array
of token ids and `test.0.targets.npy` the same shape, -100 where a position is not scored (and, for a task with
several right answers at a position, `test.0.allowed.npy` their bitmasks, `Batch.allowed`); `data.json` names
each file's set, the task and its arguments, the seed and how every example's seed is derived from it.

The export checks its preset as a run does (one vocabulary for every set, the fixed training set's single task)
and makes OUT itself: a folder that exists already, an empty OUT or a new folder at the filesystem root (an unset
shell variable) is refused before anything is written. The files are written a draw at a time (memory stays
small whatever N) into a hidden folder beside OUT, renamed to OUT once whole: a full disk, an interruption or any
error leaves no file, and names the file it was writing.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

import numpy as np
import torch

from loglinear.synthetics.batch import IGNORE_INDEX
from loglinear.synthetics.config import (
    DataConfig,
    TaskSet,
    check_data_config,
    check_same_vocabulary,
    evaluation_sets,
    training_set,
    validation_sets,
)
from loglinear.synthetics.seeding import FIXED, TEST, VALIDATION
from loglinear.synthetics.streams import FIXED_CHUNK, FixedBatches, fixed_chunks
from loglinear.synthetics.task import Task

MANIFEST = "data.json"
PARTS = ("inputs", "targets")
ALLOWED = "allowed"
"""The optional third part of a set: the bitmasks of the right answers, for a task whose batches have them."""
DTYPE = np.dtype("<i8")
"""The arrays' type: int64, little-endian, as `np.save` writes a torch int64 tensor on every machine here."""


class ExportError(ValueError):
    """A preset, an OUT or an exported folder that cannot be used: one line naming the argument or the file."""


@dataclass(frozen=True)
class Array:
    """One set's files to write: its split, set name and stem, its shape, its parts (`PARTS`, and `ALLOWED` for a
    task that has it) and its rows, a draw at a time."""

    split: str
    name: str
    stem: str
    shape: tuple[int, int]
    draws: Iterable[dict[str, torch.Tensor]]
    parts: tuple[str, ...] = PARTS


class ExportedSet(NamedTuple):
    """One set read back: its name, inputs and targets, and the allowed answers' bitmasks (None: the task has none)."""

    name: str
    inputs: torch.Tensor
    targets: torch.Tensor
    allowed: torch.Tensor | None = None


def export_data(config: DataConfig, folder: str | Path, train_size: int) -> Path:
    """Write the fixed training set of `train_size` examples (what a run with `data.train_size: train_size` trains
    on), every validation set (`config.val_size` examples each) and every test set (`config.test_size` each),
    exactly the examples such a run is trained and scored on, to the new folder `folder`; returns its manifest.
    An ExportError for a preset a run would refuse or an unusable `folder`; an OSError naming the file for a fault
    of the machine (a full disk: nothing is left behind)."""
    out = _new_folder(folder)
    config, arrays = _arrays(config, train_size)
    made = _make_parents(out.parent)
    try:
        _check_room(out.parent, arrays)
        partial = Path(_guard(out.parent, lambda: tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent)))
        mask = os.umask(0)
        os.umask(mask)
        partial.chmod(0o777 & ~mask)  # mkdtemp's folder is private; OUT is an ordinary folder
    except BaseException:
        _remove(made)
        raise
    try:
        files: dict[str, list[dict[str, Any]]] = {}
        for array in arrays:
            _write_pair(partial, array)
            files.setdefault(array.split, []).append({
                "name": array.name, **{part: f"{array.stem}.{part}.npy" for part in array.parts},
                "examples": array.shape[0]})
        train = training_set(config).tasks[0]
        manifest = {
            "data": asdict(config),
            "vocab_size": train.vocab_size,
            "num_classes": train.num_classes,
            "ignore_index": IGNORE_INDEX,
            "seeds": f"training set: draw c of {FIXED_CHUNK} examples, derive_seed(seed, {FIXED}, c), the first "
                     f"data.train_size rows of the draws in order; validation (test) batch b of set i: "
                     f"derive_seed(seed, {VALIDATION} ({TEST}), i, b), in loglinear.synthetics.seeding",
            "files": files,
        }
        _write_file(partial / MANIFEST, lambda f: f.write((json.dumps(manifest, indent=2) + "\n").encode()))
        _claim(out)
        made.insert(0, out)
        partial.rename(out)  # onto the export's own empty OUT
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        _remove(made)
        raise
    return out / MANIFEST


def _claim(out: Path) -> None:
    """Make OUT, empty, just before the whole folder replaces it: a rename onto an empty folder replaces it
    silently, so one that another made there while the sets were drawn is refused, never replaced."""
    try:
        out.mkdir()
    except FileExistsError:
        raise ExportError(f"OUT {out} exists: export into a new folder (the export makes OUT itself; this one "
                          "was made while the sets were drawn)") from None
    except OSError as e:
        raise _named(e, out) from None


def _remove(made: list[Path]) -> None:
    """Remove the folders the export made (its OUT, then those above it, the deepest first), left empty by a failed
    export."""
    for parent in made:
        with contextlib.suppress(OSError):
            parent.rmdir()


def _new_folder(folder: str | Path) -> Path:
    """`folder` as the export's new folder, or an ExportError: empty (an unset shell variable), existing (the
    export never writes into a folder it did not make), or a new folder at the filesystem root."""
    if not str(folder).strip():
        raise ExportError("OUT is empty (an unset shell variable?): give the new folder to write")
    out = Path(folder)
    if out.exists() or out.is_symlink():
        raise ExportError(f"OUT {out} exists: export into a new folder (the export makes OUT itself)")
    absolute = Path(os.path.abspath(out))
    if absolute.parent == Path(absolute.anchor):
        raise ExportError(f"OUT {out} would be a new folder at the filesystem root (an unset shell variable in "
                          f"$VAR/{out.name}?): give a folder below an existing one")
    return out


def _arrays(config: DataConfig, train_size: int) -> tuple[DataConfig, list[Array]]:
    """The preset as the export records it (`data.train_size` the count written) and every file pair to write,
    checked as a run checks its data: an ExportError naming what a run would refuse."""
    if config.mixture:
        raise ExportError("the export writes a single training task's fixed set, not a mixture's (a set per "
                          "component): export each component as a preset of its own")
    if config.train_size is not None and config.train_size != train_size:
        raise ExportError(f"the preset's train_size {config.train_size} and --train-size {train_size} differ: "
                          "give one of them")
    try:
        config = check_data_config(replace(config, train_size=train_size))
        train = training_set(config)
        validation, test = validation_sets(config), evaluation_sets(config)
        check_same_vocabulary([train, *validation, *test])
    except ExportError:
        raise
    except ValueError as e:
        raise ExportError(str(e).splitlines()[0]) from None
    (task,) = train.tasks
    arrays = [Array("train", "train", "train", (train_size, task.seq_len), fixed_chunks(task, config.seed, train_size),
                    _parts(task))]
    for split, sets, size in (("validation", validation, config.val_size), ("test", test, config.test_size)):
        for index, task_set in enumerate(sets):
            arrays.append(Array(split, task_set.name, f"{split}.{index}", (size, task_set.tasks[0].seq_len),
                                _set_batches(sets, index, size, config, split), _parts(task_set.tasks[0])))
    return config, arrays


def _parts(task: Task) -> tuple[str, ...]:
    """The files of a set of `task`: inputs and targets, and the allowed answers where its batches name them."""
    return (*PARTS, ALLOWED) if task.sample(1, 0).allowed is not None else PARTS


def _set_batches(sets: list[TaskSet], index: int, size: int, config: DataConfig, split: str) -> Iterator[dict]:
    """The batches of set `index` of `sets`, as a run draws them (`FixedBatches`)."""
    fixed = FixedBatches(sets, size, config.batch_size, config.seed, split)
    return (fixed[j] for j, (i, _, _) in enumerate(fixed.index) if i == index)


def _check_room(parent: Path, arrays: list[Array]) -> None:
    """An OSError (a full disk) before anything is written when the files would not fit on OUT's disk."""
    needed = sum(len(a.parts) * (a.shape[0] * a.shape[1] * DTYPE.itemsize + 128) for a in arrays)
    try:
        free = shutil.disk_usage(parent).free
    except OSError:
        return
    if needed > free:
        raise OSError(errno.ENOSPC, f"the export needs {_size(needed)} and the disk of {parent} has {_size(free)} "
                                    "free (nothing written)")


def _make_parents(parent: Path) -> list[Path]:
    """Make `parent` and the folders above it that do not exist; returns those made, the deepest first."""
    missing = [p for p in (parent, *parent.parents) if not p.exists()]
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise _named(e, parent) from None
    return missing


def _write_pair(folder: Path, array: Array) -> None:
    """Write `array`'s files (inputs, targets and, for a task that has them, the allowed answers), a draw at a time."""
    handles: dict[str, BinaryIO] = {}
    try:
        for part in array.parts:
            path = folder / f"{array.stem}.{part}.npy"
            handles[part] = _open(path)
            _guard(path, lambda f=handles[part]: np.lib.format.write_array_header_1_0(
                f, {"descr": DTYPE.str, "fortran_order": False, "shape": array.shape}))
        rows = 0
        for draw in array.draws:
            for part in array.parts:
                values = np.ascontiguousarray(draw[part].numpy(), dtype=DTYPE)
                _guard(folder / f"{array.stem}.{part}.npy", lambda f=handles[part], v=values: f.write(v.tobytes()))
            rows += len(draw["inputs"])
        assert rows == array.shape[0], (array.stem, rows, array.shape)
        for part in array.parts:
            _guard(folder / f"{array.stem}.{part}.npy", handles[part].close)
    finally:
        for handle in handles.values():
            with contextlib.suppress(OSError):
                handle.close()


def _write_file(path: Path, write) -> None:
    f = _open(path)
    try:
        _guard(path, lambda: write(f))
        _guard(path, f.close)
    finally:
        with contextlib.suppress(OSError):
            f.close()


def _open(path: Path) -> BinaryIO:
    try:
        return open(path, "wb")  # noqa: SIM115 - closed by the caller, which names the file on a failed close
    except OSError as e:
        raise _named(e, path) from None


def _guard(path: Path, action) -> Any:
    """`action()`, an OSError from it naming `path` (a full disk: how much room is left)."""
    try:
        return action()
    except OSError as e:
        raise _named(e, path) from None


def _named(error: OSError, path: Path) -> OSError:
    if error.errno == errno.ENOSPC:
        return OSError(errno.ENOSPC, f"disk full writing {path.name} of OUT (nothing is kept: free space, then "
                                     "export again)", str(path))
    return OSError(error.errno, error.strerror, str(path))


def _size(count: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if count < 1024:
            return f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} TB"


def read_exported(folder: str | Path) -> dict[str, list[ExportedSet]]:
    """The sets of an exported folder: split -> [ExportedSet(name, inputs, targets, allowed)], as int64 tensors. An
    ExportError names the file when the folder is not as `export_data` writes it: a manifest that does not read, a
    file named outside the folder, an array that is not (examples, T) int64, parts of different shapes, a count other
    than the manifest's, a token outside the vocabulary, a target neither one nor the ignore index, or an allowed
    bitmask with a bit past the vocabulary."""
    folder = Path(folder)
    manifest = _read_manifest(folder / MANIFEST)
    vocab = manifest["vocab_size"]
    sets: dict[str, list[ExportedSet]] = {}
    for split, entries in manifest["files"].items():
        for index, entry in enumerate(entries):
            where = f"{folder / MANIFEST}: files.{split}[{index}]"
            if not isinstance(entry, dict) or not all(k in entry for k in ("name", *PARTS, "examples")):
                raise ExportError(f"{where} is not a set entry (name, inputs, targets, examples)")
            parts = [part for part in (*PARTS, ALLOWED) if part in entry]
            inputs, targets, *allowed = (_read_array(folder, where, entry[part]) for part in parts)
            for part, array in zip(parts[1:], [targets, *allowed], strict=True):
                if array.shape != inputs.shape:
                    raise ExportError(f"{where}: {entry['inputs']} is {inputs.shape[0]} x {inputs.shape[1]} but "
                                      f"{entry[part]} is {array.shape[0]} x {array.shape[1]}")
            if inputs.shape[0] != entry["examples"]:
                raise ExportError(f"{where}: {entry['inputs']} holds {inputs.shape[0]} examples, the manifest says "
                                  f"{entry['examples']}")
            if inputs.size and not (0 <= inputs.min() and inputs.max() < vocab):
                raise ExportError(f"{where}: {entry['inputs']} holds tokens outside the vocabulary 0..{vocab - 1}")
            scored = targets[targets != IGNORE_INDEX]
            if scored.size and not (0 <= scored.min() and scored.max() < vocab):
                raise ExportError(f"{where}: {entry['targets']} holds targets that are neither {IGNORE_INDEX} nor "
                                  f"a token of the vocabulary 0..{vocab - 1}")
            if allowed and allowed[0].size and (allowed[0].min() < 0 or vocab < 63 and (allowed[0] >> vocab).max()):
                raise ExportError(f"{where}: {entry[ALLOWED]} holds bitmasks with bits outside the vocabulary "
                                  f"0..{vocab - 1}")
            sets.setdefault(split, []).append(ExportedSet(
                str(entry["name"]), *(torch.from_numpy(a) for a in (inputs, targets)),
                torch.from_numpy(allowed[0]) if allowed else None))
    return sets


def _read_manifest(path: Path) -> dict[str, Any]:
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ExportError(f"{path} does not read as an export's manifest: {str(e).splitlines()[0]}") from None
    if not (isinstance(manifest, dict) and isinstance(manifest.get("files"), dict)
            and all(isinstance(v, list) for v in manifest["files"].values())
            and isinstance(manifest.get("vocab_size"), int) and not isinstance(manifest["vocab_size"], bool)):
        raise ExportError(f"{path} is not an export's manifest (files by split, vocab_size)")
    return manifest


def _read_array(folder: Path, where: str, name: Any) -> np.ndarray:
    """The array of the file `name`, which must sit in `folder` itself."""
    path = folder / str(name)
    if not isinstance(name, str) or Path(name).name != name or not path.resolve().parent == folder.resolve():
        raise ExportError(f"{where} names {name!r}, not a file of {folder}")
    try:
        array = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise ExportError(f"{where}: {name} does not read as a .npy array: {str(e).splitlines()[0]}") from None
    if array.ndim != 2 or array.dtype != np.int64:
        raise ExportError(f"{where}: {name} is a {array.ndim}-dimensional {array.dtype} array, not (examples, T) "
                          "int64")
    return array
