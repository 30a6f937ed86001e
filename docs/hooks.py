"""The documentation's generated blocks, written into the Markdown files themselves, so a
page reads the same in the repository, in an editor and on the built site.

A block is a marker line, the generated text, and an end line:

    <!-- inspect-options summary -->
    (the option table of `inspect summary`, from the Typer app: cli/reference.py)
    <!-- end inspect-options -->

Kinds (``BLOCKS``): ``inspect-options NAME`` (every command page), ``doctor-checks`` (the
doctor's check registry: docs/commands/doctor.md), ``mac-formulas`` (the MAC formula
registry: docs/concepts/counting.md), ``api-reference`` (the mkdocstrings entries of every
public name: docs/api.md) and ``workflow PATH`` (a workflow file shown whole:
docs/commands/check.md). A marker line without its end gets one on the next rewrite.

* ``python docs/hooks.py`` rewrites every stale block; ``--check`` lists them (exit 1).
* ``tests/test_docs.py`` fails on a stale block; ``pytest tests/test_docs.py
  --update-golden`` rewrites them with the recorded outputs (review the diff).
* As the MkDocs hook it fills nothing: it fails the build on a stale block.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _options(name: str) -> str:
    from torchinspect.cli.reference import command_reference

    return command_reference(name)


def _doctor_checks(_: str) -> str:
    from torchinspect.report.doctor import checks_reference

    return checks_reference()


def _workflow(path: str) -> str:
    text = (ROOT / path).read_text()
    return f"```yaml\n{text.rstrip()}\n```"


BLOCKS: dict[str, Callable[[str], str]] = {
    "inspect-options": _options,
    "doctor-checks": _doctor_checks,
    "mac-formulas": lambda _: mac_formula_table(),
    "api-reference": lambda _: api_reference(),
    "workflow": _workflow,
}
_BEGIN = re.compile(r"^<!-- (?P<kind>[a-z-]+)(?: (?P<arg>[^\s]+))? -->$")


def refreshed(text: str) -> str:
    """``text`` (a page) with every generated block made anew."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        m = _BEGIN.match(lines[i])
        if m is None or m["kind"] not in BLOCKS:
            out.append(lines[i])
            i += 1
            continue
        end = f"<!-- end {m['kind']} -->"
        close = next((j for j in range(i + 1, len(lines)) if lines[j] == end
                      or _BEGIN.match(lines[j])), None)
        body = BLOCKS[m["kind"]](m["arg"] or "").strip("\n")
        out += [lines[i], "", body, "", end]
        i = close + 1 if close is not None and lines[close] == end else i + 1
    return "\n".join(out)


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def stale() -> list[Path]:
    """The pages whose generated blocks differ from what they would be now."""
    return [p for p in pages() if refreshed(p.read_text()) != p.read_text()]


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """MkDocs: the blocks are in the page already; a stale one fails the build."""
    if refreshed(markdown) != markdown:
        from mkdocs.exceptions import PluginError

        raise PluginError(f"{page.file.src_uri}: a generated block is stale; run "
                          "`python docs/hooks.py` (or pytest tests/test_docs.py --update-golden)")
    return markdown


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
    """``:::`` blocks for every public name of ``torchinspect.PUBLIC_NAMES`` and the dataclass each
    function returns, at their defining modules (so a moved function can't break the page,
    and a new one can't be left out)."""
    import typing

    import torchinspect

    lines: list[str] = []
    seen: set[str] = set()
    for name in torchinspect.PUBLIC_NAMES:
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
            path = _doc_path(target, name, torchinspect.PUBLIC_NAMES[name])
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


def main(argv: list[str]) -> int:
    """``python docs/hooks.py``: rewrite the stale blocks; ``--check``: list them (exit 1)."""
    old = stale()
    for page in old:
        print(f"{'stale' if '--check' in argv else 'rewrote'} {page.relative_to(ROOT)}")
        if "--check" not in argv:
            page.write_text(refreshed(page.read_text()))
    return 1 if old and "--check" in argv else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "src"))
    raise SystemExit(main(sys.argv[1:]))
