"""inspect bench: sweeps, OOM handling, --max-batch search, profile, compare, CLI (CPU);
CUDA paths marked ``cuda``. Timing settings are short: these tests check behaviour, not speed."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from torchinspect.bench import BenchOptions, TimingConfig, benchmark, run_bench
from torchinspect.bench.compare import compare_configs
from torchinspect.bench.run import _max_batch, _Runner
from torchinspect.sources.case import make_case

FAST = TimingConfig(warmup_s=0.02, warmup_iters=2, min_time=0.05, max_time=0.2, min_iters=5)
FAST_ARGS = ["--warmup", "0.02", "--min-time", "0.05", "--max-time", "0.2", "--min-iters", "5"]


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 8)
        self.drop = nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.fc(x))


class OomAbove(nn.Module):
    """A fake allocator: raises the CUDA out-of-memory error above ``limit`` samples."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.limit = limit

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] > self.limit:
            raise torch.cuda.OutOfMemoryError(
                f"CUDA out of memory. Tried to allocate {x.shape[0]} MiB (fake allocator)")
        return self.fc(x)


def test_cpu_sweep_statistics_and_throughput():
    r = benchmark(Net(), "16", batch=[1, 4], timing=FAST)
    assert [(c.dtype, c.batch, c.status) for c in r.configs] == [("fp32", 1, "ok"), ("fp32", 4, "ok")]
    for c in r.configs:
        t = c.timing
        assert t.iters >= 5 and t.stats.min <= t.stats.median <= t.stats.p90 <= t.stats.p99
        assert c.throughput == pytest.approx(c.batch * t.iters / t.wall_s)
        # per-iteration clocks sit inside the synchronized block walls
        assert sum(t.samples) <= t.wall_s
    assert r.environment["torch"] == torch.__version__
    assert r.environment["torch_threads"] == torch.get_num_threads()


def test_user_model_is_not_mutated():
    model = Net().train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    attrs = set(vars(model))
    r = benchmark(model, "16", dtype=["fp32", "bf16"], channels_last=False, timing=FAST, threads=1)
    assert [c.status for c in r.configs] == ["ok", "ok"]
    assert model.training and model.fc.training and model.drop.training
    assert model.fc.weight.dtype == torch.float32 and set(vars(model)) == attrs
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert not model._forward_hooks and not model.fc._forward_pre_hooks


