"""Presentation: result dataclasses -> Report (one module per command) -> renderer.

Only cli/ imports this package. Nothing here imports torch itself; a report module that only
needs a constant or a formatter of analysis/ (which loads torch) imports it inside the
function, so rendering a saved result stays light.
"""

from torchinspect.report.base import (
    Chart,
    Figure,
    KeyValues,
    Report,
    Section,
    Shown,
    Table,
    Text,
    fmt_bytes,
    fmt_si,
    fmt_value,
    nbytes,
    pct,
    si,
)
from torchinspect.report.render import RENDERERS, OutputFormat, render, renderer

__all__ = ["Chart", "Figure", "KeyValues", "OutputFormat", "RENDERERS", "Report", "Section",
           "Shown", "Table", "Text", "fmt_bytes", "fmt_si", "fmt_value", "nbytes", "pct", "render",
           "renderer", "si"]
