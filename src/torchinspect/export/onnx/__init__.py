"""ONNX export that is checked and verified, not hoped for.

:func:`export_onnx` exports with ``torch.onnx.export(dynamo=True)`` (the torch.export-based
exporter; ``legacy=True`` for the TorchScript one), batch dimension dynamic unless
``static``, saves atomically (external data beside the file for models over 2 GB), runs
``onnx.checker.check_model(full_check=True)`` and, with ``verify``, runs the file in
onnxruntime at batch 1 and 3 and compares every output with PyTorch on the same inputs.

* :mod:`.plan` -- checks before any work, dynamic shapes, names; :class:`ExportPlan`
* :mod:`.write` -- run the exporter, save the file, its data and the exporter's report
* :mod:`.explain` -- one line naming the op or construct that made an export fail
* :mod:`.describe` -- ``onnx.checker`` and what the file holds
* :mod:`.verify` -- onnxruntime against PyTorch
* :mod:`.quiet` -- exporter logs and C++ stdout kept off the terminal
* :mod:`.pipeline` -- :func:`export_onnx`, the phases in order

The core returns an :class:`ExportResult` and never prints.
"""

from torchinspect.export.onnx.explain import explain_failure
from torchinspect.export.onnx.pipeline import export_onnx
from torchinspect.export.onnx.plan import ExportPlan, parse_dynamic
from torchinspect.export.onnx.result import ExportResult, IOInfo, OutputDiff, VerifyRun
from torchinspect.export.onnx.verify import VERIFY_BATCHES

__all__ = ["VERIFY_BATCHES", "ExportPlan", "ExportResult", "IOInfo", "OutputDiff", "VerifyRun",
           "explain_failure", "export_onnx", "parse_dynamic"]
