"""Does `inspect doctor` find each pitfall at its line, and stay quiet on the clean twins?

Two sets, reported side by side:

* development: the zoo's trigger/twin pairs (tests/data/doctor_dev_pairs.json: the code and
  the statement each trigger must be found at), which the checks were written against;
* validation: tests/data/doctor_validation/ (cases and scoring: tests/doctor_cases.py),
  pitfall models written separately in other styles, not tuned on; v16 and later were
  written for the third pass before its checks were.

For each model: every expected code found, at its line, with the right diagnosis (no
warning or error of another code), how many warnings/errors the clean twin draws, and whether
anything raised (what would be exit 70 on the CLI).

    python benchmarks/doctor_pitfalls.py                 # run, write results/doctor-pitfalls.json
    python benchmarks/doctor_pitfalls.py --out FILE      # ... into another file (a baseline)
    python benchmarks/report.py                          # the page, from the JSON

(``PYTHONPATH=OLD/src python benchmarks/doctor_pitfalls.py --out
benchmarks/results/doctor-pitfalls-before.json`` scores another version of the package.)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # doctor_cases: the cases and their scoring

from machine import RESULTS, run_header  # noqa: E402

from doctor_cases import THIRD_PASS, Case, cases, score  # noqa: E402

DATA = RESULTS / "doctor-pitfalls.json"
BEFORE = RESULTS / "doctor-pitfalls-before.json"


def _run(model: str, inputs: list[str] | None) -> tuple[list[dict[str, Any]], str | None]:
    from torchinspect.analysis.doctor import diagnose
    from torchinspect.sources.case import ModelOptions

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the models' own (torch.tensor(a_tensor) warns)
            r = diagnose(model, options=ModelOptions(device="cpu", inputs=inputs or ()))
    except Exception as exc:  # noqa: BLE001 - what the CLI would turn into exit 70 (or 2)
        return [], f"{type(exc).__name__}: {str(exc)[:300]}"
    return [{"code": f.code, "severity": str(f.severity), "location": f.location,
             "what": f.what} for f in r.findings], None


def _row(case: Case, trigger: str, twin: str) -> dict[str, Any]:
    t0 = time.perf_counter()
    found, crash = _run(trigger, case.inputs)
    clean, twin_crash = _run(twin, case.inputs)
    return {"name": case.name, "expected": [[c, f"{name}:{line}"] for c, name, line in case.expected],
            **score(case, found, clean), "findings": found, "crash": crash or twin_crash,
            "seconds": round(time.perf_counter() - t0, 2)}


def development() -> list[dict[str, Any]]:
    zoo = ROOT / "models_zoo"
    out = []
    for p in json.loads((ROOT / "tests" / "data" / "doctor_dev_pairs.json").read_text()):
        lines = (zoo / p["file"]).read_text().splitlines()
        line = next(i + 1 for i, text in enumerate(lines) if p["statement"] in text)
        case = Case(p["trigger"], zoo / p["file"], [(p["code"], f"zoo/{p['file']}", line)])
        out.append(_row(case, f"zoo:{p['trigger']}", f"zoo:{p['clean']}"))
    return out


def validation() -> list[dict[str, Any]]:
    return [{**_row(c, c.trigger, c.twin), "set": "third" if c.number >= THIRD_PASS else "second"}
            for c in cases()]


def run(out: Path) -> None:
    import torch

    torch.set_num_threads(1)
    data = {"development": development(), "validation": validation()}
    record = {**run_header(), "data": data}
    out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {out}")
    for key in ("development", "validation"):
        print(f"{key}: {summary(data[key])}")


def summary(rows: list[dict[str, Any]]) -> str:
    n = len(rows)
    count = {k: sum(bool(r.get(k)) for r in rows)
             for k in ("found_code", "found_at_line", "right_diagnosis", "crash")}
    noise = sum(bool(r["twin_noise"]) for r in rows)
    return (f"{count['found_code']}/{n} found, {count['found_at_line']}/{n} at the offending "
            f"line, {count['right_diagnosis']}/{n} with the right diagnosis; {n - noise}/{n} "
            f"clean twins without warnings or errors; {count['crash']} crashes")


def page(machine_line: Callable[[dict[str, Any]], str]) -> tuple[str, list[str]]:
    """RESULTS-doctor-pitfalls.md (registered in report.py's PAGES, which hands its
    ``machine_line``)."""
    record = json.loads(DATA.read_text())
    data = record["data"]
    second = [r for r in data["validation"] if r["set"] == "second"]
    third = [r for r in data["validation"] if r["set"] == "third"]
    lines = ["## Pitfalls found at their line", "", machine_line(record), "",
             "The checks' real runs on CPU. A finding has the right diagnosis when it is at the "
             "offending line and the model draws no warning or error of another code.", "",
             f"- development (the zoo's pairs, which the checks were written against): "
             f"{summary(data['development'])}",
             f"- validation, second pass (v01-v{THIRD_PASS - 1:02d}, not tuned on): "
             f"{summary(second)}",
             f"- validation, third pass (v{THIRD_PASS}-, written before this pass's checks): "
             f"{summary(third)}"]
    files = ["doctor-pitfalls.json"]
    if BEFORE.exists():
        before = json.loads(BEFORE.read_text())["data"]
        third_before = [r for r in before["validation"] if r["set"] == "third"]
        lines.append(f"- the same third-pass set with the code before this pass "
                     f"(`doctor-pitfalls-before.json`): {summary(third_before)}")
        files.append("doctor-pitfalls-before.json")
    lines.append("")
    files += _sweep(lines, machine_line)
    files += _perf(lines, machine_line)
    for title, rows in (("Development", data["development"]), ("Validation", data["validation"])):
        lines += [f"### {title}", "", "| model | expected | found | at the line | diagnosis "
                  "| twin: warnings+errors | twin: info | crash |",
                  "|---|---|---|---|---|---:|---:|---|"]
        for r in rows:
            expected = ", ".join(f"{c} {at}" for c, at in r["expected"])
            wrong = ", ".join(sorted({f["code"] for f in r["misdiagnosed"]}))
            lines.append(
                f"| {r['name']} | {expected} | {_yes(r['found_code'])} | "
                f"{_yes(r['found_at_line'])} | {'right' if r['right_diagnosis'] else wrong or 'no'}"
                f" | {len(r['twin_noise'])} | {r['twin_info']} | {r['crash'] or '-'} |")
        lines.append("")
    return "\n".join(lines), files


def _sweep(lines: list[str], machine_line: Callable[[dict[str, Any]], str]) -> list[str]:
    """Models without a planted mistake (doctor_sweep.py): warnings, errors, never-ran notes."""
    from doctor_sweep import OUT
    from doctor_sweep import summary as sweep_summary

    if not OUT.exists():
        return []
    rows = [json.loads(line) for line in OUT.read_text().splitlines() if line.strip()]
    versions = ", ".join(f"{k} {v}" for k, v in rows[0]["run"]["versions"].items())
    lines += ["### Models without a planted mistake", "",
              machine_line(rows[0]["run"]), "",
              f"`python benchmarks/doctor_sweep.py` ({versions}): every check on "
              "each model; \"real\" runs also ran the real-number checks on the CPU (the others: "
              "module tree and meta trace). A never-ran note is right only where a module truly "
              "never runs in this forward (an auxiliary head used in training).", "",
              "| set | models | real runs | with a warning or error | with a never-ran note "
              "| modules used by their parent or a tie | checks not finished | not built |",
              "|---|---:|---:|---:|---:|---:|---:|---:|"]
    details: list[str] = []
    for which in ("torchvision", "hf", "timm"):
        mine = [r for r in rows if r["set"] == which]
        if not mine:
            continue
        c = sweep_summary(mine)
        lines.append(f"| {which} | {c['models']} | {c['real']} | {c['warn_err']} | "
                     f"{c['never_ran']} | {c['used_by']} | {c['broken']} | {len(c['failed'])} |")
        for r in c["noisy"]:
            found = "; ".join(f"{f['code']} {f['severity']} {f['module'] or '(model)'}: "
                              f"{f['what']}" for f in r["findings"] if f["severity"] != "info")
            details.append(f"- {which} `{r['name']}`: {found}")
        for r in c["never"]:
            names = ", ".join(f"{n['module']} ({n['type']})" for n in r["never_ran"])
            details.append(f"- {which} `{r['name']}` never ran: {names}")
        details += [f"- {which} `{name}` could not be built" for name in c["failed"]]
    lines += ["", *details, ""] if details else [""]
    return [OUT.name]


PERF = RESULTS / "doctor-perf-resnet50-vm.json"


def _perf(lines: list[str], machine_line: Callable[[dict[str, Any]], str]) -> list[str]:
    """`inspect doctor resnet50` with this version and the one before (perf_doctor.py
    --compare-src), run alternately."""
    import statistics

    if not PERF.exists():
        return []
    record = json.loads(PERF.read_text())
    data = record["data"]
    lines += ["### Time: `inspect doctor resnet50`, this version against the one before", "",
              machine_line(record), "",
              "The two versions run alternately (whole `inspect` processes; the machine is "
              "shared with other work: the load before each run is in the JSON, here its "
              f"median), median (and min) of {len(data['runs']) // 2} runs each; on a loaded "
              "machine the minimum is the run least disturbed.", "",
              "| version | wall (s) | CPU (s) | doctor's own time (s) | load |",
              "|---|---:|---:|---:|---:|"]
    for label, name in (("this", "this version"), ("other", "before")):
        rows = [r for r in data["runs"] if r["src"] == label]
        if rows and "cpu_s" in rows[0]:
            cells = [f"{statistics.median(r[k] for r in rows):.2f} (min {min(r[k] for r in rows):.2f})"
                     for k in ("wall_s", "cpu_s", "doctor_s")]
            load = statistics.median(r["load_before"] for r in rows)
            lines.append(f"| {name} | {' | '.join(cells)} | {load:.1f} |")
    lines.append("")
    return [PERF.name]


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=DATA, help="the raw data (JSON)")
    run(ap.parse_args().out)


if __name__ == "__main__":
    main()
