"""``inspect check``: size budgets for CI (params, MACs, weight size, activations).

Budgets come from the command line (``--max-params 25M``), from ``pyproject.toml``
(``[tool.torchinspect.check]``, found in the current directory) or from ``--config FILE``;
the command line wins. Every model is measured on meta (one trace when MACs or activations
are budgeted, none otherwise), so a check costs about one ``inspect summary``.

Config format (TOML)::

    [tool.torchinspect.check]          # defaults for every model ("[check]" or top level
    max-params = "30M"                 #  in a standalone --config file works too)
    max-macs = "5G"

    [[tool.torchinspect.check.models]]
    model = "resnet50"
    max-size-mb = 110

    [[tool.torchinspect.check.models]]
    model = "zoo:convnet"
    input = ["1,28,28"]
    max-params = "100K"
"""

from __future__ import annotations

import math
import os
import re
import time
import tomllib
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from torchinspect.errors import InspectError


class Metric(StrEnum):
    params = "params"
    macs = "macs"
    size_mb = "size-mb"
    activation_mb = "activation-mb"
    latency_ms = "latency-ms"

    @property
    def option(self) -> str:
        return f"--max-{self.value}"

    @property
    def counted(self) -> bool:
        """Counts take SI suffixes (25M); MB and ms budgets are plain numbers."""
        return self in (Metric.params, Metric.macs)


_SUFFIX = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "B": 1e9}
_NUMBER = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([KMGTB]?)\s*$", re.IGNORECASE)


def parse_budget(value: Any, metric: Metric | str, *, where: str | None = None) -> float:
    """``"25M"`` -> 25e6, ``"1.5e9"`` -> 1.5e9, ``100`` -> 100 (suffixes only for counts)."""
    metric = Metric(metric)
    label = where or metric.option
    if isinstance(value, bool):
        value = str(value)
    if isinstance(value, (int, float)):
        number = float(value)
    else:
        m = _NUMBER.match(str(value))
        if not m or (m.group(2) and not metric.counted):
            example = "25M, 5G, 1.5e9 or 30000000" if metric.counted else "100 or 12.5"
            raise InspectError(f"{label} {value!r} is not a budget",
                               hint=f"use a number like {example}")
        number = float(m.group(1)) * _SUFFIX[m.group(2).upper()]
    if not math.isfinite(number) or number < 0:
        raise InspectError(f"{label} {value!r} is not a budget", hint="use a positive number")
    return number


@dataclass
class ModelBudget:
    """One model to check: its MODEL text, model options, and limits by metric."""

    model: str
    limits: dict[Metric, float] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)  # input, arg, arch, weights, batch, ...
    source: str = "command line"


@dataclass
class Measured:
    metric: Metric
    limit: float
    value: float | None
    passed: bool
    message: str

    def to_dict(self) -> dict[str, Any]:
        def num(v: float | None) -> float | int | None:  # counts as integers, as elsewhere
            return int(v) if v is not None and self.metric.counted and float(v).is_integer() else v

        return {"metric": self.metric.value, "limit": num(self.limit), "value": num(self.value),
                "passed": self.passed, "message": self.message}

    def shown(self) -> tuple[str, str]:
        """(measured, limit) as text whose comparison reads right: ``11.69M`` against a
        limit of ``11.6895M`` would look exceeded, so close counts are shown in full."""
        value = self.value or 0
        shown = fmt_value(self.metric, value, exact=True), fmt_value(self.metric, self.limit)
        if abs(value - self.limit) >= 0.01 * max(abs(self.limit), 1e-9) and shown[0] != shown[1]:
            return shown
        if self.metric.counted:
            return f"{value:,.0f}", f"{self.limit:,.0f}"
        unit = " ms" if self.metric is Metric.latency_ms else " MB"
        return f"{value:,.4f}{unit}", f"{self.limit:,.4f}{unit}"


@dataclass
class ModelCheck:
    model: str
    name: str
    inputs: str
    results: list[Measured]
    seconds: float = 0.0
    source: str = "command line"

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "name": self.name, "inputs": self.inputs,
                "passed": self.passed, "source": self.source, "seconds": round(self.seconds, 3),
                "results": [r.to_dict() for r in self.results]}


