"""Presentation: result dataclasses -> Report (one module per command) -> renderer.

Only cli/ imports this package. Nothing here imports torch.
"""

from torchinspect.report.base import (
    KeyValues,
    Report,
    Section,
    Shown,
    Table,
    Text,
    fmt_bytes,
    fmt_si,
    nbytes,
    pct,
    si,
)
from torchinspect.report.render import RENDERERS, OutputFormat, render, renderer

__all__ = ["KeyValues", "OutputFormat", "RENDERERS", "Report", "Section", "Shown", "Table",
           "Text", "fmt_bytes", "fmt_si", "nbytes", "pct", "render", "renderer", "si"]
