"""`inspect convert IN OUT`: make a checkpoint load (CPU storages, unwrapped container, clean
keys, chosen dtype), in three phases over one ``ConvertPlan``.

``plan = plan_convert(...)`` checks every output against every input before anything is
written; ``write(plan)`` streams each tensor from IN (one chunk in memory at a time) into
temporary outputs beside OUT; ``verify(plan)`` compares them with IN through torch's and
safetensors' own loaders (and with ``--arch``'s state_dict); only then do they replace OUT,
atomically (io/atomic.py). IN is never overwritten; an existing OUT only with ``force``, and
only if it is a file or a DCP folder this tool wrote. ``shard_size`` writes Hugging Face
style shards plus ``*.index.json``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from torchinspect.checkpoints.plan import (
    CastDtype,
    ConvertOptions,
    ConvertResult,
    plan_convert,
)
from torchinspect.checkpoints.verify import check_source, verify
from torchinspect.checkpoints.write import staged_outputs, write
from torchinspect.io.entries import FilePool


def convert_checkpoint(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    key: str | None = None,
    strip_prefix: Sequence[str] | str = (),
    rename: Sequence[str] | str = (),
    auto_prefix: bool = False,
    target: Mapping[str, Any] | None = None,
    target_name: str | None = None,
    allow_partial: bool = False,
    keep_extra: bool = False,
    dtype: CastDtype | str | None = None,
    allow_overflow: bool = False,
    shard_size: int | str | None = None,
    force: bool = False,
    trust_pickle: bool = False,
    protect: Sequence[str | os.PathLike[str]] = (),
) -> ConvertResult:
    """Convert ``src`` into a CPU state_dict file ``dst`` (.pt/.pth, .safetensors, or a DCP
    folder ``NAME.dcp``/``NAME/``).

    ``src`` is a checkpoint file, a Hugging Face sharded checkpoint (index or folder) or a
    DCP folder. Key changes apply in order: container unwrap (``key``; EMA with
    ``key="model_ema"``), ``strip_prefix``, ``rename`` (``REGEX=REPL`` with ``re.sub``),
    ``auto_prefix`` (the best remap onto ``target``'s keys, or without a target the
    ``module.``/``_orig_mod.`` prefixes every key carries). ``dtype`` casts floating tensors
    only; a value that overflows to inf or underflows to 0 is refused unless
    ``allow_overflow``. Training state is dropped unless ``keep_extra``; scalar entries go to
    a safetensors ``__metadata__``. Modules' ``_extra_state`` entries are kept. Tied tensors
    stay shared in ``.pt`` and are copies in safetensors. ``shard_size`` (bytes, safetensors
    only; or a text such as ``"5GB"``) writes ``NAME-0000i-of-0000N.safetensors`` plus
    ``NAME.safetensors.index.json``. ``strip_prefix`` and ``rename`` take one text or several.

    ``target`` (key -> tensor or TensorMeta, e.g. an architecture's ``state_dict()`` on meta,
    built by the caller) checks that the result loads with strict=True by PyTorch's rules
    (``allow_partial``: every present key loads, some target keys stay unset). ``protect``
    names other files that must not be overwritten (e.g. a report file).

    The result is verified before it replaces ``dst``: reloaded with torch.load /
    safetensors and compared with IN, read the same way, tensor by tensor.
    """
    options = ConvertOptions(
        key=key, strip_prefix=strip_prefix, rename=rename, auto_prefix=auto_prefix, target=target,
        target_name=target_name, allow_partial=allow_partial, keep_extra=keep_extra, dtype=dtype,
        allow_overflow=allow_overflow, shard_size=shard_size, force=force,
        trust_pickle=trust_pickle, protect=protect)
    plan = plan_convert(src, dst, options)
    check_source(plan)
    with FilePool() as files, staged_outputs(plan):
        write(plan, files)
        verify(plan, files)
    return plan.result
