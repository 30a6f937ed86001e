"""Key/value blocks and tables as text: values next to their keys, no trailing spaces,
tables of sentences folded to a readable width (issue 24, output)."""

from __future__ import annotations

import io

import pytest

from torchinspect.report.base import KeyValues, Report, Table, Text
from torchinspect.report.render import WRAP_WIDTH, render

# a block shaped like bench's "environment" (one long value) and doctor's "Result"
METHOD = ("warm-up >= 1 s and 5 calls; timed 2-6 s, >= 10 iters, until the median's error "
          "<= 0.5%; perf_counter per call")
BLOCK = KeyValues("environment", [
    ("model", "resnet18"), ("inputs", "float32:1,3,224,224"), ("device", "cpu"),
    ("threads", 2), ("Rows", 50), ("flags", "-"), ("method", METHOD),
    ("percentiles", "linear interpolation (numpy default)")])


def _text(report: Report, width: int | None) -> str:
    buf = io.StringIO()  # not a terminal, like a CI log
    render(report, "table", buf, width=width)
    return buf.getvalue()


@pytest.mark.parametrize("width", [80, 120, None], ids=["80", "120", "no-terminal"])
def test_golden_key_values(golden, width: int | None) -> None:
    text = _text(Report("x", {}, [BLOCK]), width)
    golden(f"key_values_{width or 'no_terminal'}.txt", text)
    lines = text.splitlines()
    assert lines[0] == "environment"
    # every value starts in one column, right after the longest key
    start = len("percentiles") + 2
    rows = {line.split()[0]: line for line in lines[1:] if not line.startswith(" ")}
    assert list(rows) == [k for k, _ in BLOCK.items]
    for key, value in BLOCK.items:
        assert rows[key][start:].startswith(str(value)[:20]), rows[key]
    # a folded value goes on in the value column, not under the keys
    assert all(line[:start].strip() == "" for line in lines[1:] if line.startswith(" "))
    assert rows["Rows"].rstrip().endswith(" 50") and len(rows["Rows"]) == start + 2
    assert all(line == line.rstrip() for line in lines)
    if width:  # the long value folds inside the terminal, next to its key
        assert max(len(line) for line in lines) <= width
    else:
        assert METHOD in text


def test_table_rows_have_no_trailing_spaces() -> None:
    t = Table("Layers", ["Name", "Kind", "Params"],
              [["conv1", "Conv2d", 9408], ["a much longer name", "-", 1], ["x", "Linear", None]])
    text = _text(Report("x", {}, [t, Text(["note"], title="Notes")]), None)
    lines = text.splitlines()
    assert lines[0] == "Layers" and "a much longer name" in text
    assert all(line == line.rstrip() for line in lines), [ln for ln in lines if ln != ln.rstrip()]


def test_sentence_tables_fold_without_a_terminal() -> None:
    what = "Linear out_features 172 -> 176 " * 6
    rows = [["TI006", "info", "layers.0.mlp.gate_proj", what, "use out_features 176 " * 3]]
    folded = Table("Findings", ["Code", "Severity", "Module", "What", "Fix"], rows,
                   wrap=["What", "Fix"])
    plain = Table("Findings", ["Code", "Severity", "Module", "What", "Fix"], rows)
    text = _text(Report("x", {}, [folded]), None)
    assert WRAP_WIDTH - 10 <= max(len(line) for line in text.splitlines()) <= WRAP_WIDTH
    assert "layers.0.mlp.gate_proj" in text  # names stay whole: only What and Fix fold
    # a layer table keeps its natural width (one row per line)
    assert max(len(line) for line in _text(Report("x", {}, [plain]), None).splitlines()) > 200
    narrow = _text(Report("x", {}, [folded]), 72)
    assert max(len(line) for line in narrow.splitlines()) <= 72


def test_a_golden_that_does_not_add_up_is_refused(golden, tmp_path) -> None:
    """--update-golden checks the invariants first (column sums equal the totals), as
    torchinfo does on every golden: a table whose rows do not add up is never written."""
    from pathlib import Path

    import golden_invariants

    text = (Path(__file__).parent / "golden" / "summary_resnet18_depth2.txt").read_text()
    assert golden_invariants.problems(text) == []
    broken = text.replace("147,968", "147,969")  # layer1 no longer its children's sum
    assert golden_invariants.problems(broken) == [
        "resnet18: Params 11,689,512 but its rows below add up to 11,689,513"]
    with pytest.raises(pytest.fail.Exception, match="breaks the golden invariants"):
        golden("summary_resnet18_depth2.txt", broken)


def _tables() -> list[Table]:
    rows = [["a", 1, "[1, 64, 112, 112]", "×3…"], ["├─longer name", 1_234_567, "-", None],
            ["│ └─x", 0, "[1, 1000]", "yes"]]
    cols = ["Layer", "Params", "Output shape", "Note"]
    return [Table("a title", cols, rows), Table(None, cols, rows, optional=["Note", "Output shape"]),
            Table("a title much longer than this small table is wide, so it folds", cols, rows),
            Table("empty", cols, []), Table(None, cols, [r[:2] for r in rows], footer=["a footer"]),
            Table(None, cols, rows, nofold=["Output shape"], align=["left", "right", "right", "left"])]


@pytest.mark.parametrize("width", [160, 44, 36, 30, 20, None])
def test_a_terminal_and_a_pipe_show_one_layout(width: int | None) -> None:
    """One layout (report/table_text.py) for every destination: a terminal gets the same
    lines as a file, only with colours (a bold title and header)."""
    from ptys import write_to_pty

    report = Report("x", {}, [*_tables(), BLOCK, Text(["a note " * 20], style="yellow")])
    plain = _text(report, width)
    raw: list[str] = []

    def styled(stream) -> None:
        buf = io.StringIO()
        render(report, "table", buf, width=width)
        raw.append(buf.getvalue())
        render(report, "table", stream, width=width)

    shown = write_to_pty(styled, 200)
    assert shown.replace("\r", "") == plain
    assert raw[0] == plain
