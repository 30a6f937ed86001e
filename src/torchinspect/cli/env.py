"""`inspect env`: versions, CUDA/cuDNN, GPUs, CPU threads and optional components."""

from __future__ import annotations

from torchinspect.cli.common import OutputOptions, emit, output_command


@output_command
def env(*, out: OutputOptions) -> None:
    """Show torch/torchvision/Python versions, CUDA, cuDNN, GPUs, CPU threads and optional parts."""
    from torchinspect.env import collect_env
    from torchinspect.report.env import env_report

    emit(env_report(collect_env(), out.format), out)
