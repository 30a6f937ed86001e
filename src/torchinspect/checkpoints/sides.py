"""Diff sides for `inspect diff` and the target of `inspect convert --arch`: MODEL or CHECKPOINT specs.

checkpoints/diff.py compares two sides from metadata (io/compare.py reads them); resolving a *model* spec needs ``sources``, so
the command core lives here (torch-free until a model is built: a checkpoint-only diff never
imports torch). Each file's format is detected once and passed down.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torchinspect.checkpoints.diff import DiffResult, compare_values, diff_state_dicts
from torchinspect.errors import InspectError
from torchinspect.io.compare import DiffSide, checkpoint_side, model_side, tied_groups
from torchinspect.io.formats import detect_format, suffixes
from torchinspect.io.torch_load import python_path
from torchinspect.sources.case import ModelOptions, make_case
from torchinspect.sources.hf import folder_weights

if TYPE_CHECKING:
    from torchinspect.io.formats import CheckpointFormat

_WEIGHT_SUFFIXES = suffixes(holds=("weights", "layout"))  # named like weights: a missing file


@dataclass(frozen=True)
class Probe:
    """What a spec is: ``weights`` (a checkpoint: file, sharded index/folder, DCP folder)
    with its detected format (None for multi-file layouts), or a model spec."""

    spec: str
    weights: bool
    format: CheckpointFormat | None = None
    model_dir: bool = False  # a Hugging Face model folder (config.json): also a model

    def as_model(self) -> Probe:
        """This model folder as a model (built from its config.json), not its weights."""
        return replace(self, weights=False)


def probe(spec: str) -> Probe:
    """Detect once whether ``spec`` names weights (and their format) or a model."""
    path = Path(spec)
    if path.is_dir() and (path / "config.json").is_file():
        return Probe(spec, folder_weights(path) is not None, model_dir=True)
    if path.is_dir() or (path.is_file() and path.name.endswith(".index.json")):
        return Probe(spec, True)
    if path.is_file() or (path.exists() and not path.is_dir()):  # a FIFO, device: named as such
        fmt = detect_format(path)
        return Probe(spec, not fmt.is_model_archive, fmt)
    if path.suffix in _WEIGHT_SUFFIXES and ":" not in spec:
        raise InspectError(f"{spec}: no such file", hint="check the path")
    return Probe(spec, False)


def arch_state_dict(spec: str, options: ModelOptions | None = None) -> tuple[dict[str, Any], list[str]]:
    """The state_dict of a model spec, built on meta (no memory), and the source's notes."""
    sd, notes, _ = _arch(spec, options)
    return sd, notes


def _arch(spec: str, options: ModelOptions | None) -> tuple[dict[str, Any], list[str], list[list[str]]]:
    opts = replace(options or ModelOptions(), weights=None, arch=None, device="meta")
    case = make_case(spec, options=opts, need_inputs=False)
    return case.model.state_dict(), list(case.notes), tied_groups(case.model)


def resolve_side(spec: str | Probe, *, options: ModelOptions | None = None, key: str | None = None,
                 trust_pickle: bool = False) -> DiffSide:
    """A diff side for a checkpoint (metadata only) or a model spec (its meta state_dict)."""
    p = spec if isinstance(spec, Probe) else probe(spec)
    if p.weights:
        return checkpoint_side(p.spec, key=key, trust_pickle=trust_pickle, fmt=p.format)
    sd, notes, tied = _arch(p.spec, options)
    label = p.spec
    if p.model_dir:  # the folder's own weights are the other side: no need for its note
        label, notes = f"{p.spec} (config.json)", [n for n in notes if not n.startswith("built from config")]
    return model_side(label, sd, notes, tied)


def diff_specs(a: str, b: str | None = None, *, arch: str | None = None,
               options: ModelOptions | None = None, key: str | None = None,
               trust_pickle: bool = False, auto_prefix: bool = False, values: bool = False,
               rtol: float = 1e-5, atol: float = 1e-8) -> DiffResult:
    """``inspect diff A B`` / ``inspect diff CKPT --arch MODEL`` as a library call.

    The model side is the target whatever the order (`diff CKPT MODEL` asks whether CKPT
    loads into MODEL). When most keys fail to match and a remap (prefix, or a wrapper name
    inside the path) would fix them, it is applied only with ``auto_prefix``.
    """
    if b is None and arch is None:
        only = probe(a)
        if only.model_dir and only.weights:  # a model folder: its weights against its config
            return _diff(only.as_model(), only, options, key, trust_pickle, auto_prefix, values,
                         rtol, atol)
        raise InspectError("diff needs two sides: A B, or CHECKPOINT --arch MODEL",
                           hint="e.g. inspect diff resnet18 ckpt.pth, or inspect diff ckpt.pth --arch "
                           "resnet18 (a Hugging Face model folder alone compares its weights with its "
                           "config.json)")
    if b is not None and arch is not None:
        raise InspectError("pass either B or --arch, not both",
                           hint="inspect diff MODEL CKPT is the same as inspect diff CKPT --arch MODEL")
    if b is None:
        target, weights = probe(arch), probe(a)  # type: ignore[arg-type]
        if target.model_dir:  # --arch DIR: the model built from the folder's config.json
            target = target.as_model()
    else:
        target, weights = probe(a), probe(b)
        if target.weights and not weights.weights:
            target, weights = weights, target
    return _diff(target, weights, options, key, trust_pickle, auto_prefix, values, rtol, atol)


def _diff(target: Probe, weights: Probe, options: ModelOptions | None, key: str | None,
          trust_pickle: bool, auto_prefix: bool, values: bool, rtol: float, atol: float) -> DiffResult:
    with python_path(options.python_path if options else ()):
        side_a = resolve_side(target, options=options, key=key, trust_pickle=trust_pickle)
        side_b = resolve_side(weights, options=options, key=key, trust_pickle=trust_pickle)
    result = diff_state_dicts(side_a, side_b, auto_prefix=auto_prefix)
    if values:
        compare_values(result, trust_pickle=trust_pickle, rtol=rtol, atol=atol)
    return result
