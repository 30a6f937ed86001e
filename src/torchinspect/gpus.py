"""The one GPU catalogue: every GPU the tool predicts for, once, with where its numbers come from.

Each `Gpu` holds what the predictors read: the names users type for it, its compute
capability, streaming multiprocessors and threads per SM (the cuBLAS workspace and the
staging buffers of CUDA reductions depend on them: ``memory/``), its memory (as sold, and as
the driver reports it where a record says: `Gpu.total_bytes`, what ``--fit h100`` starts
from, `usable_bytes` what a peak may reach of it), its datasheet peak rates (dense, no
sparsity: bf16/fp16 tensor cores, TF32, CUDA-core fp32, DRAM bandwidth) with their source,
and which measured tables exist for it (``latency/tables/NAME.json``, the cuDNN workspace
table of ``memory/data``). `find_gpu` is the one parser of ``--gpu``/``--predict``
names: every command accepts the same names and answers the rest with the same did-you-mean.

Leaf module: no torch at import (`detect_gpu` imports it when asked). Adding a GPU is one
`Gpu(...)` row below and its line in ``tests/test_gpus.py``; docs/concepts/gpus.md is
generated from this table (`catalogue_markdown`).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

from torchinspect.errors import ExitStatus, InspectError

T = 1e12  # FLOP/s and bytes/s per tera
GiB = 1 << 30
MiB = 1 << 20

# What a process loses before its first tensor: the CUDA context (the driver's state and the
# kernels loaded so far; not the caching allocator's, so `max_memory_allocated` never sees it).
# One figure, one source, one method: 287,047,680 bytes, measured in PyTorch's own test of lazy
# module loading (PyTorch's default since 1.13) as ``total - free`` of ``cudaMemGetInfo`` right
# after a first CUDA tensor (https://github.com/pytorch/pytorch/pull/86509; 666,632,192 bytes
# loaded eagerly). Lazy loading adds each library's kernels at their first use (cuBLAS, cuDNN),
# so a run's context is this or more: measure yours the same way after one step, less
# ``torch.cuda.memory_reserved()`` (docs/concepts/gpus.md says how).
CUDA_CONTEXT_BYTES = 287_047_680
CUDA_CONTEXT_SOURCE = "https://github.com/pytorch/pytorch/pull/86509"
# The caching allocator reserves more than it hands out (cached, partly free blocks), and the
# limit a run hits is the reserved memory: resnet50 training on the H100 with the allocator
# capped at 80e9 bytes fit at an allocated peak of 79.29 GB and ran out at 79.38 GB
# (benchmarks/results/fit-resnet50-h100.json), 0.78-0.89% of the memory: keep 1% of it.
ALLOCATOR_RESERVE = 0.01

# nvidia-smi's totals from public records (its "Total", which on recent drivers includes memory
# the driver reserves for itself: CUDA sees less), cited once each
_MODAL = "https://github.com/modal-labs/modal-client/pull/2797 (nvidia-smi totals of its GPUs)"
# what CUDA reported as the total (``torch.cuda.get_device_properties(0).total_memory``, the
# total of ``cudaMemGetInfo``) on this project's own GPUs, in committed raw data
_OUR_H100 = ("this project's H100 80GB HBM3 (driver 580.159.04): gpu_memory in "
             "benchmarks/results/bench-accuracy-gpu.json, total in fit-resnet50-h100.json")


def usable_bytes(total: int, *, context: int = CUDA_CONTEXT_BYTES,
                 reserve: float = ALLOCATOR_RESERVE) -> int:
    """What a predicted (allocated) peak may reach on a GPU of ``total`` bytes: the total less
    `ALLOCATOR_RESERVE` of it and the CUDA ``context`` (0 where ``total`` is a free memory
    measured after the context). The one rule of ``--fit`` and of check's memory budgets."""
    return max(0, int(total * (1 - reserve)) - context)


