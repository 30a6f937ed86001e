"""Where budgets come from: ``[tool.torchinspect.check]`` in the nearest ``pyproject.toml``
(found walking up from the current folder, as pytest and ruff find theirs) or ``--config
FILE``; model paths in it are relative to that file's folder.

Config format (TOML)::

    [tool.torchinspect.check]          # defaults for every model ("[check]" or top level
    max-params = "30M"                 #  in a standalone --config file works too)
    max-macs = "5G"

    [tool.torchinspect.check.increase]  # allowed growth against --baseline FILE
    params = "2%"
    macs = "5%"

    [[tool.torchinspect.check.models]]
    model = "resnet50"
    max-size-mb = 110

    [[tool.torchinspect.check.models]]
    model = "models/net.py:Net"         # relative to the folder of this file
    input = "1,28,28"                   # like --input: a batch of 1 is prepended
    max-params = "100K"

Models that need no settings of their own can be a list of names instead of the tables:
``models = ["resnet50", "models/net.py:Net"]`` (under ``[tool.torchinspect.check]``).
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchinspect.check.metrics import (
    Metric,
    budget_note,
    metric_named,
    parse_budget,
    parse_percent,
)
from torchinspect.errors import InspectError, file_kind
from torchinspect.sources import pyspec

TABLE = "[tool.torchinspect.check]"
OPTION_KEYS = {"input", "arg", "args", "arch", "weights", "key", "batch", "no-batch",
               "weights-config", "trust-pickle", "strict"}
_PREFIXES = ("zoo:", "hf:", "timm:")


@dataclass
class ModelBudget:
    """One model to check: as written (its name in tables and baselines), what is loaded,
    model options, and limits by metric with where each came from."""

    model: Any
    limits: dict[Metric, float] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)  # input, arg, arch, weights, batch, ...
    source: str = "command line"  # the config file that lists it
    origins: dict[Metric, str] = field(default_factory=dict)  # "pyproject.toml", "--max-params"
    spec: Any = None  # the model resolved against the config's folder (None: ``model``)
    above: bool = False  # listed by a config found above the current folder

    @property
    def target(self) -> Any:
        return self.spec if self.spec is not None else self.model


@dataclass
class CheckConfig:
    path: str
    defaults: dict[Metric, float]
    entries: list[ModelBudget]
    increase: dict[Metric, float]
    #: found walking up from the current folder (not this folder, not --config FILE): it
    #: gives budgets only to models named on the command line, never options or weights
    above: bool = False
    notes: list[str] = field(default_factory=list)  # how its budgets were read

    @property
    def label(self) -> str:
        """How the Budget column names it: ``pyproject.toml``, ``budgets.toml``."""
        return os.path.basename(self.path)


def _read_toml(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise InspectError(f"{path}: not valid TOML ({exc})", hint="fix the file's syntax") from None
    except OSError as exc:
        raise InspectError(f"{path}: cannot read ({exc.strerror})", hint="check the path") from None


def _check_table(doc: dict[str, Any], path: str, *, standalone: bool) -> dict[str, Any] | None:
    table = doc.get("tool", {}).get("torchinspect", {}).get("check")
    if table is None and standalone:
        table = doc.get("check", doc if ("models" in doc or any(
            k.startswith("max-") for k in doc)) else None)
    if table is not None and not isinstance(table, dict):
        raise InspectError(f"{path}: {TABLE} must be a table",
                           hint="see `inspect check --help` for the format")
    return table


def discover_config(cwd: str | None = None) -> str | None:
    """The nearest pyproject.toml with a ``[tool.torchinspect.check]`` table, from ``cwd``
    up to the file system's root (files without the table are passed over)."""
    start = Path(os.path.abspath(cwd or os.getcwd()))
    for folder in (start, *start.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file() and _check_table(_read_toml(str(candidate)), str(candidate),
                                                standalone=False) is not None:
            return str(candidate)
    return None


def load_config(path: str | None, cwd: str | None = None) -> CheckConfig | None:
    """The check table of ``--config FILE``, else of the nearest pyproject.toml with one."""
    standalone = path is not None
    if path is None:
        path = discover_config(cwd)
        if path is None:
            return None
    elif not os.path.isfile(path):
        what = "is a folder" if os.path.isdir(path) else \
            f"is {file_kind(os.stat(path).st_mode)}, not a regular file" if os.path.exists(path) \
            else "no such file"
        raise InspectError(f"--config {path}: {what}", hint="pass a TOML file (e.g. pyproject.toml)")
    table = _check_table(_read_toml(path), path, standalone=standalone)
    if table is None:
        raise InspectError(f"--config {path}: no {TABLE} table",
                           hint=f"add {TABLE} with max-params = \"25M\" ...")
    config = _parse_table(path, table)
    here = Path(os.path.abspath(cwd or os.getcwd()))
    config.above = not standalone and Path(os.path.abspath(path)).parent != here
    for entry in config.entries:
        entry.above = config.above
    return config


def _limits(table: dict[str, Any], where: str, notes: list[str]) -> dict[Metric, float]:
    out: dict[Metric, float] = {}
    for key, value in table.items():
        if key.startswith(("max-", "max_")):
            try:
                metric = Metric(key[4:].replace("_", "-"))
            except ValueError:
                raise InspectError(f"{where}: unknown budget {key!r}",
                                   hint="use " + ", ".join(f"max-{m.value}" for m in Metric)) from None
            out[metric] = parse_budget(value, metric, where=f"{where}: {key}")
            notes += [n for n in [budget_note(value, metric, f"{where}: {key}")] if n]
    return out


def _parse_table(path: str, table: dict[str, Any]) -> CheckConfig:
    unknown = [k for k in table if k not in ("models", "increase") and not k.startswith(("max-", "max_"))]
    if unknown:
        raise InspectError(f"{path}: unknown key {unknown[0]!r} in {TABLE}",
                           hint="use max-* budgets, an [increase] table and "
                           "[[tool.torchinspect.check.models]] entries")
    notes: list[str] = []
    defaults = _limits({k: v for k, v in table.items() if k not in ("models", "increase")}, path,
                       notes)
    increase = table.get("increase", {})
    if not isinstance(increase, dict):
        raise InspectError(f"{path}: 'increase' must be a table",
                           hint='use [tool.torchinspect.check.increase] with params = "2%"')
    allowed = {metric_named(k, f"{path}: [increase]"): parse_percent(v, f"{path}: [increase] {k} =")
               for k, v in increase.items()}
    entries = table.get("models", [])
    if not isinstance(entries, list):
        raise InspectError(f"{path}: 'models' must be a list of names or an array of tables",
                           hint='use models = ["resnet50", "nets.py:Net"], or '
                           '[[tool.torchinspect.check.models]] with model = "resnet50"')
    # models = ["resnet50", "nets.py:Net"]: names, the default budgets for each
    entries = [{"model": e} if isinstance(e, str) else e for e in entries]
    config = CheckConfig(path, defaults, [], allowed, notes=notes)
    config.entries = [_entry(entry, f"{path}: models[{i}]", config) for i, entry in enumerate(entries)]
    return config


def _entry(entry: Any, where: str, config: CheckConfig) -> ModelBudget:
    if not isinstance(entry, dict) or not isinstance(entry.get("model"), str):
        raise InspectError(f"{where} needs model = \"NAME\"",
                           hint='e.g. model = "resnet50" in a [[tool.torchinspect.check.models]] '
                           'table, or a name in models = ["resnet50"]')
    base = os.path.dirname(os.path.abspath(config.path))
    opts: dict[str, Any] = {}
    for key, value in entry.items():
        k = key.replace("_", "-")
        if k == "model" or k.startswith("max-"):
            continue
        if k not in OPTION_KEYS:
            raise InspectError(f"{where}: unknown key {key!r}",
                               hint="model entries take model, max-*, " + ", ".join(sorted(OPTION_KEYS)))
        opts["arg" if k == "args" else k] = value
    for k in ("arch", "weights"):
        if isinstance(opts.get(k), str):
            opts[k] = relative_to(opts[k], base)
    opts["python-path"] = [base]  # pkg.mod:Name imports from the config's folder too
    # (trust-pickle here takes effect only with --trust-pickle on the command line:
    # analysis/check/measure.py:options_for; python-path is not a key a config may set)
    limits = {**config.defaults, **_limits(entry, where, config.notes)}
    return ModelBudget(entry["model"], limits, opts, config.path,
                       dict.fromkeys(limits, config.label), relative_to(entry["model"], base))


def relative_to(spec: str, base: str) -> str:
    """A model, --arch or --weights text with its file path made relative to ``base`` (the
    config's folder); names (resnet50, zoo:convnet, pkg.mod:Name) are kept as they are."""
    if spec.startswith(_PREFIXES):
        return spec
    ps = pyspec.parse(spec)
    if ps is not None:
        return f"{os.path.join(base, ps.target)}:{ps.attr}" if ps.is_file else spec
    joined = os.path.join(base, spec)
    return joined if os.path.exists(joined) or "/" in spec or os.sep in spec else spec
