from loglinear.models import MIXERS

LOG_LINEAR = tuple(name for name, mixer in MIXERS.items() if mixer.log_linear)
BASE_OF = {name: MIXERS[name].base for name in LOG_LINEAR}
LINEAR = tuple(name for name in MIXERS if name != "attention")
"""The mixers that call the log-linear operator (every one but softmax attention)."""


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