@dataclass(frozen=True)
class Gpu:
    """One GPU: names, architecture, memory, datasheet peaks (FLOP/s, bytes/s) and sources."""

    name: str  # the short name users type: h100
    label: str  # the card the numbers describe: NVIDIA H100 SXM5 80GB
    aliases: tuple[str, ...]  # other names and CUDA device names (normalised when matched)
    capability: tuple[int, int]  # CUDA compute capability (9, 0)
    sms: int  # streaming multiprocessors (the SXM part where a card has several)
    threads_per_sm: int
    memory_gib: int  # as sold ("80GB" HBM is 80 GiB of DRAM)
    tensor_16: float  # bf16/fp16 tensor cores with fp32 accumulation, dense
    tf32: float  # TF32 tensor cores, dense (no TF32: the fp32 rate)
    fp32: float  # CUDA cores, fp32 FMA
    bandwidth: float  # DRAM bytes/s
    source: str  # where the rates come from
    bf16: bool = True  # native bf16 (T4, V100: no; bf16 runs at the fp32 rate)
    reported_mib: int | None = None  # total memory nvidia-smi reports, where a record says
    reported_source: str = ""
    cuda_total: int | None = None  # bytes CUDA reports as the total, where measured
    cuda_source: str = ""
    measured: tuple[str, ...] = ()  # tables measured on this GPU: "latency", "cudnn-workspace"

    @property
    def memory_bytes(self) -> int:
        """Memory as sold, in bytes."""
        return self.memory_gib * GiB

    @property
    def reported_bytes(self) -> int | None:
        """Total memory as the driver reports it (nvidia-smi, ``total_memory``), if known."""
        return self.reported_mib * MiB if self.reported_mib is not None else None

    @property
    def total_bytes(self) -> int:
        """The memory a process's budget starts from, as the driver reports it: the total CUDA
        reports (all a process can ever allocate) where measured, else nvidia-smi's total from
        a public record, else the size as sold (see `total_basis`)."""
        return self.cuda_total or self.reported_bytes or self.memory_bytes

    @property
    def total_basis(self) -> str:
        """Where `total_bytes` comes from, in words."""
        return ("as CUDA reports it" if self.cuda_total else
                "as nvidia-smi reports it" if self.reported_mib else "as sold")

    def usable_bytes(self) -> int:
        """What a predicted (allocated) peak may reach on this GPU (`usable_bytes`)."""
        return usable_bytes(self.total_bytes)

    def peak(self, math: str) -> float:
        """The peak of ``math``: "tensor16", "tf32" or "fp32"."""
        return {"tensor16": self.tensor_16, "tf32": self.tf32, "fp32": self.fp32}[math]

    @property
    def arch(self) -> str:
        return f"sm_{self.capability[0]}{self.capability[1]}"


_H100_SHEET = ("NVIDIA H100 Tensor Core GPU datasheet, SXM column, dense (half the sparsity "
               "figures): https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet")


def _hopper(name: str, label: str, aliases: tuple[str, ...], memory_gib: int, bandwidth: float,
            source: str, **known: Any) -> Gpu:
    """A Hopper part with the H100 SXM's compute: 132 SMs, 989.4/494.7/66.9 TFLOPS dense."""
    return Gpu(name, label, aliases, (9, 0), 132, 2048, memory_gib, 989.4 * T, 494.7 * T,
               66.9 * T, bandwidth, source, **known)


