"""Options declared once, next to their field: a command's parameter annotated with a
dataclass is filled by Typer from that dataclass's fields (cli/command.py), and the options
dataclasses of bench and features turn into their cores' options field by field."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Annotated

import pytest
import typer
from typer.testing import CliRunner

from torchinspect.bench.modes import CompileMode, OnOom
from torchinspect.cli.bench import BenchArgs
from torchinspect.cli.command import InspectCommand, option_fields, output_command
from torchinspect.cli.features import Dtype, FeatureArgs, FileFormat, Pool, PreprocessMode
from torchinspect.cli.output import OutputOptions
from torchinspect.sources.case import ModelOptions


@dataclass
class _Args:
    top: Annotated[int, typer.Option("--top", min=1, help="how many.")] = 3
    name: Annotated[str | None, typer.Option("--name", metavar="TEXT", help="a name.")] = None
    loud: Annotated[bool, typer.Option("--loud/--quiet", help="loudness.")] = False


def _app(seen: list[object]) -> typer.Typer:
    app = typer.Typer()

    @app.command(cls=InspectCommand)
    @output_command
    def demo(thing: Annotated[str, typer.Argument()], *, args: _Args, out: OutputOptions) -> None:
        """A demo command."""
        seen.append((thing, args, out.format.value))

    @app.callback()
    def main() -> None:
        """(a group, so `demo` is a subcommand)"""

    return app


def test_a_dataclass_parameter_becomes_its_fields_and_comes_back_filled():
    seen: list[object] = []
    result = CliRunner().invoke(_app(seen), ["demo", "x", "--top", "7", "--loud", "-f", "json"])
    assert result.exit_code == 0, result.output
    assert seen == [("x", _Args(top=7, name=None, loud=True), "json")]


def test_the_fields_keep_their_defaults_order_and_help():
    seen: list[object] = []
    app = _app(seen)
    assert CliRunner().invoke(app, ["demo", "y"]).exit_code == 0
    assert seen == [("y", _Args(), "table")]
    text = CliRunner().invoke(app, ["demo", "--help"], env={"COLUMNS": "100"}).output
    at = [text.index(flag) for flag in ("--top", "--name", "--loud", "--format", "--output")]
    assert at == sorted(at), text  # the fields in their order, before the shared options
    assert "how many." in text and "TEXT" in text


def test_a_field_without_a_default_is_refused_when_the_command_is_declared():
    @dataclass
    class Bare:
        count: Annotated[int, typer.Option("--count")]

    with pytest.raises(TypeError, match="Bare.count: an option field needs a default"):
        option_fields(Bare)


def test_every_bench_option_reaches_the_core_options():
    args = BenchArgs(batch="1,8", dtype="fp16,bf16", amp=True, channels_last=True,
                     compile_mode=CompileMode.max_autotune,
                     cuda_graphs=True, threads=3, warmup=0.5, min_time=1.5, max_time=4.0,
                     min_iters=20, target=2.0, cudnn_benchmark=False, tf32=True,
                     on_oom=OnOom.try_, profile=True, trace="t.json",
                     save_samples=True)
    core = args.bench_options(ModelOptions(device="cuda"), None, "resnet18", ("a.pt",))
    assert (core.device, core.batches, core.dtypes) == ("cuda", (1, 8), ("fp16", "bf16"))
    assert (core.amp, core.channels_last, core.compile, core.cuda_graphs, core.threads) == (
        True, True, "max-autotune", True, 3)
    assert (core.cudnn_benchmark, core.tf32, core.on_oom, core.profile) == (False, True, "try",
                                                                             True)
    assert (core.profile_trace, core.save_samples, core.protect) == ("t.json", True, ("a.pt",))
    t = core.timing
    assert (t.warmup_s, t.min_time, t.max_time, t.min_iters, t.target_cov) == (0.5, 1.5, 4.0, 20,
                                                                               0.02)


# A value other than the base's for every option of bench (a new option adds its row): each
# must change the core's options, except those the CLI acts on itself.
BENCH_VARIED = {
    "batch": "2", "dtype": "bf16", "amp": True, "channels_last": True, "compile": True,
    "compile_mode": CompileMode.reduce_overhead, "cuda_graphs": True, "threads": 2,
    "warmup": 0.1, "min_time": 0.2, "max_time": 0.3, "min_iters": 2, "target": 1.0,
    "cudnn_benchmark": False, "tf32": False, "on_oom": OnOom.try_, "max_batch": True,
    "profile": False, "trace": "other.json", "save_samples": True,
    "compare": "old.json", "predict": "h100",  # the CLI's own: a comparison, a prediction
    # the CLI's own too: a predicted training step and a generate call are other commands'
    # cores (latency.predict_train, cli/generation.py), never a timing run's options
    "train": True, "optimizer": "sgd", "generate": 8, "cache": "static", "cache_arg": "kv",
    "recompute": True,
}
BENCH_CLI_ONLY = {"compare", "predict", "train", "optimizer", "generate", "cache", "cache_arg",
                  "recompute"}


@pytest.mark.parametrize("name", [f.name for f in dataclasses.fields(BenchArgs)])
def test_each_bench_option_changes_the_core_options(name):
    assert name in BENCH_VARIED, f"BenchArgs.{name}: add a value to BENCH_VARIED"
    base = BenchArgs(profile=True)  # --trace counts only with --profile
    changed = dataclasses.replace(base, **{name: BENCH_VARIED[name]})
    assert getattr(changed, name) != getattr(base, name)
    made = [a.bench_options(ModelOptions(device="cpu"), None, "m", ()) for a in (base, changed)]
    assert (made[0] == made[1]) == (name in BENCH_CLI_ONLY)


def test_every_features_option_reaches_the_core_options():
    args = FeatureArgs(workers=2, dtype="bf16", save_dtype=Dtype.fp16, pool=Pool.gap,
                       save_format=FileFormat.pt, preprocess=PreprocessMode.none,
                       shard_size="5MB", resize=256, crop=224, mean="0.5,0.5,0.5", std="1,2,3",
                       restart=True, skip_unreadable=True, max_image_size="1MB",
                       gpu_decode=False)
    core = args.feature_options(["layer4"], "out", 8, ModelOptions(device="cpu"), None)
    assert (core.layers, str(core.output), core.batch_size, core.workers) == (["layer4"], "out",
                                                                              8, 2)
    assert (core.dtype, core.save_dtype, core.pool, core.file_format) == ("bf16", "fp16", "gap",
                                                                          "pt")
    assert (core.shard_size, core.preprocess, core.resize, core.crop) == ("5MB", "none", 256,
                                                                          224)
    assert (core.mean, core.std) == ((0.5, 0.5, 0.5), (1.0, 2.0, 3.0))
    assert (core.restart, core.skip_unreadable, core.max_image_size, core.gpu_decode) == (
        True, True, "1MB", False)


FEATURES_VARIED = {
    "workers": 1, "dtype": "fp16", "save_dtype": Dtype.bf16, "pool": Pool.gap,
    "save_format": FileFormat.npy, "shard_size": "2GB", "preprocess": PreprocessMode.none,
    "resize": 10, "crop": 8, "mean": "1,1,1", "std": "2,2,2", "restart": True,
    "skip_unreadable": True, "max_image_size": "1MB", "gpu_decode": False,
    # the CLI's own: what to do (--list), where (-o), the report, the batch (with its old
    # name), the old --report and the refused --force
    "list_": True, "layers": ["fc"], "output": "o", "format_": FileFormat.pt, "batch": 3,
    "batch_size": 3, "report": "json", "force": True, "progress": True,
}
FEATURES_CLI_ONLY = {"list_", "layers", "output", "format_", "batch", "batch_size", "report",
                     "force", "progress"}


@pytest.mark.parametrize("name", [f.name for f in dataclasses.fields(FeatureArgs)])
def test_each_features_option_changes_the_core_options(name):
    assert name in FEATURES_VARIED, f"FeatureArgs.{name}: add a value to FEATURES_VARIED"
    base = FeatureArgs()
    changed = dataclasses.replace(base, **{name: FEATURES_VARIED[name]})
    made = [a.feature_options(["x"], "out", None, ModelOptions(), None) for a in (base, changed)]
    assert (made[0] == made[1]) == (name in FEATURES_CLI_ONLY)
