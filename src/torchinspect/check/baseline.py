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
from typing import Any

from torchinspect import __version__
from torchinspect.check.metrics import Metric, Noise, Reading
from torchinspect.check.records import CheckResult, readings_dict
from torchinspect.errors import InspectError
from torchinspect.io.atomic import Snapshot, atomic_write_text
from torchinspect.io.jsonfile import number, read_json

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


def write_baseline(result: CheckResult, path: str, *, protect: tuple[str, ...] = (),
                   unchanged: Snapshot | None | bool = True) -> None:
    """Write the baseline atomically (never over one of the ``protect`` input files);
    ``unchanged``: the :func:`~torchinspect.io.atomic.snapshot` of ``path`` when the run
    started -- if another run wrote it meanwhile, this one is refused (exit 2)."""
    text = json.dumps(baseline_document(result), indent=2, allow_nan=False) + "\n"
    atomic_write_text(path, text, protect=protect, unchanged=unchanged)


def read_baseline(path: str) -> Baseline:
    """A baseline file, checked: a JSON object of this schema (any other input: exit 2)."""
    data = read_json(path, where=f"--baseline {path}", hint=_HINT)
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
        readings[metric] = Reading(number(value, f"{where}: {key}", _HINT),
                                   _noise(noise.get(key), f"{where}: noise.{key}"))
    env = entry.get("environment")
    return BaselineModel(entry.get("inputs"), readings, env if isinstance(env, dict) else None,
                         entry.get("error") if isinstance(entry.get("error"), str) else None)


def _noise(value: Any, where: str) -> Noise | None:
    if value is None:
        return None
    if not isinstance(value, dict) or not {"iqr", "cov", "median_cov", "n"} <= set(value):
        raise InspectError(f"{where}: expected iqr, cov, median_cov and n", hint=_HINT)
    se = value["median_cov"]  # null when it was infinite (one sample)
    return Noise(number(value["iqr"], f"{where}.iqr", _HINT), number(value["cov"], f"{where}.cov", _HINT),
                 math.inf if se is None else number(se, f"{where}.median_cov", _HINT),
                 int(number(value["n"], f"{where}.n", _HINT, minimum=1, integer=True)))
