"""Commands that never compile keep TorchDynamo unimported (src/torchinspect/privtorch.py,
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


@pytest.mark.slow
def test_the_stand_in_runs_functions_and_hands_other_names_to_the_real_module():
    out = _fresh(
        "import sys, torch\n"
        "from torchinspect.privtorch import deferred_dynamo\n"
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


@pytest.mark.slow
def test_model_code_importing_a_dynamo_submodule_inside_the_block_gets_the_real_one():
    # model code (Hugging Face's among it) imports torch._dynamo's submodules: the stand-in
    # is not a package, so the import must hand over to the real TorchDynamo, not fail
    out = _fresh(
        "import sys, torch\n"
        "from torchinspect.privtorch import deferred_dynamo\n"
        "with deferred_dynamo():\n"
        "    import torch._dynamo.utils as u\n"
        "    from torch._dynamo.external_utils import is_compiling\n"
        "    print(u.__name__, type(sys.modules['torch._dynamo']).__name__, is_compiling())\n"
        "print(type(sys.modules['torch._dynamo']).__name__)\n")
    assert out.splitlines() == ["torch._dynamo.utils module False", "module"]


@pytest.mark.slow
def test_a_summary_trace_imports_no_dynamo():
    out = _fresh(
        "import sys\n"
        "from torchinspect.analysis.summary import summarize\n"
        "s = summarize('resnet18', '3,64,64')\n"
        "print('torch._dynamo' in sys.modules, s.totals.params > 0)\n")
    assert out.splitlines() == ["False True"]


_HELPER = """
import torch


class Helper:
    '''a method torch.compile must skip: decorated where the model's factory imports it'''

    @torch.compiler.disable
    def scale(self, x):
        return x * 2
"""

_NET = """
import torch
from torch import nn


class Net(nn.Module):
    example_input = "1,4"

    def __init__(self):
        super().__init__()
        import dyn_helper  # first imported during the (meta) build
        self.helper = dyn_helper.Helper()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.helper.scale(self.fc(x))
"""


def _compile_disabled_files(tmp_path) -> str:
    (tmp_path / "dyn_helper.py").write_text(_HELPER)
    (tmp_path / "dyn_net.py").write_text(_NET)
    return f"{tmp_path / 'dyn_net.py'}:Net"


@pytest.mark.slow
def test_a_method_decorated_compiler_disable_works_through_the_cli_the_api_and_after(tmp_path):
    """The stand-in's object had no ``__get__``: ``self`` was never bound, and ``inspect``
    ended with exit 2 and a misleading "check --input" hint; through the Python API the
    user's class stayed broken after ``summarize()`` returned. Now the CLI runs it, the API
    too, the class works after, compiles (the method skipped as the decorator says), and the
    stand-in left nothing cached on torch's own functions. One fresh interpreter (TorchDynamo
    must not be imported yet): the CLI through its Typer app, then the API."""
    spec = _compile_disabled_files(tmp_path)
    out = _fresh(
        "import gc, json, os, sys, torch\n"
        f"os.chdir({str(tmp_path)!r}); sys.path.insert(0, {str(tmp_path)!r})\n"
        "from typer.testing import CliRunner\n"
        "from torchinspect.cli.app import app\n"
        f"r = CliRunner().invoke(app, ['summary', {spec!r}, '-f', 'json'])\n"
        "print(r.exit_code, json.loads(r.stdout)['totals']['params'], 'torch._dynamo' in sys.modules)\n"
        "sys.modules.pop('dyn_helper', None)\n"  # imported again by the API's build
        "import torchinspect\n"
        f"s = torchinspect.summarize({spec!r})\n"
        "print(s.totals.params, 'torch._dynamo' in sys.modules)\n"
        "import dyn_helper\n"
        "h = dyn_helper.Helper()\n"
        "print(h.scale(3), dyn_helper.Helper.scale.__name__)\n"
        "left = [o for o in gc.get_objects() if callable(o) and\n"
        "        type(getattr(o, '__dynamo_disable', None)).__name__ == '_Deferred']\n"
        "print(len(left))\n"
        "f = torch.compile(lambda x: h.scale(x) + 1, backend='eager')\n"
        "print(f(torch.ones(2)).tolist())\n")
    assert out.splitlines() == ["0 20 False", "20 False", "6 scale", "0", "[3.0, 3.0]"]
