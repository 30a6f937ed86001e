"""`inspect env`: versions, CUDA/cuDNN, GPUs, CPU threads and optional components."""

from __future__ import annotations

from typing import Annotated

import typer

from torchinspect.cli.command import output_command
from torchinspect.cli.output import OutputOptions, emit

RuntimeOpt = Annotated[bool | None, typer.Option(
    "--runtime/--no-runtime", show_default=False,
    help="import torch for its runtime facts: CUDA available, cuDNN, GPUs, flags, threads "
    "(default: when an NVIDIA driver is present). Versions never need it.")]


@output_command
def env(runtime: RuntimeOpt = None, *, out: OutputOptions) -> None:
    """Show torch/torchvision/Python versions, CUDA, cuDNN, GPUs, CPU threads and optional parts."""
    from torchinspect.env import collect_env
    from torchinspect.report.env import env_report

    emit(env_report(collect_env(runtime=runtime), out.format), out)
