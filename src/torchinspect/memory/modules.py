"""Which module is running, for an inference forward: a lighter stand-in for
``torch.distributed._tools.mod_tracker.ModTracker``.

Importing ``ModTracker`` imports ``torch.distributed`` (seconds on a cold start), which a
summary's memory line cannot afford; an inference forward has no backward to follow, so two
global forward hooks are enough. Module names follow ModTracker's (``ResNet.layer1.0``), and
``parents`` holds every module whose forward is running, as ModTracker's does.
"""

from __future__ import annotations

import weakref
from typing import Any

from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook


class ForwardModules:
    """``with ForwardModules() as m:`` ... ``m.parents`` during a forward."""

    def __init__(self) -> None:
        self.parents: set[str] = set()
        self._active: dict[str, int] = {}
        self._names: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
        self._seen: weakref.WeakSet[Any] = weakref.WeakSet()
        self._handles: list[Any] = []

    def _name(self, mod: Any) -> str:
        """ModTracker's rule: a module first seen names its whole subtree under its name."""
        name = self._names.get(mod)
        if name is None:
            name = self._names[mod] = type(mod).__name__
        if mod not in self._seen:
            self._seen.add(mod)
            for child_name, child in mod.named_children():
                self._names[child] = f"{name}.{child_name}"
                self._name(child)
        return name

    def transparent(self, module: Any) -> None:
        """A wrapper that is no module of the model (the generate loop around it): its call
        names nothing, and the model inside it is named by its class, as when called alone."""
        self._names[module] = ""
        self._seen.add(module)

    def _pre(self, mod: Any, _inputs: Any) -> None:
        name = self._name(mod)
        self._active[name] = self._active.get(name, 0) + 1
        self.parents.add(name)

    def _post(self, mod: Any, _inputs: Any, _output: Any) -> None:
        name = self._name(mod)
        left = self._active.get(name, 1) - 1
        if left <= 0:
            self._active.pop(name, None)
            self.parents.discard(name)
        else:
            self._active[name] = left

    def __enter__(self) -> ForwardModules:
        self._handles = [register_module_forward_pre_hook(self._pre),
                         register_module_forward_hook(self._post, always_call=True)]
        return self

    def __exit__(self, *exc: Any) -> None:
        for h in self._handles:
            h.remove()
