"""Models: the sequence mixers (`MIXERS`), lambda parameterisations (`LAMBDA_PARAMS`) and the language model.

    model = build_model(ModelConfig(mixer="log_linear_mamba2", d_model=64, lambda_param="softplus"))
    logits = model(inputs)                       # (B, T, vocab)
    logits = model(inputs, score_mask)           # (score_mask.sum(), vocab)
    cache = model.init_cache(batch_size)         # token-by-token decoding
    logits_t, cache = model.step(tokens_t, cache)
"""

from loglinear.models.backbone import DecodeCache, LanguageModel, ParamReport, build_model
from loglinear.models.config import ModelConfig
from loglinear.models.lambda_params import LAMBDA_PARAMS, LambdaHead
from loglinear.models.mixer import Mixer
from loglinear.models.mixers import MIXERS
from loglinear.models.optim import no_weight_decay, param_groups

__all__ = [
    "LAMBDA_PARAMS",
    "MIXERS",
    "DecodeCache",
    "LambdaHead",
    "LanguageModel",
    "Mixer",
    "ModelConfig",
    "ParamReport",
    "build_model",
    "no_weight_decay",
    "param_groups",
]
