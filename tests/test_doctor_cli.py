"""`inspect doctor` on the command line: --list-checks, --fail-on's default, and the docs'
statements about them tested against the code (the check table itself is generated from the
registry by docs/hooks.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from typer.testing import CliRunner

from torchinspect.analysis.doctor import rules
from torchinspect.analysis.doctor.rules import fold_codes, rules_span, run_codes
from torchinspect.cli.app import app
from torchinspect.cli.doctor import FAIL_ON_DEFAULT
from torchinspect.errors import ExitStatus

ROOT = Path(__file__).resolve().parents[1]
DOCTOR_PAGE = ROOT / "docs" / "commands" / "doctor.md"
EXIT_PAGE = ROOT / "docs" / "concepts" / "exit-codes.md"


def _invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "80"})
    return result.exit_code, result.output


def test_list_checks_one_line_each_within_80_columns() -> None:
    code, out = _invoke("doctor", "--list-checks")
    assert code == 0, out
    lines = out.splitlines()
    for rule in rules().values():
        row = [line for line in lines if line.startswith(rule.code)]
        assert len(row) == 1, (rule.code, out)  # one line: the title never folds
        assert str(rule.severity) in row[0] and rule.title in row[0]
    assert max(len(line) for line in lines) <= 80, out


def test_list_checks_json_has_every_check_whole() -> None:
    code, out = _invoke("doctor", "--list-checks", "-f", "json")
    assert code == 0, out
    data = json.loads(out)
    assert data["schema"] == "torchinspect/doctor-checks/v1"
    assert [c["code"] for c in data["checks"]] == list(rules())
    for c in data["checks"]:
        rule = rules()[c["code"]]
        assert (c["name"], c["severity"], c["reads"], c["title"], c["trigger"], c["why"],
                c["fix"]) == (rule.name, str(rule.severity), rule.needs, rule.title,
                              rule.trigger, rule.why, rule.fix)


def test_a_model_is_needed_without_list_checks() -> None:
    code, out = _invoke("doctor")
    assert code == ExitStatus.USAGE and "missing MODEL" in out and "--list-checks" in out


def test_fail_on_default_is_error_and_the_docs_say_so() -> None:
    # a run with an error finding and no --fail-on exits 1; --fail-on never exits 0
    assert _invoke("doctor", "zoo:pitfall-layer-list", "--select", "TI001")[0] == 1
    assert _invoke("doctor", "zoo:pitfall-layer-list", "--select", "TI001",
                   "--fail-on", "never")[0] == 0
    assert _invoke("doctor", "zoo:pitfall-layer-list", "--select", "TI006")[0] == 0
    assert FAIL_ON_DEFAULT == "error"
    _, help_text = _invoke("doctor", "--help")
    assert f"default: {FAIL_ON_DEFAULT}" in " ".join(help_text.split())
    for page in (DOCTOR_PAGE, EXIT_PAGE):
        said = re.findall(r"`--fail-on`[^|\n]*?\(default `(\w+)`", page.read_text())
        assert said and set(said) == {FAIL_ON_DEFAULT}, (page, said)


def test_exit_code_tables_name_the_codes_the_cli_uses() -> None:
    rows = re.findall(r"^\| (\d+) \|", DOCTOR_PAGE.read_text().split("## Exit codes")[1],
                      flags=re.MULTILINE)
    assert [int(r) for r in rows] == [int(s) for s in ExitStatus]
    general = re.findall(r"^\| (\d+) \|", EXIT_PAGE.read_text(), flags=re.MULTILINE)
    assert [int(r) for r in general] == [int(s) for s in ExitStatus]


def test_code_ranges_written_in_help_and_readme_match_the_registry() -> None:
    readme = (ROOT / "README.md").read_text()
    assert f"({rules_span()}, `--list-checks`)" in readme
    _, help_text = _invoke("doctor", "--help")
    assert f"({fold_codes(run_codes())})" in " ".join(help_text.split())