@dataclass
class CheckResult:
    models: list[ModelCheck]
    config: str | None = None

    @property
    def passed(self) -> bool:
        return all(m.passed for m in self.models)

    @property
    def failures(self) -> int:
        return sum(not r.passed for m in self.models for r in m.results)

    def to_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "failures": self.failures, "config": self.config,
                "models": [m.to_dict() for m in self.models]}


# ---------------------------------------------------------------- config

_OPTION_KEYS = {"input", "arg", "args", "arch", "weights", "key", "batch", "no-batch",
                "weights-config", "trust-pickle", "strict"}


def _check_table(doc: dict[str, Any], path: str, *, standalone: bool) -> dict[str, Any] | None:
    table = doc.get("tool", {}).get("torchinspect", {}).get("check")
    if table is None and standalone:
        table = doc.get("check", doc if ("models" in doc or any(
            k.startswith("max-") for k in doc)) else None)
    if table is not None and not isinstance(table, dict):
        raise InspectError(f"{path}: [tool.torchinspect.check] must be a table",
                           hint="see `inspect check --help` for the format")
    return table


def find_config(path: str | None, cwd: str | None = None) -> tuple[str, dict[str, Any]] | None:
    """The check table of ``--config FILE``, or of ``./pyproject.toml`` when it has one."""
    standalone = path is not None
    if path is None:
        path = os.path.join(cwd or os.getcwd(), "pyproject.toml")
        if not os.path.isfile(path):
            return None
    elif not os.path.isfile(path):
        what = "is a folder" if os.path.isdir(path) else "no such file"
        raise InspectError(f"--config {path}: {what}", hint="pass a TOML file (e.g. pyproject.toml)")
    try:
        with open(path, "rb") as fh:
            doc = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise InspectError(f"{path}: not valid TOML ({exc})", hint="fix the file's syntax") from None
    except OSError as exc:
        raise InspectError(f"{path}: cannot read ({exc.strerror})", hint="check the path") from None
    table = _check_table(doc, path, standalone=standalone)
    if table is None:
        if standalone:
            raise InspectError(f"--config {path}: no [tool.torchinspect.check] table",
                               hint="add [tool.torchinspect.check] with max-params = \"25M\" ...")
        return None
    return path, table


def _limits(table: dict[str, Any], where: str) -> dict[Metric, float]:
    out: dict[Metric, float] = {}
    for key, value in table.items():
        if key.startswith("max-") or key.startswith("max_"):
            name = key[4:].replace("_", "-")
            try:
                metric = Metric(name)
            except ValueError:
                raise InspectError(f"{where}: unknown budget {key!r}",
                                   hint="use " + ", ".join(f"max-{m.value}" for m in Metric)) from None
            out[metric] = parse_budget(value, metric, where=f"{where}: {key}")
    return out


def _entry_options(entry: dict[str, Any], where: str) -> dict[str, Any]:
    opts: dict[str, Any] = {}
    for key, value in entry.items():
        if key == "model" or key.startswith("max-") or key.startswith("max_"):
            continue
        k = key.replace("_", "-")
        if k not in _OPTION_KEYS:
            raise InspectError(f"{where}: unknown key {key!r}",
                               hint="model entries take model, max-*, " + ", ".join(sorted(_OPTION_KEYS)))
        opts["arg" if k == "args" else k] = value
    return opts


def budgets_from_config(path: str, table: dict[str, Any]) -> tuple[dict[Metric, float], list[ModelBudget]]:
    """Default limits and the model entries of a check table."""
    defaults = _limits({k: v for k, v in table.items() if k != "models"}, path)
    unknown = [k for k in table if k != "models" and not k.startswith(("max-", "max_"))]
    if unknown:
        raise InspectError(f"{path}: unknown key {unknown[0]!r} in [tool.torchinspect.check]",
                           hint="use max-* budgets and [[tool.torchinspect.check.models]] entries")
    entries = table.get("models", [])
    if not isinstance(entries, list):
        raise InspectError(f"{path}: 'models' must be an array of tables",
                           hint='use [[tool.torchinspect.check.models]] with model = "resnet50"')
    models = []
    for i, entry in enumerate(entries):
        where = f"{path}: models[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("model"), str):
            raise InspectError(f"{where} needs model = \"NAME\"", hint='e.g. model = "resnet50"')
        models.append(ModelBudget(entry["model"], {**defaults, **_limits(entry, where)},
                                  _entry_options(entry, where), source=path))
    return defaults, models


