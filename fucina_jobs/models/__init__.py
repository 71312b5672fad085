"""Model loading, the embedded models' cache, and the transformers runner with its kernels' Python side.

The package itself holds only the embedded models' names (no torch is imported), so that
``config.py``'s ``model.source`` default is this name rather than a copy of it.
"""

#: The ``model.source`` that names the embedded default model (``loading.resolve_source``).
DEFAULT_MODEL = "default"
#: The embedded default model, and the name of its converted copy in the cache.
DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
#: ``model.source`` names of the models that ship as GGUF files inside PyPI wheels (``loading.EMBEDDED``).
EMBEDDED_NAMES = (DEFAULT_MODEL, "gemma3-270m")
