"""TorchDynamo left unimported by commands that never compile.

Meta tensors run many ops through PyTorch's Python references, each wrapped in
``torch._disable_dynamo``; the first call of such a wrapper imports ``torch._dynamo``
(about a second on a laptop CPU, a third of ``inspect bench --predict``) only to mark the
function "do not compile". While nothing is compiling that mark changes nothing, and
nothing can compile while TorchDynamo is not imported.

``deferred_dynamo()`` puts a stand-in ``torch._dynamo`` in place for the duration of a
block, unless the real one is already loaded. Its ``disable(fn)`` returns a callable that
runs ``fn`` directly, or through the real ``torch._dynamo.disable`` once TorchDynamo has been
imported (by anything, later); any other attribute of the stand-in imports the real module
and answers from it, so model code that reaches for TorchDynamo still gets it.
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

DYNAMO = "torch._dynamo"


class _StandIn(types.ModuleType):
    """``torch._dynamo`` until something needs more than ``disable``."""

    def __getattr__(self, attr: str) -> Any:
        # ``__path__``: ``import torch._dynamo.utils`` asks the parent for it; answering from
        # the real package makes the stand-in step aside and the import go on as usual
        if attr.startswith("__") and attr != "__path__":
            raise AttributeError(attr)
        return getattr(_real(), attr)


class _Deferred:
    """``torch._dynamo.disable(fn, ...)`` decided at call time, not at first call."""

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...],
                 kwargs: dict[str, Any]) -> None:
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        self.disabled: Callable[..., Any] | None = None
        self.__wrapped__ = fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.disabled is None:
            loaded = sys.modules.get(DYNAMO)
            if loaded is None or isinstance(loaded, _StandIn):
                return self.fn(*args, **kwargs)
            self.disabled = loaded.disable(self.fn, *self.args, **self.kwargs)
        return self.disabled(*args, **kwargs)


def _disable(fn: Callable[..., Any] | None = None, *args: Any, **kwargs: Any) -> Any:
    if fn is None:  # used as a decorator factory: disable(recursive=False)(fn)
        return lambda f: _Deferred(f, args, kwargs)
    return _Deferred(fn, args, kwargs)


def _real() -> types.ModuleType:
    """The real ``torch._dynamo``, the stand-in taken out of the way first."""
    torch = sys.modules.get("torch")
    if isinstance(sys.modules.get(DYNAMO), _StandIn):
        del sys.modules[DYNAMO]
    if torch is not None and isinstance(vars(torch).get("_dynamo"), _StandIn):
        delattr(torch, "_dynamo")
    return importlib.import_module(DYNAMO)


@contextmanager
def deferred_dynamo() -> Iterator[None]:
    """Within it, ``torch._disable_dynamo`` wrappers do not import TorchDynamo."""
    if DYNAMO in sys.modules:
        yield
        return
    stand_in = _StandIn(DYNAMO)
    stand_in.disable = _disable  # type: ignore[attr-defined]
    sys.modules[DYNAMO] = stand_in
    try:
        yield
    finally:
        if sys.modules.get(DYNAMO) is stand_in:
            del sys.modules[DYNAMO]
        torch = sys.modules.get("torch")
        if torch is not None and vars(torch).get("_dynamo") is stand_in:
            delattr(torch, "_dynamo")
