"""Model loading, the default model's cache, and the transformers runner with its kernels' Python side.

The package itself holds only the embedded default model's names (no torch is imported), so that
``config.py``'s ``model.source`` default is this name rather than a copy of it.
"""

#: The ``model.source`` that names the embedded default model (``loading.resolve_source``).
DEFAULT_MODEL = "default"
#: The embedded default model, and the name of its converted copy in the cache.
DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
