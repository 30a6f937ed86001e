"""The model's own code is contained: its prints go to stderr, its sys.exit is its error (exit
70), torch's switches and the working folder it changes are put back, a BaseException it raises
is one line. The hostile models are small files written by each test."""

from __future__ import annotations

import json
import os
import textwrap

import pytest
import torch
from torch import nn

from torchinspect.errors import ExitStatus

HEADER = """
import os, sys
import torch
from torch import nn
"""


def model_file(tmp_path, name: str, *, module: str = "", init: str = "", forward: str = "",
               extra: str = "") -> str:
    """``NAME.py:Net``: a Linear(4, 3) model with ``module`` code at import, ``init`` at the
    end of ``__init__`` and ``forward`` before its return; example input 4 features."""
    body = textwrap.dedent(HEADER) + textwrap.dedent(module) + textwrap.dedent(extra) + f"""
class Net(nn.Module):
    example_input = "1,4"

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)
{textwrap.indent(textwrap.dedent(init), ' ' * 8) or '        pass'}

    def forward(self, x):
{textwrap.indent(textwrap.dedent(forward), ' ' * 8) or '        pass'}
        return self.fc(x)
"""
    path = tmp_path / f"{name}.py"
    path.write_text(body)
    return f"{path}:Net"


def _one_line_error(result) -> str:
    assert "Traceback" not in result.output, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    return errors[0]


# ------------------------------------------------------------------ sys.exit


@pytest.mark.parametrize("where", ["module", "init", "forward"])
@pytest.mark.parametrize("code", [0, 3])
def test_sys_exit_in_model_code_is_exit_70_naming_file_and_code(invoke, tmp_path, where, code):
    spec = model_file(tmp_path, f"exits_{where}_{code}", **{where: f"sys.exit({code})"})
    r = invoke("summary", spec, "-f", "json")
    assert r.exit_code == ExitStatus.INTERNAL, r.output
    line = _one_line_error(r)
    assert f"sys.exit({code})" in line and f"exits_{where}_{code}.py:" in line
    assert r.stdout == ""


def test_sys_exit_in_forward_is_a_check_error_with_junit_written(invoke, tmp_path):
    """`check --max-macs 1 --junit j.xml` once passed (exit 0) with no JUnit file. A model
    whose code calls sys.exit is a model that can't be run: an <error> testcase naming the
    call, the JUnit file written, exit 1 (issue 23: every model checked, one report)."""
    import xml.etree.ElementTree as ET

    spec = model_file(tmp_path, "exits_check", forward="sys.exit(0)")
    junit = tmp_path / "j.xml"
    r = invoke("check", spec, "--max-macs", "1", "--junit", junit)
    assert r.exit_code == ExitStatus.CHECK_FAILED, r.output
    assert "called sys.exit(0)" in r.output
    suite = ET.parse(junit).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    assert suite.get("errors") == "1"
    errors = [e.get("message", "") + (e.text or "") for e in suite.iter("error")]
    assert any("sys.exit(0)" in e for e in errors), errors


def test_sys_exit_in_a_forward_outside_the_trace(invoke, tmp_path):
    """bench runs the forward itself (no trace): the CLI boundary contains it."""
    spec = model_file(tmp_path, "exits_bench", extra="CALLS = []\n",
                      forward="CALLS.append(1)\nif len(CALLS) > 1: sys.exit(4)")
    r = invoke("bench", spec, "--device", "cpu", "--max-time", "0.2", "--min-time", "0",
               "--warmup", "0", "-f", "json")
    assert r.exit_code == ExitStatus.INTERNAL, r.output
    assert "sys.exit(4)" in _one_line_error(r) and r.stdout == ""


def test_api_turns_sys_exit_into_model_code_error(tmp_path):
    import torchinspect
    from torchinspect.errors import ModelCodeError

    spec = model_file(tmp_path, "exits_api", init="sys.exit(5)")
    with pytest.raises(ModelCodeError, match=r"sys.exit\(5\)") as info:
        torchinspect.summarize(spec)
    assert info.value.status == ExitStatus.INTERNAL


# ------------------------------------------------------------------ other BaseExceptions


class Custom(BaseException):
    pass


