"""Private torch in one place (src/torchinspect/privtorch.py): nothing else names it, every
aten override is put back (the CPU attention kernel after summary and memory predictions),
torch.compile still works after a summary in the same process, two threads' overrides do
not meet, and the off switch turns the time-saving workarounds off."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

from torchinspect import privtorch

ROOT = Path(__file__).resolve().parents[1]
# torch's private methods we call on its objects (their receivers are not named torch)
PRIVATE_METHODS = {"_destroy", "_should_skip_dynamo", "_op_dk", "_disable_dynamo"}


def _private(dotted: str) -> bool:
    return any(p.startswith("_") and not p.startswith("__") for p in dotted.split("."))


def private_torch(code: str) -> list[str]:
    """Every use of private torch in ``code``: imports of (or from) a private torch module, a
    private name imported from torch, ``torch...._x`` reached through an attribute chain
    (torch's aten ops, ``torch.ops.aten._x``, are the op table's vocabulary and left out), and
    :data:`PRIVATE_METHODS` called on anything."""
    tree = ast.parse(code)
    names, found = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "torch":
                    names.add(a.asname or "torch")
                    if _private(a.name):
                        found.append(f"{node.lineno}: import {a.name}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch":
            module = node.module or ""
            found += [f"{node.lineno}: from {module} import {a.name}" for a in node.names
                      if _private(module) or _private(a.name)]
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        if node.attr in PRIVATE_METHODS:
            found.append(f"{node.lineno}: .{node.attr}")
            continue
        chain, base = [node.attr], node.value
        while isinstance(base, ast.Attribute):
            chain.append(base.attr)
            base = base.value
        chain.reverse()
        first = next((i for i, p in enumerate(chain) if _private(p)), None)
        if isinstance(base, ast.Name) and base.id in names and chain[0] != "ops" \
                and first == len(chain) - 1:  # reported once, where the private part is
            found.append(f"{node.lineno}: torch.{'.'.join(chain)}")
    return found


def test_the_reader_sees_every_form():
    code = ("import torch\nimport torch._dynamo\nfrom torch._C import X\n"
            "from torch.utils import _pytree\nfrom torch.utils._pytree import tree_leaves\n"
            "torch._C._dispatch_dump('x')\nlib._destroy()\ntorch.ops.aten._safe_softmax\n"
            "torch.__version__\ntorch.nn.functional.relu\n")
    assert sorted(private_torch(code)) == [
        "2: import torch._dynamo", "3: from torch._C import X", "4: from torch.utils import _pytree",
        "5: from torch.utils._pytree import tree_leaves", "6: torch._C", "7: ._destroy"]


def test_no_module_but_privtorch_touches_private_torch():
    found = []
    for base in (ROOT / "src" / "torchinspect", ROOT / "models_zoo"):
        for path in sorted(base.rglob("*.py")):
            if path.name != "privtorch.py":
                found += [f"{path.relative_to(ROOT)}:{hit}" for hit in
                          private_torch(path.read_text())]
    assert found == [], ("private torch outside src/torchinspect/privtorch.py (add an accessor "
                         "there):\n" + "\n".join(found))


# ---------------------------------------------------------------- overrides put back

OVERRIDDEN = ("aten::scaled_dot_product_attention", "aten::dropout", "aten::rms_norm",
              "aten::lstm", "aten::mm", "aten::addmm")


def _kernels() -> dict[str, str]:
    return {op: privtorch.registrations(op) for op in OVERRIDDEN}


class _Ops(privtorch.QuietDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def _cpu_attention() -> tuple[list[str], torch.Tensor]:
    """The ops the CPU's scaled_dot_product_attention runs, and its value."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 8, 16, generator=g) for _ in range(3))
    with _Ops() as seen:
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    return seen.ops, out


@pytest.mark.slow
def test_after_summarize_and_memory_predictions_the_cpu_kernels_are_the_original_again():
    from torchinspect import predict_memory, summarize

    before, (ops, value) = _kernels(), _cpu_attention()
    assert any("_scaled_dot_product_flash_attention_for_cpu" in op for op in ops), ops
    summary = summarize("zoo:gpt-tiny")  # its memory line runs the overriding forward
    assert summary.totals.memory_gpu
    assert _kernels() == before
    predict_memory("zoo:gpt-tiny", batch=1)  # inference and a training step, fake tensors
    predict_memory("zoo:gpt-tiny", batch=1, amp="bf16")  # CUDA's autocast lists on the CPU
    assert _kernels() == before
    again_ops, again = _cpu_attention()
    assert again_ops == ops and torch.equal(again, value)


def test_an_override_is_removed_when_its_block_fails():
    before = privtorch.registrations("aten::dropout")
    with pytest.raises(RuntimeError, match="inside"), privtorch.aten_overrides() as overrides:
        overrides.impl("dropout", lambda x, p, train: x)
        assert privtorch.registrations("aten::dropout") != before
        raise RuntimeError("inside")
    assert privtorch.registrations("aten::dropout") == before


def _other_thread(fn):
    """``fn()`` run in a thread of its own: its value, or its exception raised here."""
    out: list[object] = []

    def run() -> None:
        try:
            out.append(("value", fn()))
        except Exception as exc:  # noqa: BLE001 - handed to the test's thread
            out.append(("error", exc))

    t = threading.Thread(target=run)
    t.start()
    t.join(60)
    kind, value = out[0]
    if kind == "error":
        raise value  # type: ignore[misc]
    return value


