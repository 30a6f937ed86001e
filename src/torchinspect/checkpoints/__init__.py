"""The command cores of `inspect diff` and `inspect convert`, over io/.

* ``sides.py`` — what a spec is (a checkpoint or a model) and the two sides of a diff
  (``diff_specs``); ``diff.py`` — the verdict of a diff and its load code, over the key
  match of io/compare.py (metadata only).
* ``convert.py`` — ``convert_checkpoint``: ``plan_convert`` (plan.py), ``write``
  (write.py, over io/writers.py and io/atomic.py), ``verify`` (verify.py).

May import sources, io and the leaves; never report or cli.
"""

from __future__ import annotations

from torchinspect.checkpoints.convert import convert_checkpoint
from torchinspect.checkpoints.plan import CastDtype, ConvertPlan, ConvertResult, OutputKind
from torchinspect.checkpoints.sides import arch_state_dict, diff_specs, probe, resolve_side

__all__ = ["CastDtype", "ConvertPlan", "ConvertResult", "OutputKind", "arch_state_dict",
           "convert_checkpoint", "diff_specs", "probe", "resolve_side"]
