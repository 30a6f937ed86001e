"""What every RESULTS page's renderer shares: the machine line, a spread, a yes/no cell, and
the generated blocks inside a page that is partly written by hand.

A leaf of benchmarks/: ``report.py`` (the registry of pages and blocks) and the page modules
(``pages_bench.py``, ``pages_features.py``, ...) import it, it imports none of them.
"""

from __future__ import annotations

import statistics
from typing import Any


def machine_line(record: dict[str, Any]) -> str:
    m = record["machine"]
    gpus = ", ".join(m["gpus"]) or "no GPU"
    load_text = ""
    if m.get("load_average") is not None:
        load_text = (f"; load average {m['load_average']} on {m['cores']} cores at the start"
                     + (" (a busy shared machine: wall times are upper bounds, the CPU times "
                        "are the steadier figure)" if m.get("loaded") else ""))
    memory = f", {m['memory_gb']} GB" if m.get("memory_gb") else ""
    return (f"Machine: {m['cpu']}, {m['cores']} cores{memory}, {gpus}; torch {m['torch']}, "
            f"Python {m['python']}{load_text}. Measured {record['date']} with "
            f"`python benchmarks/{record['command']}`.")


def spread(values: list[float], unit: str = " s") -> str:
    return (f"{statistics.median(values):.2f}{unit} (min {min(values):.2f}, max "
            f"{max(values):.2f}, {len(values)} runs)")


def bar(ok: bool) -> str:
    return "yes" if ok else "**no**"


def block_markers(tag: str) -> tuple[str, str]:
    return f"<!-- {tag}:begin -->", f"<!-- {tag}:end -->"


def with_block(page: str, tag: str, text: str, *, where: str = "page") -> str:
    """``page`` with the text between ``<!-- TAG:begin -->`` and ``<!-- TAG:end -->``
    replaced by ``text``; SystemExit naming ``where`` when the page has no such block."""
    begin, end = block_markers(tag)
    if begin not in page or end not in page:
        raise SystemExit(f"{where}: no {begin} ... {end} block to replace")
    head, _, rest = page.partition(begin)
    _, _, tail = rest.partition(end)
    return f"{head}{begin}\n{text.strip()}\n{end}{tail}"
