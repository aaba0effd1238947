"""The task interface: `task.sample(batch_size, seed) -> Batch`, deterministic and isolated."""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import torch
from torch import Tensor

from loglinear.synthetics.arguments import check_int
from loglinear.synthetics.batch import Batch
from loglinear.synthetics.seeding import make_generator


class Task(ABC):
    """A synthetic sequence task.

    Subclasses set, in `__init__` (after checking their arguments):
    `seq_len` (T of every batch), `vocab_size` (embedding and output size: it covers every input
    token and every target class) and `num_classes` (how many distinct targets exist; chance
    accuracy is 1 / num_classes). `sample` is a pure function of (arguments, batch_size, seed): it
    uses a local `torch.Generator` and never reads or advances the global RNGs.

    `unscored` is the probability that an example has no scored position (only noise can leave one without).
    `output_head` names the model's output head the task needs (`OUTPUT_HEADS`, models/heads.py): "lm",
    each position's logits from its own state (every task but one), or "decoder", every position's
    logits from the last position's state (compression); a run's model follows it. `input_embedding`
    names how the model reads the tokens (`INPUT_EMBEDDINGS`, models/embeddings.py): "lookup", a row per
    token (every task but one), or "stacked", a pair token as its key's row plus its value's (stacked MQAR).
    """

    name: ClassVar[str]
    output_head: ClassVar[str] = "lm"
    input_embedding: ClassVar[str] = "lookup"
    seq_len: int
    vocab_size: int
    num_classes: int

    @property
    def unscored(self) -> float:
        """The probability that an example has no scored position (0 for a task whose every example has one)."""
        return 0.0

    def sample(self, batch_size: int, seed: int) -> Batch:
        """A batch of `batch_size` examples; the same (arguments, batch_size, seed) give the same batch."""
        check_int("batch_size", batch_size, minimum=1)
        check_int("seed", seed)
        return self._sample(batch_size, make_generator(seed))

    @abstractmethod
    def _sample(self, batch_size: int, generator: torch.Generator) -> Batch:
        """Draw a batch using only `generator`."""

    def _batch(self, inputs: Tensor, targets: Tensor, **slices: Tensor) -> Batch:
        """Wrap a batch, adding the `seq_len` slice every task carries."""
        seq_len = torch.full((inputs.shape[0],), self.seq_len, dtype=torch.int64)
        return Batch(inputs, targets, {"seq_len": seq_len, **slices})

    @property
    def arguments(self) -> dict[str, Any]:
        """The constructor arguments (each task stores them under their own names)."""
        names = [n for n in inspect.signature(type(self).__init__).parameters if n != "self"]
        return {n: getattr(self, n) for n in names}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.arguments.items())})"