@pytest.mark.parametrize("raised", ["GeneratorExit('gone')", "Custom('odd')"])
def test_base_exceptions_from_the_model_are_one_line_exit_70(invoke, tmp_path, raised):
    spec = model_file(tmp_path, "raises_base", forward=f"raise {raised}",
                      extra="class Custom(BaseException):\n    pass\n")
    r = invoke("summary", spec, "--device", "cpu")
    assert r.exit_code == ExitStatus.INTERNAL, r.output
    line = _one_line_error(r)
    assert raised.split("(")[0] in line and "raises_base.py:" in line


def test_keyboard_interrupt_from_the_model_stays_130(invoke, tmp_path):
    spec = model_file(tmp_path, "ctrl_c", forward="raise KeyboardInterrupt")
    r = invoke("summary", spec, "--device", "cpu")
    assert r.exit_code == ExitStatus.INTERRUPTED
    assert "interrupted" in r.stderr and "Traceback" not in r.output


def test_model_closing_stdout_is_one_line_exit_70(invoke, tmp_path):
    spec = model_file(tmp_path, "closes_stdout", forward="sys.stdout.close()")
    r = invoke("summary", spec, "-f", "json")
    assert r.exit_code == ExitStatus.INTERNAL, r.output
    assert "closed sys.stdout" in _one_line_error(r)


def test_console_script_boundary_maps_ctrl_c_and_errors(monkeypatch, capsys):
    """main() (the console script) uses the same boundary as the commands."""
    from torchinspect.cli import app as cli_app
    from torchinspect.cli import interrupt

    class Exited(Exception):
        pass

    def fake_exit(code):
        raise Exited(code)

    monkeypatch.setattr(interrupt, "exit_now", fake_exit)
    monkeypatch.setattr(interrupt, "hold", lambda: None)  # SIGINT stays deliverable in pytest
    for raised, status, text in ((KeyboardInterrupt(), 130, "interrupted"),
                                 (GeneratorExit("x\x07y"), 70, "GeneratorExit: x\\x07y")):
        def boom(raised=raised):
            raise raised

        monkeypatch.setattr(cli_app, "app", boom)
        with pytest.raises(Exited) as info:
            cli_app.main()
        assert info.value.args[0] == status
        assert text in capsys.readouterr().err


# ------------------------------------------------------------------ prints


@pytest.mark.parametrize("command", ["summary", "params", "flops", "doctor"])
@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_model_prints_go_to_stderr(invoke, tmp_path, command, fmt):
    spec = model_file(tmp_path, "prints", module="print('IMPORTED')", init="print('BUILT')",
                      forward="print('FORWARD')")
    r = invoke(command, spec, "-f", fmt)
    assert r.exit_code in (0, 1), r.output
    for word in ("IMPORTED", "BUILT"):
        assert word in r.stderr and word not in r.stdout
    assert "FORWARD" not in r.stdout
    if fmt == "json":
        json.loads(r.stdout)
    else:
        assert r.stdout.splitlines()[0].count(",") >= 1


@pytest.mark.parametrize("args", [
    ("check", "--max-params", "1M"),
    ("bench", "--device", "cpu", "--max-time", "0.1", "--min-time", "0", "--warmup", "0"),
    ("graph", "--kind", "module"),
])
def test_model_prints_leave_json_of_other_commands_valid(invoke, tmp_path, args):
    spec = model_file(tmp_path, "prints_more", init="print('BUILT')", forward="print('FORWARD')")
    r = invoke(args[0], spec, *args[1:], "-f", "json")
    assert r.exit_code == 0, r.output
    json.loads(r.stdout)
    assert "BUILT" in r.stderr and "FORWARD" not in r.stdout


def test_api_leaves_the_callers_stdout_to_the_model(tmp_path, capsys):
    """The documented choice: the Python caller owns stdout, so model prints stay there."""
    import torchinspect

    spec = model_file(tmp_path, "prints_api", init="print('BUILT')")
    torchinspect.count_params(spec)
    assert "BUILT" in capsys.readouterr().out


# ------------------------------------------------------------------ torch switches and cwd

SETS_GLOBALS = """
torch.set_default_dtype(torch.float64)
torch.set_grad_enabled(False)
torch.set_num_threads(1)
torch.use_deterministic_algorithms(True, warn_only=True)
torch.backends.cudnn.benchmark = not torch.backends.cudnn.benchmark
torch.set_float32_matmul_precision("medium")
"""


