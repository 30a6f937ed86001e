"""``--compare OLD.json``: the change of each configuration's median against an earlier run
(a fresh run, or a second saved result: ``inspect bench NEW.json --compare OLD.json``).

Configurations are matched by (dtype, batch). A change is called *significant* when it is
larger than ``NOISE_SIGMAS`` combined standard errors of the two medians,
``sqrt(se_old**2 + se_new**2)`` with ``se = median * median_cov`` (see
:mod:`torchinspect.bench.stats`), and larger than ``MIN_CHANGE`` (run-to-run drift that
no within-run statistic sees: clocks, placement, other programs).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from torchinspect.errors import InspectError
from torchinspect.io.jsonfile import number, read_json

SCHEMA_PREFIX = "torchinspect/bench/"
NOISE_SIGMAS = 3.0
MIN_CHANGE = 0.01


@dataclass(frozen=True)
class Change:
    dtype: str
    batch: int | None
    old_median: float | None
    new_median: float | None
    change: float | None  # (new - old) / old
    noise: float | None  # relative band a change must exceed
    verdict: str  # faster | slower | same (within noise) | new | gone | not measured

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def is_saved_result(spec: str) -> bool:
    """Whether a MODEL argument names a saved result (``run.json``) rather than a model: a
    ``.json`` file that is not a sharded checkpoint's ``.index.json``."""
    return spec.lower().endswith(".json") and not spec.lower().endswith(".index.json")


def load_bench_json(path: str, option: str = "--compare") -> dict[str, Any]:
    """A result written by ``inspect bench --format json``; anything else is a usage error
    naming ``option`` and the file."""
    where = f"{option} {path}" if option else path
    hint = "pass a file written by `inspect bench MODEL --format json --output FILE`"
    data = read_json(path, where=where, hint=hint)
    if (not isinstance(data, dict) or not str(data.get("schema", "")).startswith(SCHEMA_PREFIX)
            or not isinstance(data.get("configs"), list)):
        schema = data.get("schema") if isinstance(data, dict) else None
        raise InspectError(f"{where}: not an `inspect bench` JSON result (schema {schema!r})",
                           hint=hint)
    for i, cfg in enumerate(data["configs"]):
        _check_config(cfg, f"{where}: configs[{i}]", hint)
    _check_setup(data, where, hint)
    return data


_SCALAR = (str, int, float, bool, type(None))


def _check_setup(data: dict[str, Any], where: str, hint: str) -> None:
    """What setup_differences reads: the setup keys scalars, ``flags`` an object of scalars,
    ``environment`` an object whose compared keys are scalars (each may be absent)."""
    for key in SETUP_KEYS:
        if not isinstance(data.get(key), _SCALAR):
            raise InspectError(f"{where}: {key} is a {type(data[key]).__name__}, not a value",
                               hint=hint)
    for key in ("flags", "environment"):
        value = data.get(key)
        if value is None:
            continue
        if not isinstance(value, dict):
            raise InspectError(f"{where}: {key} is a {type(value).__name__}, not an object",
                               hint=hint)
        read = ENV_KEYS if key == "environment" else tuple(value)
        bad = next((k for k in read if not isinstance(value.get(k), _SCALAR)), None)
        if bad is not None:
            raise InspectError(f"{where}: {key}.{bad} is a {type(value[bad]).__name__}, not "
                               "a value", hint=hint)


def _check_config(cfg: Any, where: str, hint: str) -> None:
    """The fields a comparison reads, by type and range: a median is a positive finite number
    of seconds, its relative standard error finite and non-negative (or null)."""
    if not isinstance(cfg, dict):
        raise InspectError(f"{where}: not a configuration object", hint=hint)
    if not isinstance(cfg.get("dtype", ""), (str, type(None))) or not (
            cfg.get("batch") is None or number(cfg["batch"], f"{where}.batch", hint, minimum=1,
                                               integer=True, maximum=1e12)):
        raise InspectError(f"{where}: dtype is not a string", hint=hint)
    if cfg.get("status") != "ok" or not cfg.get("timing"):
        return
    timing = cfg["timing"]
    stats = timing.get("stats") if isinstance(timing, dict) else None
    if not isinstance(stats, dict):
        raise InspectError(f"{where}.timing: no stats object", hint=hint)
    number(stats.get("median"), f"{where}.timing.stats.median", hint, positive=True, maximum=1e9)
    if stats.get("median_cov") is not None:
        number(stats["median_cov"], f"{where}.timing.stats.median_cov", hint)


