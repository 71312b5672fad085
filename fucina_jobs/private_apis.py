"""The private APIs of our dependencies that we call, each because no public API does its job.

Nothing else in the package calls a private name of Ray or torch: when an
upgrade renames one, this module is the one place to fix, and its tests
(``tests/models/test_hf_runner.py``, ``tests/reliability/test_probes.py``) fail first.
Each library is imported inside its functions, so a layer that may not import
Ray (``models/``) can still use the torch half.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

#: oneDNN's linear ops: torch's public ``F.linear`` reorders the weight on every call; only these take it packed once.
_ONEDNN_OPS = ("_linear_pointwise", "_reorder_linear_weight")


def onednn_linear_available() -> bool:
    """This torch has oneDNN built in, with the linear ops over a weight packed once."""
    import torch

    return torch.backends.mkldnn.is_available() and all(hasattr(torch.ops.mkldnn, op) for op in _ONEDNN_OPS)


def onednn_bf16_supported() -> bool:
    """This CPU has the instructions oneDNN's bfloat16 path needs; torch says so publicly for no op but this one."""
    import torch

    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def onednn_pack(weight: torch.Tensor, rows: int) -> torch.Tensor:
    """``weight`` reordered into oneDNN's blocked layout for a batch of about ``rows`` rows."""
    import torch

    return torch.ops.mkldnn._reorder_linear_weight(weight, rows)


def onednn_linear(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``x @ W.T + bias`` over the weight ``onednn_pack`` packed."""
    import torch

    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


def ray_bootstrap_address(address: str) -> str:
    """The ``host:port`` that ``ray.init(address)`` would connect to (``auto``: ``RAY_ADDRESS``, then the last
    ``ray start`` on this machine), without connecting: Ray resolves addresses publicly only inside ``ray.init``,
    which retries an address where nothing answers for minutes. Raises ``ConnectionError`` or ``ValueError``."""
    from ray._private.services import canonicalize_bootstrap_address_or_die

    ray_log = logging.getLogger("ray._private.services")
    level = ray_log.level
    ray_log.setLevel(logging.ERROR)  # not its "found multiple Ray instances" warning: the caller's error names the address
    try:
        return canonicalize_bootstrap_address_or_die(address)
    finally:
        ray_log.setLevel(level)