def test_torch_switches_set_by_a_model_do_not_reach_the_next(invoke, tmp_path):
    """Two models in one command: the first one's float64 default once made the second fail
    ("blamed on --input") and doubled its byte counts."""
    bad = model_file(tmp_path, "sets_globals", init=SETS_GLOBALS)
    good = model_file(tmp_path, "plain")
    r = invoke("params", bad, good, "-f", "json")
    assert r.exit_code == 0, r.output
    second = json.loads(r.stdout)["models"][1]
    assert second["model"] == good and second["params"] == 15
    assert second["param_bytes"] == 4 * second["params"]  # float32, as built alone
    # a real forward of the second model: float64 weights would refuse the float32 input
    r = invoke("summary", bad, good, "--device", "cpu", "-f", "json")
    assert r.exit_code == 0, r.output
    assert torch.get_default_dtype() == torch.float32 and torch.is_grad_enabled()


def test_api_restores_torch_switches(tmp_path):
    import torchinspect
    from torchinspect.guard import torch_state

    before = torch_state()
    spec = model_file(tmp_path, "sets_globals_api", init=SETS_GLOBALS, forward=SETS_GLOBALS)
    s = torchinspect.summarize(spec, device="cpu")
    assert s is not None
    assert torch_state() == before
    assert torch.get_default_dtype() == torch.float32 and torch.is_grad_enabled()


def test_guard_restores_each_switch():
    from torchinspect.guard import model_code, switches, torch_state

    before = torch_state()
    with model_code("x"):
        exec(textwrap.dedent(SETS_GLOBALS))
        torch.set_default_device("meta")
        torch.set_anomaly_enabled(True)
        assert torch_state() != before
    assert torch_state() == before
    assert torch.empty(1).device.type == "cpu"
    assert {name for name, _, _ in switches()} >= {"default dtype", "grad mode", "threads",
                                                  "deterministic algorithms", "cudnn flags",
                                                  "matmul precision", "default device"}


def test_model_chdir_does_not_move_relative_outputs(invoke, tmp_path, monkeypatch):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    spec = model_file(tmp_path, "chdirs", init=f"os.chdir({str(elsewhere)!r})",
                      forward=f"os.chdir({str(elsewhere)!r})")
    r = invoke("summary", spec, "--device", "cpu", "-f", "json", "-o", "out.json")
    assert r.exit_code == 0, r.output
    assert (work / "out.json").is_file() and not (elsewhere / "out.json").exists()
    json.loads((work / "out.json").read_text())
    assert os.getcwd() == str(work)
    r = invoke("check", spec, "--max-params", "1M", "--junit", "j.xml")
    assert r.exit_code == 0, r.output
    assert (work / "j.xml").is_file() and not (elsewhere / "j.xml").exists()



def test_reports_show_output_paths_as_written(invoke, tmp_path, monkeypatch):
    """Outputs are anchored to absolute paths before model code runs; the reports still show
    the paths the way the user wrote them (not /tmp/.../g.dot, wrapped over two lines)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "80")
    r = invoke("graph", "zoo:mnist-net", "--kind", "module", "-o", "g.dot")
    assert r.exit_code == 0, r.output
    assert "File            g.dot" in r.output and str(tmp_path) not in r.output
    r = invoke("features", "zoo:convnet", "-l", "fc", "-b", "2", "-o", "feats")
    assert r.exit_code == 0, r.output
    assert "zoo:convnet: features in feats\n" in r.output and str(tmp_path) not in r.output


def test_as_written_maps_the_file_what_is_inside_and_what_is_beside():
    import dataclasses

    from torchinspect.cli.command import OutputPath, as_written

    @dataclasses.dataclass
    class Wrote:
        path: str
        inside: str
        beside: str | None
        other: str

    out = OutputPath("sub/m.onnx")
    base = os.path.abspath("sub")
    got = as_written(Wrote(str(out), os.path.join(str(out), "manifest.json"),
                           os.path.join(base, "m.export-report.md"), "/elsewhere/x"),
                     out, "path", "inside", "beside", "other")
    assert got == Wrote("sub/m.onnx", os.path.join("sub/m.onnx", "manifest.json"),
                        os.path.join("sub", "m.export-report.md"), "/elsewhere/x")
    plain = Wrote("/a", "/a/b", None, "x")
    assert as_written(plain, "a", "path") is plain  # not an anchored output: unchanged


# ------------------------------------------------------------------ eval mode, one switch

SEEN: list[bool] = []


class OverridesTrain(nn.Module):
    """A model whose train() keeps ``fc`` in training mode (as models that freeze or unfreeze
    parts do): a command that only sets flags runs ``fc`` in eval instead."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.out = nn.Linear(3, 2)

    def train(self, mode: bool = True):
        super().train(mode)
        self.fc.training = True
        return self

    def forward(self, x):
        SEEN.append(self.fc.training)
        return self.out(self.fc(x))


