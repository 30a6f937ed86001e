"""`inspect summary` -> Report: the layer table, totals, not-counted ops and notes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torchinspect.analysis.conventions import convention_notes as convention_lines
from torchinspect.report.base import (
    KeyValues,
    Report,
    Shown,
    Table,
    Text,
    fmt_bytes,
    fmt_si,
    pct,
    si,
)

if TYPE_CHECKING:
    from torchinspect.analysis.summary import Column, Summary, SummaryRow, Totals


# v2: layer rows are inclusive (params and macs include the modules inside, the root row is
# the model total) with self_params/self_macs; rows carry ran, recursive, calls, call_number,
# and input/output shapes are exact (no longer cut). Added within v2: rows carry output_bytes
# and flops (2 x macs). v3: a row's input/output are lists of dimensions (nested lists and
# objects for several tensors or a dict), their texts input_text/output_text.
# v4: totals.activation_bytes/total_bytes (whose meaning changed with memory_method) became
# leaf_output_bytes and estimated_total_bytes (always the leaf-output estimate) and
# predicted_activation_bytes (null without a prediction; the peak is peak_inference_bytes).
SCHEMA_VERSION = 4
SHAPE_WIDTH = 40  # the table shortens shape texts; CSV and JSON keep them whole


def summary_cell(row: SummaryRow, col: Column, owned: int | None = None) -> Any:
    """The display value of one cell (numbers stay numbers for CSV).

    Params and MACs are inclusive (the module and everything inside it), Self columns the
    module's own; a later call of a module shown before says ``(recursive)`` (torchinfo's
    word): its parameters are counted on its first row. ``owned``, the parameters of that
    first row: a module without any (a ReLU called twice) shows 0 again, as on its first
    row, since nothing is counted twice.
    """
    name = col.value
    if name == "layer":  # the tree for people, the full dotted name for CSV
        return Shown(row.name or row.label, row.label)
    if name in ("input", "output"):
        text = getattr(row, name)
        short = text if len(text) <= SHAPE_WIDTH else text[:SHAPE_WIDTH - 1] + "…"
        return Shown(text, short)
    if name in ("macs", "self_macs", "flops"):
        return si(getattr(row, name), empty="--")
    if name == "time":
        t = row.time_ms
        return Shown("", "--") if t is None else Shown(round(t, 6), f"{t:.3f} ms")
    if name == "output_bytes":
        return Shown(row.output_bytes, fmt_bytes(row.output_bytes) if row.output_bytes else "--")
    if name == "params_pct":
        return pct(row.params_pct) if row.params_pct is not None else Shown("", "-")
    if name in ("params", "self_params"):
        value = getattr(row, name)
        if row.recursive:
            return 0 if owned == 0 else Shown("", "(recursive)")
        return Shown("", "--") if value is None else value
    return getattr(row, name)


HEADERS = {
    "layer": "Layer", "type": "Type", "input": "Input shape", "output": "Output shape",
    "kernel": "Kernel", "params": "Params", "params_pct": "% params", "self_params": "Self params",
    "macs": "MACs", "self_macs": "Self MACs", "trainable": "Trainable",
    "output_bytes": "Output bytes", "flops": "FLOPs", "time": "Time (pred.)",
}
# the default columns left out, in this order, where the terminal is too narrow for them:
# the Self columns repeat MACs on leaves, % params and Trainable are read off Params, the
# kernel is in the layer's type and the input shape is the row above's output
FIT_ORDER = ("self_macs", "params_pct", "trainable", "kernel", "input")
_SHAPES = ("input", "output")
_NUMERIC = ("params", "params_pct", "self_params", "macs", "self_macs", "output_bytes", "flops",
            "time")


def summary_report(s: Summary, *, totals_only: bool = False) -> Report:
    sections: list[Any] = [Text(header_lines(s.model, s.input, s.device, s.fallback_reason, s.train))]
    if not totals_only:
        cols = list(s.columns)
        owned = {r.name: r for r in s.rows if not r.recursive}
        rows = [[summary_cell(r, c, _owned(owned.get(r.name), c)) for c in cols] for r in s.rows]
        align = ["right" if c.value in _NUMERIC else "left" for c in cols]
        footer = [("Params, MACs and FLOPs" if any(c.value == "flops" for c in cols) else "Params and MACs")
                  + " include the modules inside."]
        # said only where a Self column is shown (a narrow terminal leaves Self MACs out)
        selves = {HEADERS[c.value]: "Self: the module's own." for c in cols
                  if c.value.startswith("self_")}
        if any(c.value == "output_bytes" for c in cols):
            footer.append("Output bytes: the tensors the module returns, at their dtype.")
        if any(r.recursive and getattr(owned.get(r.name), "params", None) != 0 for r in s.rows):
            footer.append("(call k/N): a module run N times has a row per call; its params "
                          "are counted on its first row, later ones say (recursive).")
        if s.folded and any(r.repeat > 1 for r in s.rows):
            footer.append("(×N): N identical consecutive blocks folded into one row; "
                          "rows under it show one block.")
        sections.append(Table(None, [HEADERS[c.value] for c in cols], rows, align=align,
                              footer=footer, column_notes=selves, primary=True,
                              depths=[r.depth for r in s.rows],
                              **_fit_to_terminal(cols)))
    sections.append(totals_section(s.totals))
    sections.append(convention_notes())
    sections.extend(trailer_sections(s.not_counted, s.notes))
    return Report("summary", s.to_dict(), sections, version=SCHEMA_VERSION)


def _owned(first: SummaryRow | None, col: Column) -> int | None:
    """The parameters a module's first row counts in ``col`` (for its later calls)."""
    if first is None or col.value not in ("params", "self_params"):
        return None
    return getattr(first, col.value)


