"""Commands that never compile keep TorchDynamo unimported (src/torchinspect/nodynamo.py,
sources/build.py, sources/torchvision.py): each check runs in a fresh interpreter, since
this test process may have imported TorchDynamo already."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _fresh(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


@pytest.mark.slow
def test_a_prediction_imports_no_dynamo_and_compiling_after_it_still_works():
    out = _fresh(
        "import sys, torch\n"
        "from torchinspect.latency import predict_latency\n"
        "p = predict_latency('resnet18', 'h100', dtypes=('bf16',), batches=(1,))\n"
        "print('torch._dynamo' in sys.modules, p.results[0].gpu_ms > 0)\n"
        "import torch._dynamo\n"  # the real one, after: the wrappers defer to it now
        "x = torch.empty(1, 8, 4, 4, device='meta'); m = torch.empty(8, device='meta')\n"
        "torch.nn.functional.batch_norm(x, m, m, m, m, False)\n"
        "print(type(sys.modules['torch._dynamo']).__name__)\n")
    assert out.splitlines() == ["False True", "module"]


def test_the_stand_in_runs_functions_and_hands_other_names_to_the_real_module():
    out = _fresh(
        "import sys, torch\n"
        "from torchinspect.nodynamo import deferred_dynamo\n"
        "with deferred_dynamo():\n"
        "    d = sys.modules['torch._dynamo'].disable(lambda a: a + 1)\n"
        "    print(d(1), 'torch._dynamo.eval_frame' in sys.modules)\n"
        "    print(callable(torch._dynamo.is_compiling))\n"  # any other name: the real one
        "print(type(sys.modules['torch._dynamo']).__name__, d(2))\n")
    assert out.splitlines() == ["2 False", "True", "module 3"]


@pytest.mark.slow
def test_torchvision_models_import_without_dynamo_and_roi_align_still_runs():
    out = _fresh(
        "import sys, torch\n"
        "from torchinspect.sources.torchvision import torchvision_models\n"
        "tvm = torchvision_models()\n"
        "print('torch._dynamo' in sys.modules, 'resnet18' in tvm.list_models())\n"
        "from torchvision.ops import roi_align\n"
        "torch.use_deterministic_algorithms(True)\n"
        "x = roi_align(torch.ones(1, 1, 8, 8), [torch.tensor([[0., 0., 4., 4.]])], 2)\n"
        "print(tuple(x.shape))\n"
        "ra = sys.modules['torchvision.ops.roi_align']\n"  # its deferred function
        "print(ra.is_compile_supported('cpu'), 'torch._dynamo' in sys.modules)\n")
    assert out.splitlines() == ["False True", "(1, 1, 2, 2)", "True True"]


def test_model_code_importing_a_dynamo_submodule_inside_the_block_gets_the_real_one():
    # model code (Hugging Face's among it) imports torch._dynamo's submodules: the stand-in
    # is not a package, so the import must hand over to the real TorchDynamo, not fail
    out = _fresh(
        "import sys, torch\n"
        "from torchinspect.nodynamo import deferred_dynamo\n"
        "with deferred_dynamo():\n"
        "    import torch._dynamo.utils as u\n"
        "    from torch._dynamo.external_utils import is_compiling\n"
        "    print(u.__name__, type(sys.modules['torch._dynamo']).__name__, is_compiling())\n"
        "print(type(sys.modules['torch._dynamo']).__name__)\n")
    assert out.splitlines() == ["torch._dynamo.utils module False", "module"]


def test_a_summary_trace_imports_no_dynamo():
    out = _fresh(
        "import sys\n"
        "from torchinspect.analysis.summary import summarize\n"
        "s = summarize('resnet18', '3,64,64')\n"
        "print('torch._dynamo' in sys.modules, s.totals.params > 0)\n")
    assert out.splitlines() == ["False True"]