def test_threads_fixed_and_restored():
    seen: list[int] = []

    class Probe(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen.append(torch.get_num_threads())
            return x + 1

    threads = torch.get_num_threads()
    benchmark(Probe(), "4", threads=1, timing=FAST)
    assert set(seen) == {1} and torch.get_num_threads() == threads


@pytest.mark.parametrize(("on_oom", "expected"), [
    ("skip", ["ok", "ok", "oom", "skipped"]), ("try", ["ok", "ok", "oom", "oom"])])
def test_oom_row_and_the_sweep_goes_on(on_oom, expected):
    r = benchmark(OomAbove(limit=4), "4", batch=[1, 4, 8, 16], timing=FAST, on_oom=on_oom)
    assert [c.status for c in r.configs] == expected
    oom = r.configs[2]
    assert oom.timing is None and "out of memory" in oom.error
    assert r.ok


def test_max_batch_search_with_a_fake_allocator():
    case = make_case(OomAbove(limit=37), "4", device="meta")
    runner = _Runner(case, BenchOptions(timing=FAST), "cpu", None, __import__("time").perf_counter)
    found, row = _max_batch(runner, case.model, case.model, "fp32")
    assert found.batch == 37 and row.status == "ok" and row.batch == 37
    tried = [b for b, _, _ in found.probes]
    assert tried[:7] == [1, 2, 4, 8, 16, 32, 64]  # doubling to the first OOM
    assert len(tried) == 7 + 5  # then bisection of (32, 64): log2(32) probes
    assert all(ok == (b <= 37) for b, ok, _ in found.probes)


def test_model_error_is_a_row_not_a_crash():
    class Picky(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if x.shape[0] == 2:
                raise ValueError("batch 2 is not supported")
            return x * 2

    r = benchmark(Picky(), "3", batch=[1, 2, 3], timing=FAST)
    assert [c.status for c in r.configs] == ["ok", "error", "ok"]
    assert "batch 2 is not supported" in r.configs[1].error


def test_profile_top_ops_and_chrome_trace(tmp_path):
    trace = tmp_path / "t.json"
    r = benchmark(Net(), "16", batch=[2], timing=FAST, profile=True, profile_trace=str(trace))
    names = [o.name for o in r.profile.ops]
    assert "aten::addmm" in names or "aten::linear" in names
    events = json.loads(trace.read_text())["traceEvents"]
    assert any("addmm" in str(e.get("name", "")) for e in events)


def test_compare_verdicts():
    def res(median: float, err: float) -> dict:
        return {"configs": [{"dtype": "fp32", "batch": 1, "status": "ok",
                             "timing": {"stats": {"median": median, "median_cov": err}}}]}

    same = compare_configs(res(1.0, 0.004), res(1.005, 0.004))[0]
    assert same.verdict == "same" and same.change == pytest.approx(0.005)
    slower = compare_configs(res(1.0, 0.004), res(1.10, 0.004))[0]
    assert slower.verdict == "slower"
    # noise = 3 * sqrt(se_old^2 + se_new^2) / old when above the 1% floor
    noisy = compare_configs(res(1.0, 0.02), res(1.05, 0.02))[0]
    assert noisy.noise == pytest.approx(3 * (0.02**2 + (1.05 * 0.02) ** 2) ** 0.5)
    assert noisy.verdict == "same"
    assert compare_configs(res(1.0, 0.004), res(0.8, 0.004))[0].verdict == "faster"


def test_setup_differences_name_what_changed_besides_the_code():
    from torchinspect.bench.compare import setup_differences

    old = {"model": "resnet18", "device": "cuda:0", "flags": {"tf32": None, "channels_last": False},
           "environment": {"gpu": "NVIDIA A100", "torch": "2.10.0", "tf32_cudnn": True}}
    new = {"model": "resnet18", "device": "cuda:0", "flags": {"tf32": False, "channels_last": False},
           "environment": {"gpu": "NVIDIA H100", "torch": "2.10.0", "tf32_cudnn": False}}
    assert setup_differences(old, new) == ["--tf32: default -> off", "gpu: NVIDIA A100 -> NVIDIA H100",
                                           "tf32_cudnn: True -> False"]
    assert setup_differences(new, new) == []
    assert setup_differences({"configs": []}, new) == []  # an older file without the keys


def _fake_profile(names_us: list[tuple[str, float]], n: int):
    """A stand-in for torch.profiler's result: GPU events with names and durations."""
    from types import SimpleNamespace

    from torch.autograd import DeviceType

    events = [SimpleNamespace(name=name, device_type=DeviceType.CUDA,
                              time_range=SimpleNamespace(elapsed_us=lambda us=us: us))
              for name, us in names_us * n]
    events.append(SimpleNamespace(name="aten::conv2d", device_type=DeviceType.CPU))
    return SimpleNamespace(events=lambda: events)


def test_kernel_counts_and_the_layout_hint():
    from torchinspect.bench.profile import ProfileResult, _kernels, layout_hint

    forward = ([("void cudnn::engines_precompiled::nchwToNhwcKernel<float>", 2.0)] * 8
               + [("void cudnn::engines_precompiled::nhwcToNchwKernel<float>", 1.0)] * 4
               + [("sm90_xmma_fprop_implicit_gemm_tf32f32", 10.0)] * 20
               + [("vectorized_elementwise_kernel", 1.0)] * 8)
    k = _kernels(_fake_profile(forward, 3), 3)
    assert k == {"kernels_per_forward": 40, "kernel_s": pytest.approx(228e-6),
                 "layout_transposes": 12, "layout_transpose_s": pytest.approx(20e-6)}
    prof = ProfileResult(config="fp32 batch 1", forwards=3, sort_by="self_device", **k)
    hint = layout_hint(prof, channels_last=False)
    assert hint.startswith("layout: 12 of 40 GPU kernels per forward") and "20 us of 228 us" in hint
    assert hint.endswith("try --channels-last")
    assert layout_hint(prof, channels_last=True).endswith("try without --channels-last")
    # a few conversions (the stem's input, the head) are not worth a hint
    few = _kernels(_fake_profile(forward[6:], 3), 3)
    assert few["layout_transposes"] == 6
    assert layout_hint(ProfileResult("c", 3, "self_device", **{**few, "layout_transposes": 3}),
                       False) is None
    assert layout_hint(ProfileResult("c", 3, "self_device", kernels_per_forward=200,
                                     layout_transposes=12), False) is None  # 6% of the kernels
    assert layout_hint(ProfileResult("c", 3, "self_device"), False) is None  # CPU profile
    assert _kernels(_fake_profile([], 1), 1) is None


# ---------------------------------------------------------------- TF32


def test_tf32_switch_sets_both_and_restores_the_legacy_settings():
    from torchinspect.bench.precision import matmul_precision, tf32_state, tf32_switch

    before = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    try:
        torch.set_float32_matmul_precision("medium")  # bf16 allowed: must come back as is
        for on in (True, False):
            with tf32_switch(on):
                assert tf32_state() == {"matmul": on, "cudnn": on}
                assert matmul_precision() == ("high" if on else "highest")
            assert torch.get_float32_matmul_precision() == "medium"
            assert torch.backends.cudnn.allow_tf32 is before[1]
        with tf32_switch(None):
            assert matmul_precision() == "medium"
    finally:
        torch.set_float32_matmul_precision(before[0])


NEW_API = """
import json, torch
from torchinspect.bench.environment import capture_environment
from torchinspect.bench.precision import matmul_precision, tf32_state, tf32_switch
torch.backends.fp32_precision = "ieee"             # the PyTorch >= 2.9 API ...
torch.backends.cudnn.conv.fp32_precision = "tf32"
try:
    torch.backends.cudnn.allow_tf32                # ... after which a legacy read raises
    raises = False                                 # (PyTorch 2.14; 2.11 still answers)
except RuntimeError:
    raises = True
seen = {"raises": raises, "before": tf32_state(), "precision": matmul_precision(),
        "env": capture_environment("cpu")["float32_matmul_precision"]}
with tf32_switch(False):
    seen["off"] = tf32_state()
with tf32_switch(True):
    seen["on"] = tf32_state()
seen["after"] = tf32_state()
seen["after_api"] = [torch.backends.cuda.matmul.fp32_precision,
                     torch.backends.cudnn.conv.fp32_precision]
print(json.dumps(seen))
"""


def test_tf32_under_the_new_precision_api_in_a_fresh_process():
    import subprocess
    import sys

    if not hasattr(torch.backends, "fp32_precision"):
        pytest.skip("this PyTorch has no fp32_precision API")
    out = subprocess.run([sys.executable, "-c", NEW_API], capture_output=True, text=True, check=True)
    seen = json.loads(out.stdout)
    assert seen["before"] == {"matmul": False, "cudnn": True} and seen["precision"] == "highest"
    assert seen["env"] == "highest"
    assert seen["off"] == {"matmul": False, "cudnn": False}
    assert seen["on"] == {"matmul": True, "cudnn": True}
    assert seen["after"] == seen["before"]
    if seen["raises"]:  # switched through the new API: its own values come back
        assert seen["after_api"] == ["ieee", "tf32"]


def test_tf32_flag_on_cpu_is_a_note_not_an_error(invoke):
    r = invoke("bench", "zoo:mnist-net", *FAST_ARGS, "--no-tf32", "--format", "json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["flags"]["tf32"] is False
    assert any("TF32 is CUDA math" in n for n in data["notes"])


# ---------------------------------------------------------------- CLI


def test_cli_zoo_model_end_to_end_json(invoke, tmp_path):
    out = tmp_path / "b.json"
    r = invoke("bench", "zoo:mnist-net", "--batch", "1,4", *FAST_ARGS, "--format", "json",
               "--output", out)
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    assert data["schema"] == "torchinspect/bench/v1" and data["device"] == "cpu"
    assert [(c["batch"], c["status"]) for c in data["configs"]] == [(1, "ok"), (4, "ok")]
    c = data["configs"][1]
    st = c["timing"]["stats"]
    assert 0 < st["min"] <= st["median"] <= st["p99"]
    assert c["throughput"] == pytest.approx(4 * c["timing"]["iters"] / c["timing"]["wall_s"])
    assert "linear interpolation" in data["percentile_method"]
    assert "samples_s" not in c["timing"]
    # the earlier result compares with a new run
    r2 = invoke("bench", "zoo:mnist-net", "--batch", "4", *FAST_ARGS, "--compare", out)
    assert r2.exit_code in (0, 1), r2.output
    assert "compared with the earlier run" in r2.output and "verdict" in r2.output
    assert "the runs differ in" not in r2.output
    # a run with other settings says so next to the comparison
    r3 = invoke("bench", "zoo:mnist-net", "--batch", "4", *FAST_ARGS, "--threads", "1",
                "--compare", out, "--format", "json")
    assert r3.exit_code in (0, 1), r3.output
    assert "--threads: default -> 1" in json.loads(r3.stdout)["compare_setup"]


def test_cli_table_csv_and_samples(invoke, tmp_path):
    r = invoke("bench", "zoo:mnist-net", *FAST_ARGS, "--threads", "1")
    assert r.exit_code == 0, r.output
    assert "median" in r.output and "samples/s" in r.output and "threads" in r.output
    r = invoke("bench", "zoo:mnist-net", *FAST_ARGS, "--format", "csv")
    assert r.exit_code == 0
    header, row = r.stdout.strip().splitlines()[:2]
    cols = header.split(",")
    assert float(row.split(",")[cols.index("median")]) > 0  # raw seconds, not "240 us"
    r = invoke("bench", "zoo:mnist-net", *FAST_ARGS, "--format", "json", "--save-samples")
    t = json.loads(r.stdout)["configs"][0]["timing"]
    assert len(t["samples_s"]) == t["iters"]


def test_cli_compares_two_saved_results_without_running(invoke, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    old, new = "run1.json", "run2.json"
    for path in (old, new):
        r = invoke("bench", "zoo:mnist-net", "--batch", "1,4", *FAST_ARGS, "--format", "json",
                   "-o", path)
        assert r.exit_code == 0, r.output
    import torchinspect.bench.run as run

    def no_run(*a, **k):
        raise AssertionError("a saved comparison must not run the model")

    monkeypatch.setattr(run, "run_bench", no_run)
    r = invoke("bench", new, "--compare", old, "--format", "json")
    assert r.exit_code in (0, 1), r.output
    data = json.loads(r.stdout)
    assert data["schema"] == "torchinspect/bench-compare/v1"
    expected = compare_configs(json.loads((tmp_path / old).read_text()),
                               json.loads((tmp_path / new).read_text()))
    assert data["compare"] == [c.to_dict() for c in expected]
    assert [(c["batch"], c["verdict"] in ("same", "faster", "slower")) for c in data["compare"]] \
        == [(1, True), (4, True)]
    assert data["compare_setup"] == []  # same machine, same settings
    assert r.exit_code == (1 if any(c.verdict == "slower" for c in expected) else 0)
    table = invoke("bench", new, "--compare", old)
    assert f"{new} compared with {old}" in table.stdout and "zoo:mnist-net" in table.stdout
    # twice as slow with tight medians (this machine's own runs may be noisy): exit 1 and
    # "slower", like a fresh run
    doc = json.loads((tmp_path / new).read_text())
    for c in doc["configs"]:
        c["timing"]["stats"]["median_cov"] = 0.001
    (tmp_path / "fast.json").write_text(json.dumps(doc))
    for c in doc["configs"]:
        c["timing"]["stats"]["median"] *= 2
    (tmp_path / "slow.json").write_text(json.dumps(doc))
    r = invoke("bench", "slow.json", "--compare", "fast.json", "--format", "csv")
    assert r.exit_code == 1 and "slower than the earlier run" in r.stderr
    assert [row.split(",")[-1] for row in r.stdout.strip().splitlines()[1:]] == ["slower"] * 2


@pytest.mark.parametrize(("which", "text"), [
    ("new", "not an `inspect bench` JSON result (schema 'torchinspect/summary/v"),
    ("old", "--compare {old}: not an `inspect bench` JSON result"),
    ("alone", "a saved result, not a model"),
    ("other-alone", "not an `inspect bench` JSON result (schema 'torchinspect/summary/v"),
])
def test_cli_saved_comparison_refuses_other_json(invoke, tmp_path, which, text):
    summary = tmp_path / "summary.json"
    r = invoke("summary", "zoo:mnist-net", "--format", "json", "-o", summary)
    assert r.exit_code == 0, r.output
    bench = tmp_path / "bench.json"
    assert invoke("bench", "zoo:mnist-net", *FAST_ARGS, "-f", "json", "-o", bench).exit_code == 0
    args = {"new": [summary, "--compare", bench], "old": [bench, "--compare", summary],
            "alone": [bench], "other-alone": [summary]}[which]
    r = invoke("bench", *args)
    assert r.exit_code == 2, r.output
    assert text.format(old=summary) in r.stderr and "hint:" in r.stderr
    assert "checkpoint" not in r.stderr and "Traceback" not in r.output


@pytest.mark.parametrize(("args", "text"), [
    (["--dtype", "fp64"], "--dtype 'fp64' is not a dtype"),
    (["--batch", "1,x"], "is not a positive integer"),
    (["--cuda-graphs"], "--cuda-graphs needs a CUDA device"),
    (["--max-batch"], "--max-batch searches GPU memory"),
    (["--device", "meta"], "needs a real device"),
    (["--min-time", "3", "--max-time", "1"], "is below --min-time"),
    (["--compare", "missing.json"], "no such file"),
])
def test_cli_usage_errors(invoke, args, text):
    r = invoke("bench", "zoo:mnist-net", *args)
    assert r.exit_code == 2, r.output
    assert f"error: {text}" in r.output or text in r.output
    assert "hint:" in r.output and "Traceback" not in r.output


def test_cli_all_oom_exits_1(invoke, tmp_path):
    spec = tmp_path / "m.py"
    spec.write_text("import torch\nfrom torch import nn\n"
                    "class M(nn.Module):\n"
                    "    def forward(self, x):\n"
                    "        raise torch.cuda.OutOfMemoryError('CUDA out of memory (fake)')\n")
    r = invoke("bench", f"{spec}:M", "--input", "4", "--batch", "1,2", *FAST_ARGS)
    assert r.exit_code == 1, r.output
    assert "OOM" in r.output and "SKIPPED" in r.output


def test_bench_help_does_not_default_to_cuda(invoke):
    r = invoke("bench", "--help")
    assert r.exit_code == 0 and "--cuda-graphs" in r.output and "--max-batch" in r.output
    assert BenchOptions().device == "cpu"


# ---------------------------------------------------------------- CUDA


@pytest.mark.cuda
def test_cuda_sweep_fp16_events_and_memory():
    r = run_bench(make_case("resnet18", "3,224,224", device="meta"),
                  BenchOptions(device="cuda", batches=(1, 8), dtypes=("fp16",), timing=FAST))
    assert [c.status for c in r.configs] == ["ok", "ok"]
    for c in r.configs:
        assert c.timing.host_stats is not None and c.peak_allocated > 0
        assert c.peak_reserved >= c.peak_allocated
    assert r.environment["gpu"] and r.environment["cuda"]


@pytest.mark.cuda
def test_cuda_graphs_replay_runs_beside_eager():
    case = make_case("resnet18", "3,224,224", device="meta")
    eager = run_bench(case, BenchOptions(device="cuda", timing=FAST))
    graphs = run_bench(case, BenchOptions(device="cuda", cuda_graphs=True, timing=FAST))
    e, g = eager.configs[0].timing.stats.median, graphs.configs[0].timing.stats.median
    # the mechanism, not a ratio (timing ratios live in benchmarks/bench_accuracy.py)
    assert graphs.configs[0].status == "ok" and eager.configs[0].status == "ok"
    assert g > 0 and e > 0 and graphs.options.cuda_graphs and not eager.options.cuda_graphs


@pytest.mark.cuda
def test_cuda_real_oom_continues_the_sweep():
    case = make_case("resnet18", "3,224,224", device="meta")
    r = run_bench(case, BenchOptions(device="cuda", batches=(2, 400_000, 4), timing=FAST,
                                     on_oom="try"))
    assert [c.status for c in r.configs] == ["ok", "oom", "ok"]


@pytest.mark.cuda
def test_cuda_max_batch_real_memory():
    # 4 MiB of input per sample: the search ends near free memory / 4 MiB, below the cap
    case = make_case(nn.Linear(1 << 20, 16).cuda(), str(1 << 20), device="meta")
    r = run_bench(case, BenchOptions(device="cuda", max_batch=True, timing=FAST))
    mb = r.max_batch
    assert mb.batch and not mb.capped and r.configs[-1].status == "ok"
    assert any(not ok for _, ok, _ in mb.probes)
    assert all(ok == (b <= mb.batch) for b, ok, _ in mb.probes)


@pytest.mark.cuda
def test_cuda_cli_profile(invoke, tmp_path):
    out = tmp_path / "r.json"
    r = invoke("bench", "resnet18", "--device", "cuda", "--dtype", "fp16", "--profile",
               *FAST_ARGS, "--format", "json", "--output", out)
    assert r.exit_code == 0, r.output
    d = json.loads(out.read_text())
    assert d["profile"]["sort_by"] == "self_device" and d["profile"]["total_self_device_s"] > 0
    assert (tmp_path / "r.trace.json").exists()
    # kernel count and kernel time per forward; a CUDA-graph replay runs the same kernels,
    # and its median can only be above their sum (they run one after the other)
    eager = d["profile"]
    assert eager["kernels_per_forward"] > 20 and eager["kernel_s"] > 0
    out2 = tmp_path / "g.json"
    r = invoke("bench", "resnet18", "--device", "cuda", "--dtype", "fp16", "--profile",
               "--cuda-graphs", *FAST_ARGS, "--format", "json", "--output", out2)
    assert r.exit_code == 0, r.output
    g = json.loads(out2.read_text())
    assert g["profile"]["kernels_per_forward"] == eager["kernels_per_forward"]
    median = g["configs"][0]["timing"]["stats"]["median"]
    assert g["profile"]["kernel_s"] > 0 and median > 0  # their ratio: benchmarks/graph_gap.py


@pytest.mark.cuda
def test_cuda_no_tf32_runs_ieee_and_restores(invoke, tmp_path):
    before = torch.backends.cudnn.allow_tf32, torch.get_float32_matmul_precision()
    case = make_case("resnet18", "3,224,224", device="meta")
    r = run_bench(case, BenchOptions(device="cuda", tf32=False, timing=FAST))
    assert r.configs[0].status == "ok"
    assert r.environment["tf32_cudnn"] is False and r.environment["tf32_matmul"] is False
    assert (torch.backends.cudnn.allow_tf32, torch.get_float32_matmul_precision()) == before
    # IEEE convolutions are slower than TF32 ones on tensor-core GPUs; the table says which ran
    out = tmp_path / "r.json"
    r = invoke("bench", "resnet18", "--device", "cuda", "--tf32", *FAST_ARGS, "--format", "json",
               "--output", out)
    assert r.exit_code == 0, r.output
    d = json.loads(out.read_text())
    assert d["environment"]["tf32_cudnn"] is True and d["flags"]["tf32"] is True


@pytest.mark.cuda
def test_cuda_profile_layout_hint_follows_the_kernels(invoke, tmp_path):
    from torchinspect.bench.profile import HINT_MIN_SHARE, HINT_MIN_TRANSPOSES

    for extra in ([], ["--channels-last"]):
        out = tmp_path / "r.json"
        r = invoke("bench", "resnet18", "--device", "cuda", "--profile", *extra, *FAST_ARGS,
                   "--format", "json", "--output", out)
        assert r.exit_code == 0, r.output
        d = json.loads(out.read_text())
        p = d["profile"]
        assert p["layout_transposes"] is not None and p["layout_transpose_s"] <= p["kernel_s"]
        due = (p["layout_transposes"] >= HINT_MIN_TRANSPOSES
               and p["layout_transposes"] / p["kernels_per_forward"] >= HINT_MIN_SHARE)
        hints = [w for w in d["configs"][0]["warnings"] if w.startswith("layout:")]
        assert len(hints) == int(due)
        if due:
            assert hints[0].endswith("without --channels-last" if extra else "try --channels-last")


def test_large_inputs_made_on_the_device_keep_specs():
    from torchinspect.bench.run import _on_device
    from torchinspect.inputs import ExampleInputs, TensorSpec

    ex = ExampleInputs((TensorSpec((2, 3), "float16"), [TensorSpec((2,), "int64", high=5)]),
                       {"mask": TensorSpec((2, 4), "bool")})
    args, kwargs = _on_device(ex, "cpu")
    assert args[0].shape == (2, 3) and args[0].dtype == torch.float16
    assert args[1][0].dtype == torch.int64 and int(args[1][0].max()) < 5
    assert kwargs["mask"].dtype == torch.bool and kwargs["mask"].shape == (2, 4)


def test_live_progress_shows_a_markup_like_spec_as_text():
    """On a terminal the progress is a rich status: a model spec like "runs/[/x]/m.py:Net"
    is text there, not markup (which raised MarkupError)."""
    import io

    from rich.console import Console

    from torchinspect.cli.bench import _Progress

    buf = io.StringIO()
    with _Progress() as p:
        p.console = Console(file=buf, force_terminal=True, width=80, highlight=False)
        p.live, p.last = True, 0.0
        p.status = p.console.status("starting")
        p.status.__enter__()
        p("runs/[/x]/m.py:Net b1: warming up")
        p("[bold]done[/bold]", final=True)
    assert "[/x]" in buf.getvalue() and "[bold]done[/bold]" in buf.getvalue()
