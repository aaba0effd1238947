"""The stacked embedding reads a pair token as its key's row plus its value's, zoology's stacked MQAR input; a run
follows its task's embedding, and another is refused."""

from __future__ import annotations

import pytest
import torch

from loglinear.models import build_model
from loglinear.models.embeddings import StackedEmbedding
from loglinear.runs.config import ConfigError, load_run_config


def test_a_pair_token_is_the_sum_of_its_key_and_value_rows():
    embedding = StackedEmbedding(2 * 4 + 16, 3)  # K = 4: keys 0..3, values 4..7, pairs 8..23
    table = embedding.weight
    tokens = torch.tensor([[0, 3, 5, 8 + 4 * 2 + 1, 23]])
    out = embedding(tokens)
    assert torch.equal(out[0, :3], table[[0, 3, 5]])
    assert torch.allclose(out[0, 3], table[2] + table[4 + 1]) and torch.allclose(out[0, 4], table[3] + table[7])
    out.sum().backward()
    assert embedding.weight.grad[8:].abs().sum() == 0  # a pair's own row is read by the LM head only


def test_a_vocabulary_that_is_not_keys_values_and_pairs_is_refused():
    with pytest.raises(ValueError, match="a stacked embedding needs 2K \\+ K\\^2 tokens .* got vocab_size 25"):
        StackedEmbedding(25, 3)


def test_a_stacked_mqar_run_reads_its_tokens_stacked_and_decodes_as_it_runs(tmp_path):
    data = ["data=data/stacked_mqar.yaml", "data.task_args.num_keys=4", "data.task_args.num_kv_pairs=3",
            "data.eval_sets=[{}]", f"out_dir={tmp_path}", "model.d_model=8", "model.mixer=gated_deltanet"]
    cfg = load_run_config(None, data)
    assert cfg.model.input_embedding == "stacked" and cfg.model.vocab_size == 24
    model = build_model(cfg.model, seed=0)
    assert type(model.embedding) is StackedEmbedding
    tokens = torch.tensor([[8, 13, 22, 1, 0, 3]])
    logits = model(tokens)
    cache, stepped = model.init_cache(1, 6), []
    for t in range(6):
        step, cache = model.step(tokens[:, t], cache)
        stepped.append(step)
    assert torch.allclose(torch.stack(stepped, 1), logits, atol=1e-5)
    with pytest.raises(ConfigError, match="model.input_embedding=lookup: task stacked_mqar reads its tokens through "
                                          "the 'stacked' embedding; leave model.input_embedding out"):
        load_run_config(None, [*data, "model.input_embedding=lookup"])