CATALOGUE: dict[str, Gpu] = {g.name: g for g in (
    _hopper("h100", "NVIDIA H100 SXM5 80GB", ("h100-sxm", "h100-sxm5", "h100 80gb hbm3",
            "nvidia h100 80gb hbm3"), 80, 3.35 * T, _H100_SHEET, reported_mib=81559,
            reported_source=_MODAL, cuda_total=85_017_493_504, cuda_source=_OUR_H100,
            measured=("latency", "cudnn-workspace")),
    _hopper("h200", "NVIDIA H200 SXM 141GB", ("nvidia h200", "h200-sxm"), 141, 4.8 * T,
            "NVIDIA H200 Tensor Core GPU datasheet, SXM column, dense: "
            "https://www.nvidia.com/en-us/data-center/h200/"),
    _hopper("h800", "NVIDIA H800 SXM5 80GB", ("nvidia h800",), 80, 3.35 * T,
            "NVIDIA H800 datasheet, SXM column, dense (the H100 SXM's compute, less "
            "interconnect)"),
    _hopper("gh200", "NVIDIA GH200 Grace Hopper Superchip, 96GB HBM3", ("nvidia gh200 480gb",
            "gh200 480gb"), 96, 4.0 * T, "NVIDIA GH200 Grace Hopper Superchip datasheet "
            "(96GB HBM3), dense: https://resources.nvidia.com/en-us-grace-cpu/"
            "grace-hopper-superchip"),
    Gpu("b200", "NVIDIA B200 (HGX B200, one of 8)", ("nvidia b200",), (10, 0), 148, 2048,
        memory_gib=180, tensor_16=2250 * T, tf32=1125 * T, fp32=75 * T, bandwidth=8.0 * T,
        source="NVIDIA HGX B200 specifications divided by its 8 GPUs, dense (FP16/BF16 36 "
        "PFLOPS, TF32 18 PFLOPS with sparsity; FP32 600 TFLOPS; 64 TB/s): "
        "https://www.nvidia.com/en-us/data-center/hgx/"),
    Gpu("gb200", "NVIDIA GB200 (one Blackwell GPU of the NVL72)", ("nvidia gb200",), (10, 0),
        152, 2048, memory_gib=186, tensor_16=2500 * T, tf32=1250 * T, fp32=80 * T,
        bandwidth=8.0 * T, source="NVIDIA GB200 NVL72 specifications divided by its 72 GPUs, "
        "dense (FP16/BF16 360 PFLOPS, TF32 180 PFLOPS with sparsity; FP32 5,760 TFLOPS; "
        "13.4 TB HBM3e at 576 TB/s): https://www.nvidia.com/en-us/data-center/gb200-nvl72/"),
    Gpu("b100", "NVIDIA B100 (HGX B100, one of 8)", ("nvidia b100",), (10, 0), 132, 2048,
        memory_gib=180, tensor_16=1750 * T, tf32=875 * T, fp32=60 * T, bandwidth=8.0 * T,
        source="NVIDIA HGX B100 specifications divided by its 8 GPUs, dense (FP16/BF16 28 "
        "PFLOPS, TF32 14 PFLOPS with sparsity; FP32 480 TFLOPS)"),
    Gpu("a100", "NVIDIA A100 SXM4 80GB", ("a100-sxm", "a100-sxm4", "nvidia a100-sxm4-80gb",
        "a100 80gb"), (8, 0), 108, 2048, memory_gib=80, tensor_16=312 * T, tf32=156 * T,
        fp32=19.5 * T, bandwidth=2.039 * T, source="NVIDIA A100 Tensor Core GPU datasheet, "
        "80GB SXM column, dense: https://www.nvidia.com/content/dam/en-zz/Solutions/"
        "Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf",
        reported_mib=81920, reported_source=_MODAL),
    Gpu("a10", "NVIDIA A10", ("nvidia a10",), (8, 6), 72, 1536, memory_gib=24,
        tensor_16=125 * T, tf32=62.5 * T, fp32=31.2 * T, bandwidth=600e9,
        source="NVIDIA A10 Tensor Core GPU datasheet, dense: https://www.nvidia.com/content/"
        "dam/en-zz/Solutions/Data-Center/a10/pdf/a10-datasheet.pdf",
        reported_mib=23028, reported_source=_MODAL),
    Gpu("a10g", "NVIDIA A10G (AWS G5)", ("nvidia a10g",), (8, 6), 80, 1536, memory_gib=24,
        tensor_16=70 * T, tf32=35 * T, fp32=31.52 * T, bandwidth=600e9,
        source="no NVIDIA datasheet (an AWS part); the spec table of "
        "https://www.baseten.co/blog/nvidia-a10-vs-a10g-for-ml-model-inference/",
        reported_mib=23028, reported_source="https://github.com/NVIDIA/DCGM/issues/232 "
        "(nvidia-smi of an NVIDIA A10G)"),
    Gpu("a30", "NVIDIA A30", ("nvidia a30",), (8, 0), 56, 2048, memory_gib=24,
        tensor_16=165 * T, tf32=82 * T, fp32=10.3 * T, bandwidth=933e9,
        source="NVIDIA A30 Tensor Core GPU datasheet, dense: https://www.nvidia.com/"
        "en-us/data-center/products/a30-gpu/"),
    Gpu("a40", "NVIDIA A40", ("nvidia a40",), (8, 6), 84, 1536, memory_gib=48,
        tensor_16=149.7 * T, tf32=74.8 * T, fp32=37.4 * T, bandwidth=696e9,
        source="NVIDIA A40 datasheet, dense: https://images.nvidia.com/content/Solutions/"
        "data-center/a40/nvidia-a40-datasheet.pdf"),
    Gpu("a6000", "NVIDIA RTX A6000", ("rtx a6000", "nvidia rtx a6000"), (8, 6),
        84, 1536, memory_gib=48, tensor_16=154.8 * T, tf32=77.4 * T, fp32=38.7 * T,
        bandwidth=768e9, source="NVIDIA RTX A6000 datasheet (tensor 309.7 TFLOPS with "
        "sparsity, halved), dense: https://www.nvidia.com/content/dam/en-zz/Solutions/"
        "design-visualization/quadro-product-literature/proviz-print-nvidia-rtx-a6000-"
        "datasheet-us-nvidia-1454980-r9-web%20(1).pdf"),
    Gpu("l4", "NVIDIA L4", ("nvidia l4",), (8, 9), 58, 1536, memory_gib=24, tensor_16=121 * T,
        tf32=60 * T, fp32=30.3 * T, bandwidth=300e9, source="NVIDIA L4 Tensor Core GPU "
        "datasheet, dense: https://www.nvidia.com/en-us/data-center/l4/",
        reported_mib=23034, reported_source=_MODAL),
    Gpu("l40", "NVIDIA L40", ("nvidia l40",), (8, 9), 142, 1536, memory_gib=48,
        tensor_16=181 * T, tf32=90.5 * T, fp32=90.5 * T, bandwidth=864e9,
        source="NVIDIA L40 GPU datasheet, dense: https://www.nvidia.com/en-us/data-center/l40/"),
    Gpu("l40s", "NVIDIA L40S", ("nvidia l40s",), (8, 9), 142, 1536, memory_gib=48,
        tensor_16=362.05 * T, tf32=183 * T, fp32=91.6 * T, bandwidth=864e9,
        source="NVIDIA L40S GPU datasheet, dense: https://www.nvidia.com/en-us/data-center/l40s/",
        reported_mib=46068, reported_source=_MODAL),
    Gpu("rtx4090", "NVIDIA GeForce RTX 4090", ("4090", "geforce rtx 4090", "nvidia geforce rtx 4090"), (8, 9), 128, 1536, memory_gib=24, tensor_16=165.2 * T,
        tf32=82.6 * T, fp32=82.6 * T, bandwidth=1.008 * T, source="NVIDIA Ada Lovelace GPU "
        "architecture whitepaper, RTX 4090 column (FP16/BF16 tensor with FP32 accumulate), "
        "dense: https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-"
        "architecture.pdf", reported_mib=24564, reported_source="https://github.com/RLinf/"
        "RLinf/issues/255 (nvidia-smi of an NVIDIA GeForce RTX 4090)"),
    Gpu("rtx3090", "NVIDIA GeForce RTX 3090", ("3090", "geforce rtx 3090", "nvidia geforce rtx 3090"), (8, 6), 82, 1536, memory_gib=24, tensor_16=71 * T,
        tf32=35.6 * T, fp32=35.6 * T, bandwidth=936e9, source="NVIDIA Ampere GA102 GPU "
        "architecture whitepaper, RTX 3090 column (FP16 tensor with FP32 accumulate), dense: "
        "https://www.nvidia.com/content/PDF/nvidia-ampere-ga-102-gpu-architecture-whitepaper-"
        "v2.pdf", reported_mib=24576, reported_source="https://github.com/noonghunna/club-3090/"
        "issues/1128 (nvidia-smi of an NVIDIA GeForce RTX 3090)"),
    Gpu("v100", "NVIDIA V100 SXM2 32GB", ("tesla v100", "v100-sxm2", "tesla v100-sxm2-32gb"),
        (7, 0), 80, 2048, memory_gib=32, tensor_16=125 * T, tf32=15.7 * T, fp32=15.7 * T,
        bandwidth=900e9, bf16=False, source="NVIDIA V100 Tensor Core GPU datasheet, SXM2 "
        "column (fp16 tensor; no TF32 or bf16 tensor cores): https://images.nvidia.com/"
        "content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf"),
    Gpu("t4", "NVIDIA T4", ("tesla t4", "nvidia t4"), (7, 5), 40, 1024, memory_gib=16,
        tensor_16=65 * T, tf32=8.1 * T, fp32=8.1 * T, bandwidth=320e9, bf16=False,
        source="NVIDIA T4 Tensor Core GPU datasheet (fp16 tensor; no TF32 or bf16 tensor "
        "cores): https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/tesla-t4/"
        "t4-tensor-core-datasheet-951643.pdf", reported_mib=15360, reported_source=_MODAL),
)}
DEFAULT_GPU = "h100"  # what memory predicts for when no GPU is named and none is here


