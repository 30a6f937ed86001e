"""Baseline files: every metric of every model, saved by ``check --save-baseline FILE`` and
compared against by ``check --baseline FILE`` (versioned JSON, written atomically).

    {"schema": "torchinspect/check-baseline/v1", "created": "...", "torch": "2.x", ...,
     "models": {"resnet18": {"inputs": "1,3,224,224",
                             "metrics": {"params": 11689512, "macs": 1814073344, ...,
                                         "latency-ms": 4.1},
                             "noise": {"latency-ms": {"iqr": 0.1, "cov": 0.02, ...}},
                             "environment": {...}}}}

Metrics unknown to this version (written by a newer one) are skipped when read.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from torchinspect import __version__
from torchinspect.check.metrics import Metric, Noise, Reading
from torchinspect.check.records import CheckResult, readings_dict
from torchinspect.errors import InspectError
from torchinspect.io.atomic import atomic_write_text

SCHEMA = "torchinspect/check-baseline/v1"
_PREFIX = "torchinspect/check-baseline/v"
_HINT = "pass a file written by `inspect check --save-baseline FILE`"


@dataclass
class BaselineModel:
    inputs: str | None
    readings: dict[Metric, Reading] = field(default_factory=dict)
    environment: dict[str, Any] | None = None
    error: str | None = None


@dataclass
class Baseline:
    path: str
    models: dict[str, BaselineModel]
    created: str | None = None


def baseline_document(result: CheckResult) -> dict[str, Any]:
    """The JSON document of a baseline: every reading of every model (errors kept as such)."""
    import torch

    models: dict[str, Any] = {}
    for m in result.models:
        entry: dict[str, Any] = {"inputs": m.inputs,
                                 "metrics": readings_dict(m.readings)}
        noise = {k.value: {f: v if not isinstance(v, float) or math.isfinite(v) else None
                           for f, v in r.noise.to_dict().items()}
                 for k, r in m.readings.items() if r.noise}
        if noise:
            entry["noise"] = noise
        if m.environment:
            entry["environment"] = m.environment
        if m.error:
            entry["error"] = m.error
        models[m.model] = entry
    return {"schema": SCHEMA, "created": datetime.now(UTC).isoformat(timespec="seconds"),
            "torchinspect": __version__, "torch": torch.__version__,
            "config": os.path.basename(result.config) if result.config else None,
            "models": models}


def write_baseline(result: CheckResult, path: str, *, protect: tuple[str, ...] = ()) -> None:
    """Write the baseline atomically (never over one of the ``protect`` input files)."""
    text = json.dumps(baseline_document(result), indent=2, allow_nan=False) + "\n"
    atomic_write_text(path, text, protect=protect)


def read_baseline(path: str) -> Baseline:
    """A baseline file, checked: a JSON object of this schema (any other input: exit 2)."""
    p = Path(path)
    if not p.is_file():
        raise InspectError(f"--baseline {path}: {'is a folder' if p.is_dir() else 'no such file'}",
                           hint=_HINT)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InspectError(f"--baseline {path}: not JSON ({exc})", hint=_HINT) from None
    schema = data.get("schema") if isinstance(data, dict) else None
    if not isinstance(schema, str) or not schema.startswith(_PREFIX):
        raise InspectError(f"--baseline {path}: not a check baseline (schema {schema!r})", hint=_HINT)
    if schema != SCHEMA:
        raise InspectError(f"--baseline {path}: schema {schema} is newer than this torchinspect "
                           f"reads ({SCHEMA})", hint="update torchinspect, or save the baseline "
                           "again with this version")
    models = data.get("models")
    if not isinstance(models, dict):
        raise InspectError(f"--baseline {path}: 'models' is not an object", hint=_HINT)
    return Baseline(path, {str(k): _model(v, f"--baseline {path}: {k}") for k, v in models.items()},
                    data.get("created"))


def _model(entry: Any, where: str) -> BaselineModel:
    if not isinstance(entry, dict) or not isinstance(entry.get("metrics", {}), dict):
        raise InspectError(f"{where}: not a model entry", hint=_HINT)
    noise = entry.get("noise")
    if not isinstance(noise, dict):
        noise = {}
    readings: dict[Metric, Reading] = {}
    for key, value in entry.get("metrics", {}).items():
        try:
            metric = Metric(key)
        except ValueError:
            continue  # a metric of a newer version
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise InspectError(f"{where}: {key} = {value!r} is not a number", hint=_HINT)
        readings[metric] = Reading(float(value), _noise(noise.get(key), f"{where}: noise.{key}"))
    env = entry.get("environment")
    return BaselineModel(entry.get("inputs"), readings, env if isinstance(env, dict) else None,
                         entry.get("error") if isinstance(entry.get("error"), str) else None)


def _noise(value: Any, where: str) -> Noise | None:
    if value is None:
        return None
    try:
        se = value["median_cov"]  # null when it was infinite (one sample)
        return Noise(float(value["iqr"]), float(value["cov"]),
                     math.inf if se is None else float(se), int(value["n"]))
    except (TypeError, KeyError, ValueError):
        raise InspectError(f"{where}: expected iqr, cov, median_cov and n", hint=_HINT) from None
