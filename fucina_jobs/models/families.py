"""The decoder families the fucina engine decodes as transformers does, and a one-line refusal of the rest.

The runner (``hf_runner``) packs every sequence of a step into one row and
attends through its own function, so a model is only as right as what that
function honours of transformers' attention interface. Each family below is
proven in ``tests/models/test_families.py``: a tiny random model of it,
decoded past its sliding window, gives transformers' eager logits and greedy
tokens, and plain, speculative and batched decoding agree token for token. A
family outside the list may need what the runner does not do (attention
sinks, chunked attention, a cache of its own), so it is refused at load, in
one line, rather than decoded wrong in silence.
"""

from __future__ import annotations

from typing import Any

#: ``config.model_type`` of each family in the proof (tests/models/test_families.py).
FAMILIES = ("llama", "qwen2", "qwen3", "mistral", "gemma2", "gemma3_text", "phi3", "olmo2", "granite")
#: The layer types the runner's attention does: all keys, or a sliding window of them.
_LAYER_TYPES = frozenset({"full_attention", "sliding_attention"})


class UnsupportedModel(ValueError):
    """A model the fucina engine would decode differently from transformers: refused before any row."""


def check(config: Any, source: str) -> None:
    """Refuse ``config`` (a transformers config) unless the runner decodes it as transformers does."""
    family = getattr(config, "model_type", None)
    if family not in FAMILIES:
        raise UnsupportedModel(
            f"model.source={source!r} is a {family!r} model, a family the fucina engine is not proven to decode as "
            f"transformers does (it decodes {', '.join(FAMILIES)}); use engine=vllm or a model of those families"
        )
    odd = sorted(set(getattr(config, "layer_types", None) or ()) - _LAYER_TYPES)
    if odd:
        raise UnsupportedModel(
            f"model.source={source!r} ({family}) has layers of type {', '.join(odd)}, which the fucina engine does not "
            f"implement (it does {', '.join(sorted(_LAYER_TYPES))}); use engine=vllm"
        )
