"""MkDocs hook: the option tables of every command page come from the Typer app itself.

A page writes ``<!-- inspect-options NAME -->`` where the reference of ``inspect NAME``
belongs; the hook replaces the marker with ``torchinspect.cli.reference.command_reference``
(usage, arguments, options with their help and defaults), so the pages cannot drift from
``inspect NAME --help``. An unknown NAME fails the build.

``<!-- mac-formulas -->`` (docs/concepts/counting.md) becomes the table of every op with a MAC
formula, read from the registry (``torchinspect.mac_formulas()``), so the page names exactly
what is counted.

``<!-- api-reference -->`` (docs/api.md) becomes the mkdocstrings reference of every public
name in ``torchinspect._LAZY`` and of the dataclasses the functions return.
"""

from __future__ import annotations

import re
from typing import Any

_MARKER = re.compile(r"<!--\s*inspect-options\s+([a-z-]+)\s*-->")


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if "api-reference" in markdown:
        markdown = _API.sub(lambda m: api_reference(), markdown)
    if "mac-formulas" in markdown:
        markdown = _FORMULAS.sub(lambda m: mac_formula_table(), markdown)
    if "inspect-options" not in markdown:
        return markdown
    from torchinspect.cli.reference import command_reference

    return _MARKER.sub(lambda m: command_reference(m.group(1)), markdown)


_API = re.compile(r"<!--\s*api-reference\s*-->")
_FORMULAS = re.compile(r"<!--\s*mac-formulas\s*-->")


def mac_formula_table() -> str:
    """One row per family of counted work: the ops whose formula is ours (or a user's) and
    those counted with ``torch.utils.flop_counter``'s formula (FLOPs halved), as installed."""
    from torchinspect.trace.formulas import TORCH, counted_families, mac_formulas

    table = mac_formulas()
    lines = ["| Counted work | Formula here (`trace/formulas.py`) | Formula from "
             "`torch.utils.flop_counter` |", "|---|---|---|"]
    families = counted_families() + sorted({e.family for e in table.values()}
                                           - set(counted_families()))
    for family in families:
        entries = sorted((e for e in table.values() if e.family == family), key=lambda e: e.op)
        ours = ", ".join(f"`{e.op}`" for e in entries if e.source != TORCH) or "--"
        torch_ops = ", ".join(f"`{e.op}`" for e in entries if e.source == TORCH) or "--"
        lines.append(f"| {family} | {ours} | {torch_ops} |")
    return "\n".join(lines)


def api_reference() -> str:
    """``:::`` blocks for every public name of ``torchinspect._LAZY`` and the dataclass each
    function returns, at their defining modules (so a moved function can't break the page,
    and a new one can't be left out)."""
    import typing

    import torchinspect

    lines: list[str] = []
    seen: set[str] = set()
    for name in torchinspect._LAZY:
        obj = getattr(torchinspect, name)
        targets = [obj]
        if not isinstance(obj, type):
            try:
                returned = typing.get_type_hints(obj).get("return")
            except Exception:  # noqa: BLE001 - an unresolvable annotation: document the function alone
                returned = None
            targets += [t for t in (typing.get_args(returned) or (returned,))
                        if isinstance(t, type) and t.__module__.startswith("torchinspect.")]
        for target in targets:
            path = _doc_path(target, name, torchinspect._LAZY[name])
            if path in seen:
                continue
            seen.add(path)
            options = ["heading_level: 3", "show_root_full_path: false"]
            if isinstance(target, type):
                options += ["show_if_no_docstring: true", "show_bases: false",
                            'filters: ["!^_"]']
            lines += [f"::: {path}", "    options:", *(f"      {o}" for o in options), ""]
    return "\n".join(lines)


def _doc_path(target: object, name: str, module: str) -> str:
    """Where mkdocstrings finds ``target``: its defining module, or, for a value without one
    (a type alias such as ``ModelLike``, a string at run time), the module that binds it."""
    defined, qualname = getattr(target, "__module__", None), getattr(target, "__qualname__", None)
    if isinstance(defined, str) and isinstance(qualname, str):
        return f"{defined}.{qualname}"
    return f"{module}.{name}"
