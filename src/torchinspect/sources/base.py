"""What every model source returns, and helpers shared by the sources."""

from __future__ import annotations

import ast
import difflib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from torchinspect.arguments import as_list
from torchinspect.errors import InspectError, first_line
from torchinspect.inputs import ExampleInputs


class SourceKind(StrEnum):
    torchvision = "torchvision"
    zoo = "zoo"
    python = "python"
    pickle = "pickle"  # a full pickled nn.Module (only with --trust-pickle)
    torchscript = "torchscript"
    export = "export"  # torch.export .pt2 program
    timm = "timm"
    hf = "hf"  # a Hugging Face transformers config (folder or hf:ARCH)


@dataclass
class LoadedModel:
    """A resolved model, ready for a trace.

    ``device`` is where its tensors live ("meta" when it was built without memory);
    ``rebuild(device)`` returns a fresh, equivalent model on a real device (same weights
    when weights were loaded), used when a meta forward is impossible.
    """

    model: Any
    name: str
    kind: SourceKind
    example: ExampleInputs | None
    device: str = "cpu"
    notes: list[str] = field(default_factory=list)
    rebuild: Callable[[str], Any] | None = None
    weights_key: str | None = None  # container key the weights came from


_BARE_WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")


def parse_kwargs(pairs: Sequence[str] | dict[str, Any] | None) -> dict[str, Any]:
    """``["num_classes=10", "dropout=0.1"]`` -> ``{"num_classes": 10, "dropout": 0.1}``.

    Values are Python literals; a bare word that is not a literal is taken as a string
    (``--arg variant=small``).
    """
    if pairs is None:
        return {}
    if isinstance(pairs, dict):
        return dict(pairs)
    out: dict[str, Any] = {}
    for pair in as_list(pairs):  # one "k=v" text is one pair
        key, sep, raw = pair.partition("=")
        key = key.strip()
        if not sep or not key.isidentifier():
            raise InspectError(f"--arg {pair!r} is not KEY=VALUE",
                               hint="e.g. --arg num_classes=10 --arg dropout=0.2 --arg name='x'")
        raw = raw.strip()
        try:
            value = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            if _BARE_WORD.match(raw):
                value = {"true": True, "false": False, "none": None}.get(raw.lower(), raw)
            else:
                raise InspectError(
                    f"--arg {pair!r}: {raw!r} is not a Python literal",
                    hint="values are Python literals: 10, 0.5, True, None, 'text', (3, 3), [1, 2]",
                ) from None
        if key in out:
            raise InspectError(f"--arg {key} given twice", hint="give each keyword once")
        out[key] = value
    return out


def closest(name: str, candidates: Sequence[str], n: int = 3) -> list[str]:
    """Up to ``n`` candidates a typo of ``name`` could have meant (``resnt18`` -> resnet18,
    ``Bert`` -> bert), that start with it (``Bert`` -> BertModel), or whose words its words
    begin (``num_layer`` -> num_hidden_layers); none for a name like no candidate (``notamodel``
    suggests nothing rather than three unrelated names)."""
    by_lower: dict[str, str] = {}
    for c in candidates:
        by_lower.setdefault(c.lower(), c)
    low = name.lower()
    found = [by_lower[c] for c in difflib.get_close_matches(low, list(by_lower), n=n, cutoff=0.75)]
    if len(found) < n and len(low) >= 3:
        found += [c for c in candidates if c.lower().startswith(low) and c not in found]
    parts = [p for p in re.split(r"[_\-.]", low) if p]
    if len(found) < n and len(parts) > 1:  # num_layer -> num_hidden_layers
        found += [c for c in candidates if c not in found and all(
            any(q.startswith(p) for q in re.split(r"[_\-.]", c.lower())) for p in parts)]
    return found[:n]


class BuilderError(InspectError):
    """A builder given --arg values failed: most likely because of those values.

    On the meta device the failure may be meta's instead, so callers retry on CPU first.
    """


def call_builder(builder: Callable[..., Any], kwargs: dict[str, Any], what: str,
                 user_keys: tuple[str, ...] | None = None) -> Any:
    """Call a builder; with --arg values (``user_keys``, default all), its failure is
    reported as a user error naming them."""
    given = {k: v for k, v in kwargs.items() if user_keys is None or k in user_keys}
    try:
        return builder(**kwargs)
    except InspectError:
        raise
    except Exception as exc:
        if not given and isinstance(exc, TypeError) and "required" in str(exc):
            raise BuilderError(f"{what} needs arguments: {first_line(exc)}",
                               hint="pass them with --arg NAME=VALUE (repeat for each)") from None
        if not given:
            raise  # the builder's own bug (exit 70), not something the user passed
        text = first_line(exc)
        given_text = " ".join(f"{k}={v!r}" for k, v in given.items())
        raise BuilderError(f"{what} failed with --arg {given_text}: {text}",
                           hint="check the --arg names and values against the builder's signature") from None