def plan(models: list[str], cli_limits: dict[Metric, float], *, config: str | None = None,
         cwd: str | None = None) -> tuple[list[ModelBudget], str | None]:
    """Which models to check with which limits (command line over config entries over defaults)."""
    found = find_config(config, cwd)
    defaults: dict[Metric, float] = {}
    entries: list[ModelBudget] = []
    path = None
    if found is not None:
        path = found[0]
        defaults, entries = budgets_from_config(*found)
    if models:
        by_name = {e.model: e for e in entries}
        chosen = []
        for m in models:
            entry = by_name.get(m)
            base = entry.limits if entry else defaults
            chosen.append(ModelBudget(m, {**base, **cli_limits}, dict(entry.options) if entry else {},
                                      source=entry.source if entry else "command line"))
    else:
        if not entries:
            raise InspectError("no MODEL given and no models in a check config",
                               hint="inspect check resnet50 --max-params 30M, or list models under "
                               "[[tool.torchinspect.check.models]] in pyproject.toml")
        chosen = [ModelBudget(e.model, {**e.limits, **cli_limits}, e.options, e.source)
                  for e in entries]
    for mb in chosen:
        if not mb.limits:
            raise InspectError(f"{mb.model}: no budget to check",
                               hint="pass e.g. --max-params 25M --max-macs 5G, or set them in "
                               "[tool.torchinspect.check]")
    return chosen, path


# ---------------------------------------------------------------- measuring


def fmt_value(metric: Metric, v: float, *, exact: bool = False) -> str:
    """``25.56M`` (measured, ``exact``) / ``30M`` (a limit); MB as ``102.44 MB``."""
    from torchinspect.device import fmt_size

    if metric.counted:
        for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)):
            if abs(v) >= scale:
                return f"{v / scale:.2f}{unit}" if exact else f"{v / scale:g}{unit}"
        return f"{v:g}"
    if metric is Metric.latency_ms:  # 1,000 ms, 12.5 ms, 0.873 ms (never 1e+03)
        return f"{v:,.0f} ms" if abs(v) >= 100 else f"{v:.3g} ms"
    return fmt_size(v * 1e6)


def _options_for(mb: ModelBudget, base: Any) -> Any:
    """ModelOptions for one model: the command line's, overridden by its config entry."""
    from dataclasses import replace

    o = mb.options
    if not o:
        return base
    inputs = o.get("input")
    args = o.get("arg")
    return replace(
        base,
        inputs=[inputs] if isinstance(inputs, str) else (inputs if inputs is not None else base.inputs),
        args=args if args is not None else base.args,
        arch=o.get("arch", base.arch), weights=o.get("weights", base.weights),
        key=o.get("key", base.key), strict=o.get("strict", base.strict),
        trust_pickle=o.get("trust-pickle", base.trust_pickle), batch=o.get("batch", base.batch),
        no_batch=o.get("no-batch", base.no_batch),
        weights_config=o.get("weights-config", base.weights_config))


def measure(mb: ModelBudget, options: Any = None) -> ModelCheck:
    """Measure one model against its limits (meta trace only when MACs/activations are budgeted)."""
    from torchinspect.sources.case import ModelOptions, make_case

    start = time.perf_counter()
    opts = _options_for(mb, options or ModelOptions())
    from torchinspect.sources.materialize import has_lazy

    need_trace = bool({Metric.macs, Metric.activation_mb} & set(mb.limits))
    case = make_case(mb.model, options=opts,
                     need_inputs=need_trace or Metric.latency_ms in mb.limits)
    if not need_trace and has_lazy(case.model):  # sizes come from a forward (on a copy)
        need_trace = True
        case.require_example()
    values: dict[Metric, float] = {}
    if need_trace:
        from torchinspect.trace import trace_case

        trace = trace_case(case)
        stats = trace.params
        values[Metric.macs] = float(trace.total_macs)
        values[Metric.activation_mb] = trace.activation_bytes / 1e6
    else:
        from torchinspect.trace.static import collect_static

        _, stats = collect_static(case.model)
    values[Metric.params] = float(stats.total)
    values[Metric.size_mb] = (stats.param_bytes + stats.buffer_bytes) / 1e6
    if Metric.latency_ms in mb.limits:
        values[Metric.latency_ms] = _latency_ms(case)
    results = []
    for metric in Metric:
        if metric not in mb.limits:
            continue
        limit, value = mb.limits[metric], values[metric]
        ok = value <= limit
        result = Measured(metric, limit, value, ok, "")
        shown_value, shown_limit = result.shown()
        result.message = f"{metric.value} {shown_value} {'<=' if ok else '>'} budget {shown_limit}"
        results.append(result)
    model = mb.model if isinstance(mb.model, str) else case.name  # a module: its class name
    return ModelCheck(model, case.name, case.describe_inputs() if case.example is not None else "-",
                      results, time.perf_counter() - start, mb.source)