def _key(text: str) -> str:
    """A name as matched: lower case, without spaces, hyphens and underscores."""
    return "".join(c for c in text.strip().lower() if c not in " -_")


_NAMES: dict[str, str] = {_key(alias): g.name for g in CATALOGUE.values()
                          for alias in (g.name, *g.aliases)}


def gpu_names() -> list[str]:
    """The short names, in catalogue order."""
    return list(CATALOGUE)


def lookup_gpu(name: str) -> Gpu | None:
    """The catalogue's GPU called ``name`` (a short name or an alias, any case, with or
    without spaces, hyphens and underscores), or None."""
    found = _NAMES.get(_key(name))
    return CATALOGUE[found] if found is not None else None


def did_you_mean(name: str) -> str:
    """``did you mean h100? `` for a name close to one of the catalogue's, else ``""``."""
    close = difflib.get_close_matches(_key(name), list(_NAMES), n=1)
    return f"did you mean {_NAMES[close[0]]}? " if close else ""


def find_gpu(name: str, *, option: str = "--gpu") -> Gpu:
    """``h100`` (an alias, a CUDA device name, any case, with or without hyphens) -> Gpu; an
    unknown name: did-you-mean and the known names, exit 2, naming ``option``."""
    found = lookup_gpu(name)
    if found is not None:
        return found
    raise InspectError(f"{option} {name!r}: not a GPU this tool knows",
                       hint=f"{did_you_mean(name)}known: {', '.join(CATALOGUE)}",
                       status=ExitStatus.USAGE)