def _median_and_se(cfg: dict[str, Any] | None) -> tuple[float | None, float | None]:
    if not cfg or cfg.get("status") != "ok" or not cfg.get("timing"):
        return None, None
    stats = cfg["timing"]["stats"]
    median = float(stats["median"])
    mc = stats.get("median_cov")
    se = median * float(mc) if mc is not None and math.isfinite(float(mc)) else None
    return median, se


def compare_configs(old: dict[str, Any], new: dict[str, Any]) -> list[Change]:
    """One Change per configuration in either result (new order first)."""
    def key(c: dict[str, Any]) -> tuple[str, int | None]:
        return (str(c.get("dtype")), c.get("batch"))

    old_by = {key(c): c for c in old.get("configs", [])}
    new_by = {key(c): c for c in new.get("configs", [])}
    out = []
    for k in [*new_by, *(k for k in old_by if k not in new_by)]:
        om, ose = _median_and_se(old_by.get(k))
        nm, nse = _median_and_se(new_by.get(k))
        if k not in old_by:
            out.append(Change(k[0], k[1], None, nm, None, None, "new"))
            continue
        if k not in new_by:
            out.append(Change(k[0], k[1], om, None, None, None, "gone"))
            continue
        if om is None or nm is None:
            out.append(Change(k[0], k[1], om, nm, None, None, "not measured"))
            continue
        out.append(Change(k[0], k[1], om, nm, *significance(om, ose, nm, nse)))
    return out


def significance(old: float, old_se: float | None, new: float,
                 new_se: float | None) -> tuple[float, float, str]:
    """``(change, noise, verdict)`` of a new median against an old one: ``change`` is
    ``(new - old) / old``; ``noise`` the relative band it must exceed (``NOISE_SIGMAS``
    combined standard errors, at least ``MIN_CHANGE``); verdict faster | slower | same.
    ``inspect check`` judges latency budgets and baselines by this same rule."""
    change = (new - old) / old
    se = math.sqrt((old_se or 0.0) ** 2 + (new_se or 0.0) ** 2)
    noise = max(NOISE_SIGMAS * se / old, MIN_CHANGE)
    verdict = "same" if abs(change) <= noise else ("slower" if change > 0 else "faster")
    return change, noise, verdict


# what must match for a comparison to measure the code, not the setup
SETUP_KEYS = ("model", "inputs", "device")
ENV_KEYS = ("gpu", "driver", "torch", "cuda", "cudnn", "tf32_matmul", "tf32_cudnn",
            "float32_matmul_precision", "cpu", "torch_threads")


def setup_differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What differs between the two runs besides the code under test: model, inputs, device,
    flags (``--tf32``, ``--channels-last``, ...), GPU, driver, versions, threads. Keys
    missing from an older file are not reported."""
    out = []

    def check(name: str, a: Any, b: Any) -> None:
        if a is not None and b is not None and a != b:
            out.append(f"{name}: {a} -> {b}")

    for k in SETUP_KEYS:
        check(k, old.get(k), new.get(k))
    old_flags, new_flags = old.get("flags") or {}, new.get("flags") or {}
    for k in new_flags:
        if k in old_flags and old_flags[k] != new_flags[k]:
            out.append(f"--{k.replace('_', '-')}: {_flag(old_flags[k])} -> {_flag(new_flags[k])}")
    old_env, new_env = old.get("environment") or {}, new.get("environment") or {}
    for k in ENV_KEYS:
        check(k, old_env.get(k), new_env.get(k))
    return out


def _flag(value: Any) -> str:
    if value is None:
        return "default"
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)
