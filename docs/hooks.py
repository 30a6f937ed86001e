"""MkDocs hook: the option tables of every command page come from the Typer app itself.

A page writes ``<!-- inspect-options NAME -->`` where the reference of ``inspect NAME``
belongs; the hook replaces the marker with ``torchinspect.cli.reference.command_reference``
(usage, arguments, options with their help and defaults), so the pages cannot drift from
``inspect NAME --help``. An unknown NAME fails the build.
"""

from __future__ import annotations

import re
from typing import Any

_MARKER = re.compile(r"<!--\s*inspect-options\s+([a-z-]+)\s*-->")


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if "inspect-options" not in markdown:
        return markdown
    from torchinspect.cli.reference import command_reference

    return _MARKER.sub(lambda m: command_reference(m.group(1)), markdown)
