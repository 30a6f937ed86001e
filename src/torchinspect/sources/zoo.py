"""The example models of torchinspect.zoo, addressed as zoo:NAME."""

from __future__ import annotations

from typing import Any

from torchinspect.errors import InspectError
from torchinspect.inputs import ExampleInputs, example_from_strings
from torchinspect.sources.base import closest
from torchinspect.zoo import REGISTRY  # torch-free until an entry is built

PREFIX = "zoo:"


def _registry() -> dict[str, Any]:
    return REGISTRY


def names() -> list[str]:
    return sorted(_registry())


def entry(name: str) -> Any:
    reg = _registry()
    if name not in reg:
        near = closest(name, list(reg))
        raise InspectError(
            f"unknown zoo model {PREFIX}{name}",
            hint=(f"did you mean {', '.join(PREFIX + n for n in near)}? " if near else "")
            + f"zoo models: {listing(sorted(reg))} (each in docs/concepts/models.md)",
        )
    return reg[name]


def listing(names: list[str]) -> str:
    """The zoo's names, short: a family of more than three (``pitfall-*``) as one entry."""
    families: dict[str, list[str]] = {}
    for n in names:
        families.setdefault(n.split("-")[0], []).append(n)
    return ", ".join(f"{head}-*" if len(group) > 3 else ", ".join(group)
                     for head, group in families.items())


def example_of(declared: Any) -> ExampleInputs | None:
    """A declared example: grammar strings (full shapes), ExampleInputs, or a callable."""
    if declared is None:
        return None
    if isinstance(declared, ExampleInputs):
        return declared
    if isinstance(declared, (str, list, tuple)):
        return example_from_strings(list(declared) if not isinstance(declared, str) else declared)
    if callable(declared):
        return example_of(declared())
    raise InspectError(f"unsupported example input declaration {declared!r}",
                       hint="declare a string such as '3,224,224' or an ExampleInputs")
