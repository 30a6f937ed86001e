"""The one policy for names from untrusted places (module names, class names, checkpoint keys,
file names) in every output format.

A ``ModuleDict`` key, a pickle's string or a file name may hold any code point: C0 controls
(an ESC starts a terminal command), DEL, C1 controls (xterm acts on U+009B as CSI), bidi
embeddings, overrides and isolates (which reorder what a terminal or a code review shows
after them), line and paragraph separators, NUL, and lone surrogates (a pickle decodes
strings with ``surrogatepass``, a non-UTF-8 file name arrives through ``surrogateescape``),
which no UTF-8 writer can encode. Each format gets the strictest form it needs:

* :func:`printable` -- a terminal, an error line, a table, Markdown, DOT labels: every
  character above shown as an escape (``\\x1b``, ``\\x9b``, ``\\u202e``, ``\\udcff``,
  ``\\n``), never obeyed;
* :func:`utf8_safe` -- data written to files and pipes (CSV, JSON): the text kept exact
  except lone surrogates, shown as ``\\udcXX`` escapes, so the file is valid UTF-8;
* :func:`xml_text` -- JUnit XML: also every character XML 1.0 forbids (C0 but tab/newline/CR,
  U+FFFE/U+FFFF), escaped, so a CI parser reads the file and the failing check stays visible;
* :func:`markdown_text`, :func:`markdown_cell` -- :func:`printable`, and no HTML a Markdown
  viewer would render (``<img ...>``), and no ``|`` ending a table cell.

Nothing here imports anything of the package (a leaf below every writer).
"""

from __future__ import annotations

import re

_BIDI = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
_SEPARATORS = (0x2028, 0x2029, 0x0085)  # line and paragraph separators, NEL
_TERMINAL = ({i: f"\\x{i:02x}" for i in (*range(32), *range(127, 160))}
             | {i: f"\\u{i:04x}" for i in (*_BIDI, *_SEPARATORS, 0xFEFF)}
             | {9: "\\t", 10: "\\n", 13: "\\r"})
_SURROGATE = re.compile("[\ud800-\udfff]")
# what XML text gets escaped: the characters XML 1.0 does not allow at all (tab, newline
# and CR are allowed), and the controls a terminal or viewer would act on
_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e"
                  "\u2066-\u2069\u2028\u2029\ufeff\ud800-\udfff\ufffe\uffff]")
# "<" that would open an HTML tag, comment or declaration in a Markdown viewer
_TAG_OPEN = re.compile(r"<(?=[A-Za-z/!?])")


def _escaped(m: re.Match[str]) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def printable(s: str) -> str:
    """``s`` on one line: control, bidi and separator characters and lone surrogates as
    escapes (``\\n``, ``\\t``, ``\\x1b``, ``\\x9b``, ``\\u202e``, ``\\udcff``): what a terminal
    would act on is shown, never obeyed. Printable text (``résumé 中文``) is untouched."""
    return _SURROGATE.sub(_escaped, str(s).translate(_TERMINAL))


def utf8_safe(s: str) -> str:
    """``s`` exactly, except lone surrogates (not encodable as UTF-8) as ``\\udcXX`` text."""
    return _SURROGATE.sub(_escaped, s) if _SURROGATE.search(s) else s


def xml_text(s: str) -> str:
    """``s`` for an XML 1.0 attribute or text node: the characters XML forbids (C0 but tab,
    newline and CR; lone surrogates; U+FFFE, U+FFFF) and the C1, bidi and separator controls
    as escapes; ElementTree escapes ``& < > "`` itself."""
    return _XML.sub(_escaped, str(s))


def markdown_text(s: str) -> str:
    """A text for Markdown: one line, and no HTML a viewer would render (``<img ...>``)."""
    return _TAG_OPEN.sub("&lt;", printable(s))


def markdown_cell(s: str) -> str:
    """A table cell for Markdown: also ``|``, which would end the cell."""
    return markdown_text(s).replace("|", "\\|")


def dot_text(s: str) -> str:
    """The inside of a DOT double-quoted string: :func:`printable` (no NUL or C0, which
    Graphviz refuses), backslashes and quotes escaped, newlines as DOT's centred breaks."""
    lines = str(s).replace("\r", "").split("\n")
    return "\\n".join(printable(ln).replace("\\", "\\\\").replace('"', '\\"') for ln in lines)