def _flags(model):
    return [m.training for m in model.modules()]


@pytest.mark.parametrize("command", ["trace", "graph", "bench", "export"])
def test_every_command_switches_eval_through_train(tmp_path, command):
    import torchinspect

    model = OverridesTrain()
    model.training, model.fc.training, model.out.training = True, False, True  # mixed flags
    flags = _flags(model)
    SEEN.clear()
    if command == "trace":
        torchinspect.summarize(model, (1, 4), device="cpu")
    elif command == "graph":
        torchinspect.build_graph(model, (1, 4), kind="autograd")
    elif command == "bench":
        from torchinspect.bench.timing import TimingConfig

        torchinspect.benchmark(model, (1, 4), device="cpu", timing=TimingConfig(
            warmup_s=0, min_time=0, max_time=0.05))
    else:
        import onnxscript  # noqa: F401 - a required dependency: a broken install fails, never skips
        torchinspect.export_onnx(model, tmp_path / "m.onnx", (1, 4), verify=False)
    assert SEEN and all(SEEN), SEEN  # the override ran: fc stayed in training mode
    assert _flags(model) == flags  # every flag back exactly


# ------------------------------------------------------------------ messages


def test_error_lines_show_control_characters_escaped(invoke):
    r = invoke("summary", "zoo:\x1b[2Jevil\nerror: forged")
    assert r.exit_code == ExitStatus.USAGE
    assert "\x1b" not in r.stderr and "\\x1b[2J" in r.stderr
    assert sum(line.startswith("error:") for line in r.stderr.splitlines()) == 1


def test_out_of_memory_in_the_forward_is_not_blamed_on_input(invoke, tmp_path):
    spec = model_file(tmp_path, "ooms", forward='raise RuntimeError("DefaultCPUAllocator: '
                      'can\'t allocate memory: you tried to allocate 99999999999 bytes")')
    r = invoke("summary", spec, "--device", "cpu")
    assert r.exit_code == ExitStatus.USAGE
    line = _one_line_error(r)
    assert "ran out of memory" in line and "--input" not in r.stderr.split("hint:")[-1].split(
        "smaller")[0]


def test_one_first_line():
    from torchinspect.errors import first_line

    assert first_line(ValueError("")) == "ValueError"
    assert first_line(ValueError("\n\x1b[31mred\x1b[0m\nsecond")) == "red"
    assert first_line(ValueError("a. b"), typed=True, sentence=True) == "ValueError: a."
    long = first_line(ValueError("x" * 500), limit=100)
    assert len(long) == 100 and long.endswith("...")


def test_a_generator_of_ours_closed_inside_the_guard_is_not_the_models_error():
    """gen.close() throws GeneratorExit at the yield of a generator of torchinspect (here one
    compiled as if it lived in the package): not the model's doing, so not converted."""
    import torchinspect.guard as guard

    code = textwrap.dedent("""
        def batches():
            with model_code("x"):
                yield 1
                yield 2
    """)
    space = {"model_code": guard.model_code}
    exec(compile(code, guard.__file__, "exec"), space)
    it = space["batches"]()
    assert next(it) == 1
    it.close()  # converting it would raise ModelCodeError out of close()


# ------------------------------------------------------------------ the end of the process (issue 38)


def _cli(*args: str, cwd=None):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "torchinspect", *args], capture_output=True,
                          text=True, timeout=180, check=False, cwd=cwd)


@pytest.mark.parametrize(("where", "call", "shown"), [
    ("forward", "os._exit(0)", "os._exit(0)"),
    ("init", "os.kill(os.getpid(), __import__('signal').SIGTERM)", "SIGTERM"),
    ("forward", "__import__('signal').raise_signal(__import__('signal').SIGINT)", "SIGINT"),
    ("forward", "os.abort()", "os.abort()"),
], ids=["os._exit", "kill-self", "raise_signal", "abort"])
def test_a_model_ending_the_process_is_exit_70_naming_the_call(invoke, tmp_path, where, call, shown):
    """``os._exit(0)`` in a forward ended ``inspect summary`` with exit 0 and no output (a
    silent success); a signal the model sent itself ended the run with that signal. (Run in
    this process: were it not contained, the test's own process would end, a failure too.)"""
    import os as real_os

    exit_before = real_os._exit
    spec = model_file(tmp_path, f"ends_{where}", **{where: call})
    r = invoke("summary", spec, "-f", "json")
    assert r.exit_code == ExitStatus.INTERNAL, r.output
    line = _one_line_error(r)
    assert "the model's code called" in line and shown in line and f"ends_{where}.py:" in line
    assert r.stdout == "" and real_os._exit is exit_before  # the real function back after


