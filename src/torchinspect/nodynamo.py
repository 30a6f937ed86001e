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

import contextlib
import functools
import importlib
import sys
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

DYNAMO = "torch._dynamo"


class _StandIn(types.ModuleType):
    """A module in ``sys.modules`` until something needs more than what it was given: any
    other name imports the real module (the stand-in steps aside first)."""

    def __getattr__(self, attr: str) -> Any:
        if attr == "__path__" and sys._getframe(1).f_code.co_name == "_find_and_load_unlocked":
            # the import system asks for a submodule (``import torch._dynamo.utils``): the
            # real package steps in; ``from M import x`` also asks for ``__path__`` (through
            # _handle_fromlist), and is answered "not a package", as for any other dunder
            return _real(self.__name__).__path__
        if attr.startswith("__"):
            raise AttributeError(attr)
        return getattr(_real(self.__name__), attr)


class _Deferred:
    """``torch._dynamo.disable(fn, ...)`` decided at call time, not at first call.

    It stands for a function (``torch.compiler.disable`` on a method of the model's code): it
    binds as one (``__get__``: ``self`` is passed), carries ``fn``'s name, docstring and
    ``__wrapped__``, and works after the block as before it: it runs ``fn`` directly while
    TorchDynamo is not imported, and through the real ``torch._dynamo.disable`` once it is
    (``torch.compile`` then skips it as it would have)."""

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...],
                 kwargs: dict[str, Any]) -> None:
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        self.disabled: Callable[..., Any] | None = None
        functools.update_wrapper(self, fn)  # __name__, __qualname__, __doc__, __wrapped__ ...

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.disabled is None:
            loaded = sys.modules.get(DYNAMO)
            if loaded is None or isinstance(loaded, _StandIn):
                return self.fn(*args, **kwargs)
            self.disabled = loaded.disable(self.fn, *self.args, **self.kwargs)
        return self.disabled(*args, **kwargs)

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        """A method: bound to ``obj`` as a plain function would be."""
        return self if obj is None else types.MethodType(self, obj)

    def __repr__(self) -> str:
        return f"<deferred torch._dynamo.disable of {self.fn!r}>"


class _Handed:
    """The ``_Deferred`` objects a block handed out to torch's own ``_disable_dynamo``
    wrappers, which cache them on the wrapped function (``fn.__dynamo_disable``): taken off
    again when the block ends, so nothing of the stand-in outlives it in torch."""

    def __init__(self) -> None:
        self.cached: list[tuple[Callable[..., Any], _Deferred]] = []

    def disable(self, fn: Callable[..., Any] | None = None, *args: Any, **kwargs: Any) -> Any:
        if fn is None:  # used as a decorator factory: disable(recursive=False)(fn)
            return lambda f: self.disable(f, *args, **kwargs)
        deferred = _Deferred(fn, args, kwargs)
        if kwargs.get("wrapping") is False:  # torch._disable_dynamo's call: it caches it
            self.cached.append((fn, deferred))
        return deferred

    def clean(self) -> None:
        for fn, deferred in self.cached:
            if getattr(fn, "__dynamo_disable", None) is deferred:
                with contextlib.suppress(AttributeError, TypeError):
                    delattr(fn, "__dynamo_disable")
        self.cached.clear()


def _step_aside(name: str, stand_in: types.ModuleType | None = None) -> None:
    """Take ``stand_in`` (or any stand-in) for ``name`` out of ``sys.modules`` and its parent."""
    def ours(value: Any) -> bool:
        return value is stand_in if stand_in is not None else isinstance(value, _StandIn)

    if ours(sys.modules.get(name)):
        del sys.modules[name]
    parent, _, child = name.rpartition(".")
    owner = sys.modules.get(parent)
    if owner is not None and ours(vars(owner).get(child)):
        delattr(owner, child)


def _real(name: str) -> types.ModuleType:
    """The real module ``name``, its stand-in taken out of the way first."""
    _step_aside(name)
    return importlib.import_module(name)


def call_later(name: str, function: str) -> Callable[..., Any]:
    """``function`` of module ``name``, which is imported when it is first called."""
    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(_real(name), function)(*args, **kwargs)

    return call


@contextmanager
def standing_in(name: str, **attrs: Any) -> Iterator[None]:
    """Within it, module ``name`` (unless already loaded) is a stand-in holding ``attrs``."""
    if name in sys.modules:
        yield
        return
    stand_in = _StandIn(name)
    for attr, value in attrs.items():
        setattr(stand_in, attr, value)
    sys.modules[name] = stand_in
    try:
        yield
    finally:
        _step_aside(name, stand_in)


@contextmanager
def deferred_dynamo() -> Iterator[None]:
    """Within it, ``torch._disable_dynamo`` wrappers do not import TorchDynamo; after it, the
    wrappers of torch it served hold nothing of it (what the model's own code decorated in
    the block keeps a :class:`_Deferred`, which behaves as the real decorator's result)."""
    handed = _Handed()
    try:
        with standing_in(DYNAMO, disable=handed.disable):
            yield
    finally:
        handed.clean()