def match_device_name(device_name: str) -> Gpu | None:
    """The catalogue's GPU for a CUDA device name (``NVIDIA H100 80GB HBM3`` -> h100,
    ``NVIDIA A100-PCIE-40GB`` -> a100: an alias, else the longest short name inside it)."""
    key = _key(device_name)
    if key in _NAMES:
        return CATALOGUE[_NAMES[key]]
    key = key.replace("geforce", "").replace("nvidia", "").replace("tesla", "")
    for name in sorted(CATALOGUE, key=len, reverse=True):
        if name in key:
            return CATALOGUE[name]
    return None


def by_capability(major: int) -> Gpu:
    """The catalogue's stand-in for an unknown card of compute capability ``major``: Hopper
    (9), Blackwell (10 and later), else the A100 (cuBLAS's workspace size follows the major)."""
    return CATALOGUE["h100" if major == 9 else "b200" if major >= 10 else "a100"]


def detect_gpu() -> Gpu | None:
    """The GPU that is here (CUDA's current device), or None without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return None
    return (match_device_name(torch.cuda.get_device_name())
            or by_capability(torch.cuda.get_device_capability()[0]))


def target_gpu(name: str | None = None, *, option: str = "--gpu") -> Gpu:
    """The GPU a prediction is for: ``name`` (the catalogue's), else the GPU here, else
    `DEFAULT_GPU`."""
    if name is not None:
        return find_gpu(name, option=option)
    return detect_gpu() or CATALOGUE[DEFAULT_GPU]


def catalogue_markdown() -> str:
    """The catalogue as the Markdown table of docs/concepts/gpus.md (tests keep them equal)."""
    rows = ["| `--gpu` | card | also accepted | arch | SMs | memory | bf16/fp16 | TF32 | FP32 "
            "| bandwidth | measured |",
            "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for g in CATALOGUE.values():
        reported = [f"nvidia-smi {g.reported_mib:,} MiB"] if g.reported_mib else []
        reported += [f"CUDA {g.cuda_total / MiB:,.0f} MiB"] if g.cuda_total else []
        memory = f"{g.memory_gib} GiB" + (f" ({', '.join(reported)})" if reported else "")
        tensor = f"{g.tensor_16 / T:g}" + ("" if g.bf16 else " (fp16 only)")
        rows.append(
            f"| `{g.name}` | {g.label} | {', '.join(f'`{a}`' for a in g.aliases)} | {g.arch} "
            f"| {g.sms} | {memory} | {tensor} | {g.tf32 / T:g} | {g.fp32 / T:g} "
            f"| {g.bandwidth / 1e9:g} GB/s | {', '.join(g.measured) or '-'} |")
    return "\n".join(rows) + "\n"


def sources_markdown() -> str:
    """One line per GPU: where its rates and its reported memory come from."""
    lines = []
    for g in CATALOGUE.values():
        reported = f"; nvidia-smi's total: {g.reported_source}" if g.reported_source else ""
        reported += f"; CUDA's total: {g.cuda_source}" if g.cuda_source else ""
        lines.append(f"- `{g.name}`: {g.source}{reported}")
    return "\n".join(lines) + "\n"