def test_the_console_script_turns_os_exit_into_exit_70(tmp_path):
    """The same through the real console script, in its own process."""
    spec = model_file(tmp_path, "ends_script", forward="os._exit(0)")
    done = _cli("summary", spec, "-f", "json")
    assert done.returncode == ExitStatus.INTERNAL, (done.returncode, done.stderr)
    errors = [ln for ln in done.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "the model's code called os._exit(0)" in errors[0]
    assert done.stdout == ""


def test_api_turns_os_exit_into_model_code_error(tmp_path):
    import torchinspect
    from torchinspect.errors import ModelCodeError

    spec = model_file(tmp_path, "exits_os_api", forward="os._exit(3)")
    with pytest.raises(ModelCodeError, match=r"the model's code called os\._exit\(3\)"):
        torchinspect.summarize(spec, device="cpu")


def test_a_child_process_the_model_forks_still_exits(tmp_path, invoke):
    """Inside the block the stand-ins apply to this process only: a forked child (a
    DataLoader worker) ends with the real os._exit."""
    spec = model_file(tmp_path, "forks", forward="""
        pid = os.fork()
        if pid == 0:
            os._exit(7)
        assert os.waitpid(pid, 0)[1] >> 8 == 7
    """)
    r = invoke("summary", spec, "--device", "cpu", "-f", "json")
    assert r.exit_code == 0, r.output


def test_a_model_nested_5000_modules_deep_is_the_models_error(tmp_path, invoke):
    """Python's recursion limit was an "internal error" (exit 70 asking for a bug report)."""
    spec = model_file(tmp_path, "deep", init="""
        m = nn.Identity()
        for _ in range(5000):
            m = nn.Sequential(m)
        self.body = m
    """)
    r = invoke("summary", spec)
    assert r.exit_code == ExitStatus.INTERNAL, r.output
    line = _one_line_error(r)
    assert "the model's code went deeper than Python's recursion limit" in line
    assert "internal error" not in r.output


def test_a_model_exception_from_its_own_file_is_named_not_internal(tmp_path, invoke):
    spec = model_file(tmp_path, "imports_missing", init="import no_such_module_anywhere")
    r = invoke("summary", spec)
    assert r.exit_code == ExitStatus.INTERNAL, r.output
    line = _one_line_error(r)
    assert "the model's code raised ModuleNotFoundError" in line and "imports_missing.py:" in line
    assert "internal error" not in line


MONKEYPATCHES = """
torch.set_default_dtype(torch.float64)
torch.get_default_dtype = lambda: torch.float32  # hides the change from a naive restore
torch.set_default_dtype = lambda d: None
torch.set_num_threads(1)
torch.get_num_threads = lambda: 99
sys.setrecursionlimit(50000)
import signal
signal.signal(signal.SIGINT, signal.SIG_IGN)
"""


def test_a_model_monkeypatching_torchs_getters_cannot_defeat_the_restore(tmp_path, invoke):
    """A model that replaced ``torch.get_default_dtype`` after setting float64 made the next
    model in the same process be measured in float64."""
    import signal
    import sys

    threads, limit, handler = torch.get_num_threads(), sys.getrecursionlimit(), \
        signal.getsignal(signal.SIGINT)
    real_get, real_set = torch.get_default_dtype, torch.set_default_dtype
    bad = model_file(tmp_path, "monkeypatches", init=MONKEYPATCHES)
    good = model_file(tmp_path, "plain_after")
    r = invoke("params", bad, good, "-f", "json")
    assert r.exit_code == 0, r.output
    second = json.loads(r.stdout)["models"][1]
    assert second["param_bytes"] == 4 * second["params"]  # float32, as built alone
    assert torch.get_default_dtype is real_get and torch.set_default_dtype is real_set
    assert torch.get_default_dtype() == torch.float32 and torch.get_num_threads() == threads
    assert sys.getrecursionlimit() == limit and signal.getsignal(signal.SIGINT) is handler
