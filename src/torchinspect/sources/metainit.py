"""Random initialisation skipped while a model is built on the meta device.

A meta tensor has a shape and no values, so ``nn.init``'s random fills (``normal_``,
``uniform_``, ...) have nothing to fill. They are not free: their meta kernels are Python
decompositions wrapped in ``torch._disable_dynamo``, and the first call imports all of
TorchDynamo (about a second). ``skip_meta_init()`` returns such a fill on a meta tensor
unchanged; every other call, and every fill of a real tensor, runs as usual.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.overrides import TorchFunctionMode

RANDOM_FILLS = frozenset({
    torch.Tensor.normal_, torch.Tensor.uniform_, torch.Tensor.random_,
    torch.Tensor.exponential_, torch.Tensor.geometric_, torch.Tensor.log_normal_,
    torch.Tensor.cauchy_, torch.Tensor.bernoulli_,
})


class skip_meta_init(TorchFunctionMode):  # noqa: N801 - used as a context manager
    """Within it, a random fill of a meta tensor is a no-op returning that tensor."""

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        if func in RANDOM_FILLS and args and isinstance(args[0], torch.Tensor) \
                and args[0].is_meta:
            return args[0]
        return func(*args, **(kwargs or {}))
