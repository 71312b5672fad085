"""Tiny random models of each decoder family the fucina engine decodes, built locally (no download).

Each is small enough for CI (2 layers, hidden 64) and shaped so that what the family adds to Llama is in
play: a sliding window of ``WINDOW`` keys on sliding layers (the first layer slides, the second attends to
all, as Gemma 3 and Qwen2's ``max_window_layers`` interleave them), Gemma 2's logit soft-capping, Gemma's
query scaling and head dim 256, Granite's multipliers, the q/k norms of Qwen3 and OLMo 2.
"""

from __future__ import annotations

import torch
import transformers

#: Keys a sliding layer sees: small, so that a few dozen tokens decode far past it.
WINDOW = 8
_SLIDING = ["sliding_attention", "full_attention"]
_COMMON = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128, max_position_embeddings=1024)

#: family (``config.model_type``) -> (config class, what it adds to the common shape)
FAMILIES: dict[str, tuple[str, dict]] = {
    "llama": ("LlamaConfig", {}),
    "qwen2": ("Qwen2Config", dict(use_sliding_window=True, sliding_window=WINDOW, layer_types=_SLIDING)),
    "qwen3": ("Qwen3Config", dict(head_dim=16, use_sliding_window=True, sliding_window=WINDOW, layer_types=_SLIDING)),
    "mistral": ("MistralConfig", dict(sliding_window=WINDOW)),
    "gemma2": (
        "Gemma2Config",
        dict(
            head_dim=16,
            sliding_window=WINDOW,
            layer_types=_SLIDING,
            attn_logit_softcapping=5.0,
            final_logit_softcapping=3.0,
            query_pre_attn_scalar=24,
        ),
    ),
    "gemma3_text": ("Gemma3TextConfig", dict(head_dim=256, sliding_window=WINDOW, layer_types=_SLIDING, query_pre_attn_scalar=24)),
    "phi3": ("Phi3Config", dict(sliding_window=WINDOW)),
    "olmo2": ("Olmo2Config", {}),
    "granite": ("GraniteConfig", dict(attention_multiplier=0.3, embedding_multiplier=2.0, residual_multiplier=0.5, logits_scaling=2.0)),
}


def tiny_family(family: str, vocab_size: int, *, seed: int = 0, dtype: torch.dtype = torch.float64, **overrides) -> torch.nn.Module:
    """A random-weight model of ``family`` over ``vocab_size`` ids, with transformers' eager attention."""
    config_class, extra = FAMILIES[family]
    config = getattr(transformers, config_class)(
        vocab_size=vocab_size, bos_token_id=1, eos_token_id=2, pad_token_id=2, tie_word_embeddings=True, **_COMMON, **extra, **overrides
    )
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    with torch.no_grad():  # sharper logits than random init's near-uniform ones, so greedy picks are not near-ties
        for name, p in model.named_parameters():
            if "norm" in name and p.dim() == 1:
                p.normal_(1.0, 0.5)
    return model.to(dtype).eval()