def _latency_ms(case: Any, timing: Any = None) -> float:
    """Median forward latency (ms) at the example's batch, measured by `inspect bench`'s
    method (its default warm-up and stopping rule unless ``timing`` is given) on the
    requested real device (auto/meta: cpu)."""
    from torchinspect import device as devices
    from torchinspect.bench import BenchOptions, run_bench

    extra = {"timing": timing} if timing is not None else {}
    result = run_bench(case, BenchOptions(device=devices.real_device(case.requested), **extra))
    row = result.configs[0]
    if row.status != "ok" or row.timing is None:
        raise InspectError(f"{case.name}: the latency could not be measured ({row.status}: "
                           f"{row.error or '-'})", hint="run `inspect bench` on it to see why")
    return row.timing.stats.median * 1e3


def check_budgets(models: str | list[str] | None = None, *, max_params: Any = None,
                  max_macs: Any = None, max_size_mb: Any = None, max_activation_mb: Any = None,
                  max_latency_ms: Any = None, config: str | None = None, options: Any = None,
                  cwd: str | None = None) -> CheckResult:
    """Check models against size budgets; ``CheckResult.passed`` is the verdict.

    ``models`` may be empty when ``config`` (or ./pyproject.toml) lists them. Budgets take
    human units: ``max_params="25M"``, ``max_macs="5G"``, ``max_macs=1.5e9``.
    """
    given = {Metric.params: max_params, Metric.macs: max_macs, Metric.size_mb: max_size_mb,
             Metric.activation_mb: max_activation_mb, Metric.latency_ms: max_latency_ms}
    cli = {m: parse_budget(v, m) for m, v in given.items() if v is not None}
    # one name or one module is one model (an nn.Sequential is iterable, over its layers)
    one = isinstance(models, str) or hasattr(models, "named_parameters")
    names = [models] if one else list(models or [])
    chosen, path = plan(names, cli, config=config, cwd=cwd)
    return CheckResult([measure(mb, options) for mb in chosen], path)


# ---------------------------------------------------------------- JUnit


def junit_xml(result: CheckResult) -> str:
    """A JUnit XML document: one testsuite per model, one testcase per budget."""
    import xml.etree.ElementTree as ET

    total = sum(len(m.results) for m in result.models)
    root = ET.Element("testsuites", name="torchinspect check", tests=str(total),
                      failures=str(result.failures), errors="0",
                      time=f"{sum(m.seconds for m in result.models):.3f}")
    for m in result.models:
        fails = sum(not r.passed for r in m.results)
        suite = ET.SubElement(root, "testsuite", name=m.model, tests=str(len(m.results)),
                              failures=str(fails), errors="0", time=f"{m.seconds:.3f}")
        props = ET.SubElement(suite, "properties")
        ET.SubElement(props, "property", name="inputs", value=m.inputs)
        ET.SubElement(props, "property", name="budgets", value=m.source)
        for r in m.results:
            case = ET.SubElement(suite, "testcase", classname=f"torchinspect.check.{m.model}",
                                 name=f"max-{r.metric.value}", time="0")
            if not r.passed:
                fail = ET.SubElement(case, "failure", message=r.message, type="BudgetExceeded")
                fail.text = f"{m.model}: {r.message} (measured {r.value!r}, limit {r.limit!r})"
            else:
                ET.SubElement(case, "system-out").text = r.message
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_junit(result: CheckResult, path: str, *, protect: tuple[str, ...] = ()) -> None:
    """Write the JUnit report atomically (never over one of the ``protect`` input files)."""
    from torchinspect.io.atomic import atomic_write_text

    atomic_write_text(path, junit_xml(result), protect=protect)
