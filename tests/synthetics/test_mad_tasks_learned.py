"""A small attention model learns each of MAD's tasks at an easy setting: the tasks are learnable as encoded.

Copying, compression (through the decoder head the task selects) and memorisation are solved (> 90%) within
seconds. Recall needs an induction circuit, which takes this
model thousands of steps; in the few hundred a unit test affords it must at least double chance accuracy
(a task whose answers were not in the sequence would stay at chance)."""

from __future__ import annotations

import pytest
import torch

from loglinear.models import ModelConfig, build_model
from loglinear.synthetics import IGNORE_INDEX, get_task

EASY = {  # name: (arguments, training steps, whether the test asks for > 90% or for twice chance)
    "in_context_recall": ({"vocab_size": 10, "seq_len": 16}, 250, False),
    "noisy_in_context_recall": ({"vocab_size": 14, "seq_len": 16, "noise_vocab_size": 4}, 250, False),
    "fuzzy_in_context_recall": ({"vocab_size": 9, "seq_len": 16, "k_motif_size": 1, "v_motif_size": 2}, 250, False),
    "selective_copying": ({"vocab_size": 6, "seq_len": 12, "num_tokens_to_copy": 2}, 300, True),
    "compression": ({"vocab_size": 6, "seq_len": 5}, 400, True),
    "memorization": ({"vocab_size": 17, "seq_len": 8}, 150, True),
}


def accuracy_after_training(name: str, arguments: dict, steps: int) -> tuple[float, float]:
    """Test accuracy of a small attention model trained for `steps`, and the task's chance accuracy."""
    task = get_task(name, **arguments)
    model = build_model(ModelConfig(mixer="attention", d_model=64, n_layers=2, vocab_size=task.vocab_size,
                                    max_len=task.seq_len, attention_heads=2, output_head=task.output_head), seed=0)
    optimiser = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for step in range(steps):
        batch = task.sample(32, step)
        mask = batch.targets != IGNORE_INDEX
        loss = torch.nn.functional.cross_entropy(model(batch.inputs, mask), batch.targets[mask])
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    test = task.sample(512, 10**9)
    mask = test.targets != IGNORE_INDEX
    with torch.no_grad():
        accuracy = (model(test.inputs, mask).argmax(dim=1) == test.targets[mask]).float().mean().item()
    return accuracy, 1 / task.num_classes


@pytest.mark.parametrize("name", sorted(EASY))
def test_a_small_attention_model_learns_the_easy_setting(name):
    arguments, steps, solved = EASY[name]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        accuracy, chance = accuracy_after_training(name, arguments, steps)
    finally:
        torch.set_num_threads(threads)
    assert accuracy > (0.9 if solved else 2 * chance)
