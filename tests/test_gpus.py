"""The one GPU catalogue (torchinspect/gpus.py): every GPU once, the same names accepted by
every command, datasheet rates with their sources, and the page generated from it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from torchinspect.errors import ExitStatus, InspectError
from torchinspect.gpus import (
    ALLOCATOR_RESERVE,
    CATALOGUE,
    CUDA_CONTEXT_BYTES,
    CUDA_CONTEXT_SOURCE,
    GiB,
    MiB,
    catalogue_markdown,
    find_gpu,
    match_device_name,
    sources_markdown,
)

ROOT = Path(__file__).resolve().parents[1]
# the two lists the catalogue replaced: memory/gpu.py's (20 GPUs) and bench/predict/gpus.py's
# (7 GPUs with datasheet rates and aliases); every name of either is still accepted
MEMORY_LIST = ("h100 h200 h800 gh200 b200 gb200 b100 a100 a10 a10g a30 a40 a6000 l4 l40 l40s "
               "rtx4090 rtx3090 v100 t4").split()
PREDICT_LIST = {"h100": ("h100-sxm", "h100 80gb hbm3", "nvidia h100 80gb hbm3"),
                "h200": ("nvidia h200",), "a100": ("a100-sxm", "nvidia a100-sxm4-80gb"),
                "l40s": ("nvidia l40s",), "l4": ("nvidia l4",),
                "rtx4090": ("4090", "rtx-4090", "nvidia geforce rtx 4090"),
                "t4": ("tesla t4", "nvidia t4")}
# the rates bench/predict/gpus.py had (TFLOPS, TB/s): unchanged
PREDICT_RATES = {"h100": (989.4, 494.7, 66.9, 3.35), "h200": (989.4, 494.7, 66.9, 4.8),
                 "a100": (312, 156, 19.5, 2.039), "l40s": (362.05, 183, 91.6, 0.864),
                 "l4": (121, 60, 30.3, 0.3), "rtx4090": (165.2, 82.6, 82.6, 1.008),
                 "t4": (65, 8.1, 8.1, 0.32)}


def test_every_gpu_of_either_old_list_is_in_the_catalogue_once() -> None:
    assert set(MEMORY_LIST) <= set(CATALOGUE) and len(CATALOGUE) == len(set(CATALOGUE))
    for name, aliases in PREDICT_LIST.items():
        assert all(find_gpu(a) is CATALOGUE[name] for a in aliases)
    for name, (tensor, tf32, fp32, bw) in PREDICT_RATES.items():
        g = CATALOGUE[name]
        assert (g.tensor_16, g.tf32, g.fp32, g.bandwidth) == pytest.approx(
            (tensor * 1e12, tf32 * 1e12, fp32 * 1e12, bw * 1e12))


@pytest.mark.parametrize("name", list(CATALOGUE))
def test_each_gpu_has_sourced_rates_and_a_plausible_shape(name: str) -> None:
    g = CATALOGUE[name]
    assert g.name == name and g.label and g.source
    assert g.tensor_16 >= g.tf32 >= 0.25 * g.fp32 > 0 and g.bandwidth > 1e11
    assert g.capability[0] in (7, 8, 9, 10) and 0 < g.sms < 200
    assert g.threads_per_sm in (1024, 1536, 2048)
    assert 8 <= g.memory_gib <= 200
    assert g.bf16 == (g.capability >= (8, 0))  # bf16 tensor cores from Ampere on
    if g.reported_mib is not None:  # the driver shows a little less than the DRAM sold
        assert 0.9 * g.memory_gib * 1024 <= g.reported_mib <= g.memory_gib * 1024
        assert g.reported_source.startswith("https://")
    if g.cuda_total is not None:  # CUDA sees at most what nvidia-smi shows, and a source says
        assert g.cuda_total <= (g.reported_bytes or g.memory_bytes) and g.cuda_source
    # a budget starts from the driver's total (CUDA's, else nvidia-smi's), else the size sold
    assert g.total_bytes == (g.cuda_total or g.reported_bytes or g.memory_bytes)
    assert g.usable_bytes() == int(g.total_bytes * (1 - ALLOCATOR_RESERVE)) - CUDA_CONTEXT_BYTES


def test_names_and_aliases_mean_one_gpu_each() -> None:
    from torchinspect.gpus import _key

    keys = [_key(a) for g in CATALOGUE.values() for a in (g.name, *g.aliases)]
    assert len(keys) == len(set(keys))


@pytest.mark.parametrize(("text", "name"), [
    ("H100", "h100"), ("h-100", "h100"), ("RTX 4090", "rtx4090"), ("4090", "rtx4090"),
    ("A10", "a10"), ("a10g", "a10g"), ("V100", "v100"), ("rtx_a6000", "a6000"),
    ("NVIDIA H100 80GB HBM3", "h100")])
def test_find_gpu_takes_any_case_and_spelling(text: str, name: str) -> None:
    assert find_gpu(text).name == name


def test_an_unknown_name_is_a_usage_error_with_a_guess() -> None:
    with pytest.raises(InspectError) as err:
        find_gpu("h10", option="--predict")
    assert err.value.status == ExitStatus.USAGE
    assert err.value.message == "--predict 'h10': not a GPU this tool knows"
    assert (err.value.hint or "").startswith("did you mean h100? known: h100, h200")


@pytest.mark.parametrize(("device", "name"), [
    ("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H100 PCIe", "h100"),
    ("NVIDIA A100-SXM4-40GB", "a100"), ("NVIDIA A10G", "a10g"), ("NVIDIA A10", "a10"),
    ("Tesla T4", "t4"), ("Tesla V100-SXM2-16GB", "v100"), ("NVIDIA GeForce RTX 4090", "rtx4090"),
    ("NVIDIA L40S", "l40s"), ("NVIDIA L4", "l4"), ("NVIDIA RTX A6000", "a6000"),
    ("NVIDIA GeForce RTX 3080", None)])
def test_cuda_device_names_match_their_card(device: str, name: str | None) -> None:
    found = match_device_name(device)
    assert (found.name if found else None) == name


def test_the_measured_tables_are_the_ones_the_catalogue_lists() -> None:
    tables = {p.stem for p in (ROOT / "src/torchinspect/latency/tables").glob("*.json")}
    assert tables == {g.name for g in CATALOGUE.values() if "latency" in g.measured}
    for name in tables:
        data = json.loads((ROOT / f"src/torchinspect/latency/tables/{name}.json").read_text())
        assert match_device_name(data["device_name"]) is CATALOGUE[name]
    from torchinspect.memory.workspace import shipped_table

    measured_on = match_device_name(str(shipped_table().machine["gpu"]))
    assert measured_on is not None and "cudnn-workspace" in measured_on.measured
    assert [g.name for g in CATALOGUE.values() if "cudnn-workspace" in g.measured] == [
        measured_on.name]


def test_the_cuda_context_figure_is_the_cited_one() -> None:
    """One figure, one source, one method: 287,047,680 bytes, ``total - free`` of cudaMemGetInfo
    after a first tensor with lazy module loading (pytorch/pytorch#86509); nowhere a second."""
    import torchinspect.memory.budget as budget

    assert CUDA_CONTEXT_BYTES == 287_047_680
    assert CUDA_CONTEXT_SOURCE == "https://github.com/pytorch/pytorch/pull/86509"
    assert not hasattr(budget, "CUDA_CONTEXT") and budget.CUDA_CONTEXT_BYTES is CUDA_CONTEXT_BYTES
    figures = [p for p in (ROOT / "src/torchinspect").rglob("*.py")
               if re.search(r"287_?047_?680|400 \* MiB", p.read_text(encoding="utf-8"))]
    assert figures == [ROOT / "src/torchinspect/gpus.py"]
    assert CATALOGUE["a100"].memory_bytes == 80 * GiB


def test_the_h100_total_is_what_cuda_reported_on_our_h100() -> None:
    """The H100's total is the committed measurement (total_memory on this project's H100),
    480 MiB below nvidia-smi's total in the public record (the memory the driver reserves)."""
    results = ROOT / "benchmarks/results"
    env = json.loads((results / "bench-accuracy-gpu.json").read_text())
    measured = [v for k, v in _walk(env) if k == "gpu_memory"]
    fit = json.loads((results / "fit-resnet50-h100.json").read_text())
    h100 = CATALOGUE["h100"]
    assert measured and set(measured) == {fit["total"]} == {h100.cuda_total}
    assert "H100" in fit["device"] and h100.total_basis == "as CUDA reports it"
    assert (h100.reported_bytes or 0) - h100.total_bytes == 480 * MiB
    assert CATALOGUE["a10"].total_basis == "as nvidia-smi reports it"
    assert CATALOGUE["h200"].total_basis == "as sold"


def _walk(value: object) -> list[tuple[str, object]]:
    """Every (key, value) pair of a JSON document, at any depth."""
    if isinstance(value, dict):
        return [pair for k, v in value.items() for pair in [(k, v), *_walk(v)]]
    if isinstance(value, list):
        return [pair for v in value for pair in _walk(v)]
    return []


def _block(name: str, text: str) -> str:
    return f"<!-- {name}:begin -->\n{text}<!-- {name}:end -->"


def test_the_docs_page_is_generated_from_the_catalogue(request: pytest.FixtureRequest) -> None:
    """docs/concepts/gpus.md holds the catalogue's table and sources as the catalogue renders
    them (``pytest --update-golden`` rewrites the blocks)."""
    path = ROOT / "docs/concepts/gpus.md"
    page = path.read_text(encoding="utf-8")
    blocks = {"gpus": catalogue_markdown(), "gpu-sources": sources_markdown()}
    found = {name: re.search(rf"<!-- {name}:begin -->\n.*?<!-- {name}:end -->", page, re.S)
             for name in blocks}
    assert all(found.values()), "docs/concepts/gpus.md: a generated block's markers are missing"
    if request.config.getoption("--update-golden"):
        for name, text in blocks.items():
            page = re.sub(rf"<!-- {name}:begin -->\n.*?<!-- {name}:end -->",
                          lambda _m, n=name, t=text: _block(n, t), page, flags=re.S)
        path.write_text(page, encoding="utf-8")
    for name, text in blocks.items():
        assert _block(name, text) in page, "run pytest tests/test_gpus.py --update-golden"


# ---- every command: the same names accepted, the same did-you-mean for the rest ----------

MODEL = "zoo:convnet"
COMMANDS = {  # the command line with a GPU name, and where its JSON names the GPU used
    "memory": (["memory", MODEL, "--no-train", "--gpu"], lambda d: d["gpu"]),
    "summary": (["summary", MODEL, "--gpu"], lambda d: d["totals"]["memory_gpu"]),
    "bench": (["bench", MODEL, "--predict"], lambda d: d["predicted"]["gpu"]),
    "check": (["check", MODEL, "--max-infer-mb", "1000", "--gpu"], None),
    "report": (["report", MODEL, "--no-graph", "--no-doctor", "--gpu"],
               lambda d: d["models"][0]["latency"]["gpu"]),
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_refuses_an_unknown_gpu_the_same_way(invoke, command: str) -> None:
    args, _ = COMMANDS[command]
    result = invoke(*args, "rtx4900")
    assert result.exit_code == 2, result.output
    option = args[-1]
    assert f"error: {option} 'rtx4900': not a GPU this tool knows" in result.output
    assert "hint: did you mean rtx4090? known: h100, h200, h800" in result.output


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_takes_the_catalogues_names(invoke, command: str) -> None:
    """``4090`` (refused by `inspect memory` before the catalogue) names one GPU everywhere,
    and the command says it used it."""
    args, named = COMMANDS[command]
    result = invoke(*args, "4090", "--format", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    if named is not None:
        assert named(doc) == "rtx4090"
    else:  # check: the peak is the memory command's for that GPU (8.125 MiB of cuBLAS)
        memory = json.loads(invoke("memory", MODEL, "--no-train", "--gpu", "rtx4090",
                                   "--format", "json").output)
        assert doc["models"][0]["readings"]["infer-mb"] == memory["inference"]["peak"] / 1e6


@pytest.mark.parametrize("args", [
    ["memory", MODEL, "--device", "cpu", "--gpu", "a10"],  # bytes of tensors: no GPU
    ["check", MODEL, "--max-params", "1G", "--gpu", "a10"],  # nothing predicted for a GPU
])
def test_a_gpu_the_command_cannot_use_is_a_usage_error(invoke, args: list[str]) -> None:
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert "--gpu a10" in result.output
