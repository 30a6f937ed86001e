"""JUnit XML for CI test views: one testsuite per model, one testcase per limit checked
(``max-params``, ``increase-macs``), one ``<error>`` testcase for a model that could not be
built or run. Counts are computed from the cases written."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from torchinspect.check.metrics import fmt_measure, fmt_percent
from torchinspect.check.records import CheckResult, Kind, Measured, ModelCheck
from torchinspect.escape import xml_text
from torchinspect.io.atomic import atomic_write_text

_NAME = "torchinspect check"


def _case_name(kind: Kind, metric: str) -> str:
    return f"max-{metric}" if kind is Kind.budget else f"increase-{metric}"


def _suite(root: ET.Element, m: ModelCheck) -> None:
    suite = ET.SubElement(root, "testsuite", name=m.model, time=f"{m.seconds:.3f}")
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", name="inputs", value=m.inputs)
    ET.SubElement(props, "property", name="budgets", value=m.source)
    classname = f"torchinspect.check.{m.model}"
    if m.error is not None:
        case = ET.SubElement(suite, "testcase", classname=classname, name="measure", time="0")
        err = ET.SubElement(case, "error", message=f"{m.model}: {m.error}", type="ModelError")
        err.text = f"{m.model}: {m.error}" + (f"\nhint: {m.hint}" if m.hint else "")
    for r in m.results:
        if r.kind is Kind.change:
            continue
        case = ET.SubElement(suite, "testcase", classname=classname,
                             name=_case_name(r.kind, r.metric.value), time="0")
        if not r.passed:
            fail = ET.SubElement(case, "failure", message=r.message,
                                 type="BudgetExceeded" if r.kind is Kind.budget else "Regression")
            fail.text = f"{m.model}: {r.message} ({_numbers(r)})"
        else:
            ET.SubElement(case, "system-out").text = r.message
    info = [r.message for r in m.results if r.kind is Kind.change] + m.notes
    if info:
        ET.SubElement(suite, "system-out").text = "\n".join(info)
    _count(suite)


def _numbers(r: Measured) -> str:
    """Measured and allowed in one unit each: the metric's for a budget, percent for an
    allowed increase (never "5%" in the message and "0.05" beside it)."""
    if r.kind is Kind.budget:
        return f"measured {fmt_measure(r.metric, r.value)}, limit {fmt_measure(r.metric, r.limit)}"
    change = "-" if r.change is None else fmt_percent(r.change)
    allowed = "-" if r.limit is None else fmt_percent(r.limit)
    return (f"measured {fmt_measure(r.metric, r.value)}, baseline "
            f"{fmt_measure(r.metric, r.baseline)}, change {change}, allowed {allowed}")


def _count(node: ET.Element) -> None:
    """tests / failures / errors of a suite or of the whole document, from its testcases."""
    cases = list(node.iter("testcase"))
    node.set("tests", str(len(cases)))
    node.set("failures", str(sum(c.find("failure") is not None for c in cases)))
    node.set("errors", str(sum(c.find("error") is not None for c in cases)))


def _document(root: ET.Element) -> str:
    _count(root)
    _xml_safe(root)
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _xml_safe(root: ET.Element) -> None:
    """Every attribute and text through escape.xml_text: a checkpoint key or model name with a
    control character would make the file invalid XML, and a CI parser that rejects it drops
    the failing check from its test view."""
    for node in root.iter():
        node.attrib = {k: xml_text(v) for k, v in node.attrib.items()}
        if node.text:
            node.text = xml_text(node.text)


def junit_xml(result: CheckResult) -> str:
    """The JUnit document of a check."""
    root = ET.Element("testsuites", name=_NAME, time=f"{sum(m.seconds for m in result.models):.3f}")
    for m in result.models:
        _suite(root, m)
    if result.notes:
        ET.SubElement(root, "system-out").text = "\n".join(result.notes)
    return _document(root)


def junit_error_xml(message: str, hint: str | None) -> str:
    """A JUnit document for a check that could not start (a bad config or option), so the
    CI's test view shows why instead of finding no file."""
    root = ET.Element("testsuites", name=_NAME, time="0")
    suite = ET.SubElement(root, "testsuite", name=_NAME, time="0")
    case = ET.SubElement(suite, "testcase", classname="torchinspect.check", name="configuration",
                         time="0")
    err = ET.SubElement(case, "error", message=message, type="UsageError")
    err.text = message + (f"\nhint: {hint}" if hint else "")
    _count(suite)
    return _document(root)


def write_junit(result: CheckResult | str, path: str, *, protect: tuple[str, ...] = ()) -> None:
    """Write a JUnit report (a result, or a document from :func:`junit_error_xml`)
    atomically, never over one of the ``protect`` input files."""
    text = result if isinstance(result, str) else junit_xml(result)
    atomic_write_text(path, text, protect=protect)
