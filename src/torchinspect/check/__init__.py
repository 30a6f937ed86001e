"""``inspect check``: size budgets and baselines for CI (params, MACs, weight size,
activations, latency).

Budgets come from the command line (``--max-params 25M``), from the nearest
``pyproject.toml`` with a ``[tool.torchinspect.check]`` table (see ``.config``) or from
``--config FILE``; the command line wins. A baseline (``--save-baseline FILE``) keeps every
metric of every model; ``--baseline FILE --max-increase params=2%`` fails a model that grew
more. Every model is checked, and one that cannot be built or run is reported as an error
rather than stopping the others. The phases::

    plan = plan_check(...)          # config, limits, baseline: every usage error is here
    result = run_check(plan, opts)  # measure each model (meta first), judge its readings
    write_junit(result, path); write_baseline(result, path)
"""

from __future__ import annotations

from typing import Any

from torchinspect.check.baseline import SCHEMA, Baseline, read_baseline, write_baseline
from torchinspect.check.config import ModelBudget, discover_config, load_config
from torchinspect.check.judge import judge, result_notes
from torchinspect.check.junit import junit_error_xml, junit_xml, write_junit
from torchinspect.check.measure import COLLECTORS, measure_model, time_forward
from torchinspect.check.metrics import (
    Metric,
    Need,
    Noise,
    Reading,
    Unit,
    fmt_value,
    metric_named,
    parse_budget,
    parse_increases,
)
from torchinspect.check.plan import CheckPlan, budget_notes, cli_limits, plan_check
from torchinspect.check.records import CheckResult, Kind, Measured, ModelCheck

__all__ = [
    "COLLECTORS", "SCHEMA", "Baseline", "CheckPlan", "CheckResult", "Kind", "Measured", "Metric",
    "ModelBudget", "ModelCheck", "Need", "Noise", "Reading", "Unit", "budget_notes",
    "check_budgets", "cli_limits",
    "discover_config", "fmt_value", "junit_error_xml", "junit_xml", "load_config",
    "measure_model", "parse_budget", "parse_increases", "plan_check", "read_baseline",
    "run_check", "time_forward", "write_baseline", "write_junit",
]


def run_check(plan: CheckPlan, options: Any = None, progress: Any = None) -> CheckResult:
    """Measure and judge every model of the plan (a model that fails is an error row)."""
    checks = []
    for i, mb in enumerate(plan.models):
        if progress is not None:
            progress(f"checking {mb.model} ({i + 1}/{len(plan.models)})")
        check = measure_model(mb, plan.metrics_for(mb), options, plan.gpu_for(mb))
        judge(check, mb, plan)
        checks.append(check)
    result = CheckResult(checks, plan.config, plan.baseline.path if plan.baseline else None)
    result.notes = result_notes(result, plan)
    return result


def check_budgets(models: Any = None, *, max_params: Any = None, max_macs: Any = None,
                  max_size_mb: Any = None, max_activation_mb: Any = None,
                  max_latency_ms: Any = None, max_infer_mb: Any = None,
                  max_train_mb: Any = None, max_step_ms: Any = None,
                  config: str | None = None, options: Any = None,
                  cwd: str | None = None, baseline: str | None = None,
                  max_increase: str | dict[Metric, float] | None = None, latency: bool = False,
                  save_baseline: str | None = None,
                  budgets: dict[str, Any] | None = None) -> CheckResult:
    """Check models against size budgets; ``CheckResult.passed`` is the verdict.

    ``models`` may be empty when ``config`` (or the nearest pyproject.toml) lists them.
    Budgets take human units: ``max_params="25M"``, ``max_macs="5G"``, ``max_macs=1.5e9``.
    ``baseline="main.json", max_increase="params=2%"`` compares with a saved baseline;
    ``save_baseline="main.json"`` writes one (every metric; latency with ``latency=True``).
    ``budgets={"trainable": "10M"}`` budgets any metric by its key.
    """
    given = {Metric.params: max_params, Metric.macs: max_macs, Metric.size_mb: max_size_mb,
             Metric.activation_mb: max_activation_mb, Metric.latency_ms: max_latency_ms,
             Metric.infer_mb: max_infer_mb, Metric.train_mb: max_train_mb,
             Metric.step_ms: max_step_ms}
    for key, value in (budgets or {}).items():
        given[metric_named(key, "budgets")] = value
    # one name or one module is one model (an nn.Sequential is iterable, over its layers)
    one = isinstance(models, str) or hasattr(models, "named_parameters")
    names = [models] if one else list(models or [])
    plan = plan_check(names, cli_limits(given), config=config, cwd=cwd, baseline=baseline,
                      max_increase=max_increase, save=save_baseline is not None, latency=latency,
                      notes=budget_notes(given))
    result = run_check(plan, options)
    if save_baseline is not None:
        write_baseline(result, save_baseline)
    return result