def _real_ops() -> dict[str, torch.Tensor]:
    """The values of the overridden ops (and of the patched fast paths) on real CPU tensors."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 8, 16) for _ in range(3))
    x = torch.randn(3, 5, 16)
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True).eval()
    lstm = torch.nn.LSTM(16, 8, batch_first=True)
    with torch.no_grad():
        return {
            "attention": torch.nn.functional.scaled_dot_product_attention(q, k, v),
            "rms_norm": torch.nn.functional.rms_norm(x, (16,), torch.full((16,), 2.0), 1e-6),
            "dropout": torch.nn.functional.dropout(x, 0.0, training=True),
            "lstm": lstm(x)[0], "encoder (fast path)": layer(x)}


def test_another_thread_computes_torchs_own_values_while_a_prediction_overrides():
    from torchinspect.memory.autocast import cuda_autocast_on_cpu
    from torchinspect.memory.kernels import cuda_kernels

    expected = _real_ops()
    with cuda_kernels(), cuda_autocast_on_cpu(torch.bfloat16):
        got = _other_thread(_real_ops)
        with torch.autocast("cpu", dtype=torch.bfloat16):  # (autocast: the thread's own)
            other_autocast = _other_thread(
                lambda: torch.mm(torch.ones(2, 2), torch.ones(2, 2)).dtype)
    for name, value in expected.items():
        torch.testing.assert_close(got[name], value, rtol=1e-4, atol=1e-5, msg=name)
    assert other_autocast == torch.float32  # autocast is off in that thread: no cast


def test_the_predicting_thread_gets_the_gpus_route_and_another_thread_torchs():
    from torchinspect.memory.kernels import cuda_kernels

    def attention_ops() -> list[str]:
        q, k, v = (torch.empty(1, 2, 8, 16, device="meta") for _ in range(3))
        with _Ops() as seen:
            torch.nn.functional.scaled_dot_product_attention(q, k, v)
        return seen.ops

    with cuda_kernels():
        here, there = attention_ops(), _other_thread(attention_ops)
    assert any("efficient_attention" in op for op in here), here  # CUDA's choice for fp32
    assert not any("efficient_attention" in op for op in there), there


def test_two_threads_take_the_overrides_one_at_a_time():
    entered, release, order = threading.Event(), threading.Event(), []

    def first() -> None:
        with privtorch.aten_overrides() as overrides:
            overrides.impl("dropout", lambda x, p, train: x)
            order.append("first in")
            entered.set()
            release.wait(10)
            order.append("first out")

    def second() -> None:
        entered.wait(10)
        with privtorch.aten_overrides() as overrides:
            overrides.impl("dropout", lambda x, p, train: x * 0)
            order.append("second in")

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    entered.wait(10)
    threads[1].join(0.3)  # the second is waiting for the first's block to end
    assert order == ["first in"]
    release.set()
    for t in threads:
        t.join(10)
    assert order == ["first in", "first out", "second in"]
    with privtorch.aten_overrides(), privtorch.aten_overrides():  # nested in one thread
        pass


# ---------------------------------------------------------------- TorchDynamo


def _fresh(code: str, **env: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, check=False, env={**os.environ, **env})
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()


@pytest.mark.slow
def test_torch_compile_really_runs_after_summarize_in_the_same_process():
    out = _fresh(
        "import sys, torch\n"
        "from torchinspect import summarize\n"
        "summarize('zoo:gpt-tiny')\n"
        "print('torch._dynamo' in sys.modules)\n"
        "graphs = []\n"
        "def backend(gm, example_inputs):\n"
        "    graphs.append(gm)\n"
        "    return gm.forward\n"
        "def f(x):\n"
        "    return torch.nn.functional.gelu(x) * 2 + 1\n"
        "x = torch.randn(4, 8)\n"
        "y = torch.compile(f, backend=backend)(x)\n"
        "print(len(graphs), torch.allclose(y, f(x)))\n"
        "e = torch.compile(f, backend='eager')(x)\n"
        "print(torch.allclose(e, f(x)), type(sys.modules['torch._dynamo']).__name__)\n")
    assert out == ["False", "1 True", "True module"]  # dynamo untouched by the summary


@pytest.mark.slow
def test_the_off_switch_turns_the_workarounds_off():
    code = ("import sys\n"
            "from torchinspect import summarize, privtorch\n"
            "from torchinspect.trace.counting import _DispatchCounter\n"
            "print(privtorch.workarounds_on(), _DispatchCounter._should_skip_dynamo())\n"
            "summarize('resnet18', '3,32,32', memory='none')\n"
            "print('torch._dynamo' in sys.modules)\n")
    assert _fresh(code, **{privtorch.OFF_SWITCH: "1"}) == ["False True", "True"]
    assert _fresh(code, **{privtorch.OFF_SWITCH: "0"}) == ["True False", "False"]


def test_nested_blocks_may_override_one_op_twice_and_the_outer_comes_back():
    """The latency recorder's attention inside the memory predictor's kernels (a training
    step's trace): the inner kernel runs while its block lasts, then the outer one again.
    torch 2.11 refuses a second Python kernel for one op and key unless the call allows it."""
    q = torch.randn(1, 2, 4, 8)
    seen: list[str] = []

    def kernel(name: str):
        def sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None,
                 enable_gqa=False):
            seen.append(name)
            return torch.ops.aten._scaled_dot_product_attention_math(
                q, k, v, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)[0]
        return sdpa

    sdpa = torch.nn.functional.scaled_dot_product_attention
    with privtorch.aten_overrides() as outer:
        outer.impl("scaled_dot_product_attention", kernel("outer"))
        sdpa(q, q, q)
        with privtorch.aten_overrides() as inner:
            inner.impl("scaled_dot_product_attention", kernel("inner"))
            sdpa(q, q, q)
        sdpa(q, q, q)
    sdpa(q, q, q)
    assert seen == ["outer", "inner", "outer"]
