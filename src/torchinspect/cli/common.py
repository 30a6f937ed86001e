"""The names a command module needs, in one import (a facade; nothing is defined here).

The CLI's shared parts live by responsibility: cli/boundary.py (the error boundary),
cli/options.py (every shared option, declared once), cli/command.py (``@model_command``,
``@output_command``, output paths), cli/output.py (``emit``: where and how a report is
written) and cli/commands.py (the table of commands).
"""

from __future__ import annotations

from torchinspect.cli.boundary import (
    DEBUG,
    command_errors,
    error_exit,
    exit_status,
    report_stdout,
)
from torchinspect.cli.command import (
    OutputOptions,
    OutputPath,
    as_written,
    model_command,
    output_command,
)
from torchinspect.cli.options import (
    DEVICE_HELP,
    MODEL_FORMS,
    AmpOpt,
    ArchOpt,
    ArgOpt,
    CacheArgOpt,
    CacheOpt,
    DepthOpt,
    ForceOpt,
    GenerateOpt,
    KeyOpt,
    ModelArg,
    ModelsArg,
    OptimizerOpt,
    RecomputeOpt,
    TrainOpt,
    TrustOpt,
    all_opt,
    allow_partial_opt,
    amp_split,
    atol_opt,
    auto_prefix_opt,
    batches_opt,
    dtype_opt,
    gpu_opt,
    rtol_opt,
    shard_size_opt,
    tolerance,
    train_opt,
)
from torchinspect.cli.output import (
    ModelRuns,
    each_model,
    emit,
    emit_results,
    input_files,
    model_file_stem,
)

__all__ = [
    "DEBUG", "DEVICE_HELP", "MODEL_FORMS", "AmpOpt", "ArchOpt", "ArgOpt", "CacheArgOpt",
    "CacheOpt", "DepthOpt", "ForceOpt", "GenerateOpt", "KeyOpt", "ModelArg", "ModelRuns",
    "ModelsArg", "OptimizerOpt", "OutputOptions", "OutputPath", "RecomputeOpt", "TrainOpt",
    "TrustOpt", "all_opt", "allow_partial_opt", "amp_split", "as_written", "atol_opt",
    "auto_prefix_opt", "batches_opt",
    "command_errors", "dtype_opt", "each_model", "emit", "gpu_opt",
    "emit_results", "error_exit", "exit_status", "input_files", "model_command",
    "model_file_stem", "output_command", "report_stdout", "rtol_opt", "shard_size_opt", "tolerance", "train_opt",
]