def _fit_to_terminal(cols: list[Column]) -> dict[str, Any]:
    """The table's fitting rules: shapes never fold; with the default columns (and the time
    column --gpu adds to them), the least useful ones are left out first in a narrow terminal
    (a footer says how to get them); columns the user picked with --columns all stay."""
    from torchinspect.analysis.summary import DEFAULT_COLUMNS, Column

    nofold = [HEADERS[c.value] for c in cols if c.value in _SHAPES]
    timed = tuple(cols) == (*DEFAULT_COLUMNS, Column.time)
    if tuple(cols) != DEFAULT_COLUMNS and not timed:
        return {"nofold": nofold}
    keys = {HEADERS[k]: k for k in FIT_ORDER}

    def hint(left: list[str]) -> str:
        example = ",".join(["output", "params", "macs", *(keys[h] for h in left[:1]),
                            *(["time"] if timed else [])])
        return f"Get them with --columns, e.g. --columns {example}."

    return {"nofold": nofold, "optional": [HEADERS[k] for k in FIT_ORDER], "fit_hint": hint}


def header_lines(model: str, inputs: str, device: str, fallback: str | None, train: bool) -> list[str]:
    lines = [f"{model}  input {inputs}  ({'train' if train else 'eval'} mode, traced on {device})"]
    if fallback:
        lines.append(f"note: traced on {device} instead of meta: {fallback}")
    return lines


def convention_notes() -> Text:
    """What MACs and FLOPs mean and what is counted: short notes below the tables, each line
    under 80 columns (rich wraps them at word boundaries in a narrower terminal)."""
    return Text(convention_lines())


def totals_section(t: Totals) -> KeyValues:
    # Shown: the text for people, the raw number for CSV
    items: list[tuple[str, Any]] = [
        ("Total params", Shown(t.params, f"{t.params:,}")),
        ("Trainable params", Shown(t.trainable, f"{t.trainable:,}")),
        ("Non-trainable params", Shown(t.frozen, f"{t.frozen:,}")),
        ("Buffers (elements)", Shown(t.buffers, f"{t.buffers:,}")),
        ("MACs", Shown(t.macs, f"{fmt_si(t.macs)} ({t.macs:,})")),
        ("FLOPs (2 x MACs)", Shown(t.flops, f"{fmt_si(t.flops)} ({t.flops:,})")),
    ]
    for dt, b in t.param_bytes_by_dtype.items():
        items.append((f"Param memory ({dt})", Shown(b, fmt_bytes(b))))
    items += [
        ("Buffer memory", Shown(t.buffer_bytes, fmt_bytes(t.buffer_bytes))),
        ("Input size", Shown(t.input_bytes, fmt_bytes(t.input_bytes))),
        *memory_items(t), *kv_items(t),
    ]
    return KeyValues("Totals", items)


def kv_items(t: Totals) -> list[tuple[str, Any]]:
    """A decoder's KV cache line: bytes per token of one sequence (``inspect memory
    --generate N`` predicts the whole generate call)."""
    if t.kv_bytes_per_token is None:
        return []
    text = f"{fmt_bytes(t.kv_bytes_per_token)} per sequence"
    if t.kv_bytes_per_prompt_token:
        text += f", + {fmt_bytes(t.kv_bytes_per_prompt_token)} per prompt token (cross-attention)"
    return [("KV cache per token", Shown(t.kv_bytes_per_token, text))]


def memory_items(t: Totals) -> list[tuple[str, Any]]:
    """The memory lines: ``inspect memory``'s predicted peaks, or (--memory none, or a model
    the prediction cannot follow) torchinfo's sum of leaf outputs, labelled as such."""
    if t.memory_method != "predicted":
        return [("Activation memory (sum of leaf outputs)",
                 Shown(t.leaf_output_bytes, fmt_bytes(t.leaf_output_bytes))),
                ("Estimated total size (weights + input + leaf outputs)",
                 Shown(t.estimated_total_bytes, fmt_bytes(t.estimated_total_bytes)))]
    on = (t.memory_gpu or t.memory_device or "cuda").upper()  # the GPU it is predicted for
    items: list[tuple[str, Any]] = [(
        f"Peak memory, inference (predicted, {on})",
        Shown(t.peak_inference_bytes, f"{fmt_bytes(t.peak_inference_bytes)}"
              f" ({_at(t.peak_inference_at)})"))]
    if t.peak_training_bytes is not None:
        optimizer = {"adamw": "AdamW", "adam": "Adam"}.get(t.training_optimizer or "",
                                                           t.training_optimizer or "")
        items.append((f"Peak memory, training step (predicted, {on}, {optimizer})",
                      Shown(t.peak_training_bytes, f"{fmt_bytes(t.peak_training_bytes)}"
                            f" ({_step(t.peak_training_at)})")))
    return items


def _step(where: str | None) -> str:
    """``backward at fc (steady step)`` -> ``backward at fc, steady step``."""
    return (where or "-").replace(" (", ", ").removesuffix(")")


def _at(where: str | None) -> str:
    """``inference at fc`` -> ``at fc`` (the label already says inference)."""
    return (where or "").removeprefix("inference ") or "-"


def trailer_sections(not_counted: dict[str, int], notes: list[str]) -> list[Any]:
    out: list[Any] = []
    if not_counted:
        shown = ", ".join(f"{op} ×{n}" for op, n in list(not_counted.items())[:12])
        more = f", … ({len(not_counted) - 12} more)" if len(not_counted) > 12 else ""
        out.append(Text([f"not counted (no MAC formula): {shown}{more}"]))
    if notes:
        out.append(Text([f"note: {n}" for n in notes], style="yellow"))
    return out
