LOG_LINEAR = ("log_linear_mamba2", "log_linear_gated_deltanet")
BASE_OF = {"log_linear_mamba2": "mamba2", "log_linear_gated_deltanet": "gated_deltanet"}


def rel_err(a, b) -> float:
    """max |a - b| / max |b|."""
    return float((a - b).abs().max() / b.abs().max())


def decode(model, inputs, max_len=None):
    """Logits (B, T, vocab) from stepping `model` through inputs (B, T) one token at a time."""
    import torch

    cache = model.init_cache(inputs.shape[0], max_len)
    logits = []
    for t in range(inputs.shape[1]):
        logits_t, cache = model.step(inputs[:, t], cache)
        logits.append(logits_t)
    return torch.stack(logits, dim=1)
