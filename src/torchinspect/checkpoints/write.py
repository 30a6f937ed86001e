"""`inspect convert`, phase 2: write the planned entries into temporary outputs.

:func:`staged_outputs` reserves a temporary path beside every output (io/atomic.py; they
replace the outputs only when the block ends without an error, after verification);
:func:`write` streams each tensor from IN into them, one chunk in memory at a time.
"""

from __future__ import annotations

import contextlib
import json
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from torchinspect.checkpoints.plan import (
    DCP_MARK,
    ConvertPlan,
    Entry,
    OutputKind,
    check_dcp_target,
    index_path,
    needs_materialized,
)
from torchinspect.dtypes import short_name
from torchinspect.errors import ExitStatus, InspectError, first_line
from torchinspect.io.atomic import atomic_folder, atomic_path, is_disk_full
from torchinspect.io.compare import tensor_value
from torchinspect.io.entries import FilePool
from torchinspect.io.writers import torch_dtype, write_pt_stream, write_safetensors_stream


@contextlib.contextmanager
def staged_outputs(plan: ConvertPlan) -> Iterator[ConvertPlan]:
    """Fill ``plan.staged`` (output -> temporary path); on a clean exit every output is put
    in place (the shards before their index), on an error none is."""
    protect = (plan.src, *plan.inp.files, *plan.protect)
    with contextlib.ExitStack() as stack:
        if plan.kind is OutputKind.dcp:
            # with --force, what is at OUT is checked again just before the swap
            recheck = (lambda d: check_dcp_target(d, force=True)) if plan.force else None
            plan.staged[plan.dst] = stack.enter_context(atomic_folder(
                plan.dst, force=plan.force, replaceable=recheck))
        elif plan.shards:  # entered first, so the index is committed last
            index = index_path(plan.dst)
            plan.staged[index] = stack.enter_context(atomic_path(index, force=plan.force,
                                                                 protect=protect))
            for name, _ in plan.shards:
                out = plan.dst.with_name(name)
                plan.staged[out] = stack.enter_context(atomic_path(out, force=plan.force,
                                                                   protect=protect))
        else:
            plan.staged[plan.dst] = stack.enter_context(atomic_path(plan.dst, force=plan.force,
                                                                    protect=protect))
        yield plan
    _remove_replaced_shards(plan, protect)


def _remove_replaced_shards(plan: ConvertPlan, protect: tuple[Any, ...]) -> None:
    """After the new index is in place: the old set's shard files it no longer names (never
    an input). A kill before this leaves only unreferenced files behind, never a mix."""
    keep = {Path(p).resolve() for p in protect if p is not None}
    for old in plan.replaced_shards:
        if old.resolve() not in keep:
            with contextlib.suppress(OSError):
                old.unlink()


def write(plan: ConvertPlan, files: FilePool) -> None:
    """Write every staged output of ``plan``; refuse a cast that overflows."""
    overflow = plan.result.overflow
    if plan.kind is OutputKind.dcp:
        _write_dcp(plan, files)
    elif plan.shards:
        _write_shards(plan, files)
    elif plan.kind is OutputKind.safetensors:
        write_safetensors_stream(plan.staged[plan.dst], [e.out(files, overflow) for e in plan.tensors],
                                 plan.result.metadata)
    elif plan.keep_container or needs_materialized(plan.entries):
        _write_pt_materialized(plan, files)
    else:
        write_pt_stream(plan.staged[plan.dst], [e.out(files, overflow) for e in plan.entries])
    check_overflow(plan)


def _write_shards(plan: ConvertPlan, files: FilePool) -> None:
    """Hugging Face layout: ``NAME-0000i-of-0000N.safetensors`` (``"format": "pt"``) and
    ``NAME.safetensors.index.json`` (``metadata.total_size``, ``weight_map``)."""
    meta = {**plan.result.metadata, "format": "pt"}
    weight_map: dict[str, str] = {}
    for name, group in plan.shards:
        write_safetensors_stream(plan.staged[plan.dst.with_name(name)],
                                 [e.out(files, plan.result.overflow) for e in group], meta)
        weight_map.update({e.name: name for e in group})
    total = sum(e.nbytes for e in plan.tensors)
    index = {"metadata": {"total_size": total, **plan.result.metadata},
             "weight_map": dict(sorted(weight_map.items()))}
    plan.staged[index_path(plan.dst)].write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")
    plan.result.shards = [name for name, _ in plan.shards]
    plan.result.notes.append(f"{len(plan.shards)} shard(s) of at most {plan.shard_size:,} bytes; "
                             f"index {index_path(plan.dst).name}")


def _write_pt_materialized(plan: ConvertPlan, files: FilePool) -> None:
    """torch.save of the loaded values: --keep-extra (the container as loaded, with the
    converted state_dict at its key), or quantized / tensor-holding extra-state entries."""
    import torch

    inp = plan.inp
    if plan.keep_container and inp.container_key and "/" in inp.container_key:
        raise InspectError(f"--keep-extra with a nested container key {inp.container_key!r}",
                           hint="drop --keep-extra, or choose the inner dict with --key")
    sd: dict[str, Any] = {}
    for e in plan.entries:
        v = tensor_value(e.src, files)
        if e.src.is_tensor and e.dtype != e.src.dtype:
            v = _cast_bytes(e, files, plan.result.overflow) if e.nbytes else v.to(torch_dtype(e.dtype))
        sd[e.name] = v
    obj = {inp.container_key or "state_dict": sd, **inp.extras} if plan.keep_container else sd
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.save(obj, plan.staged[plan.dst])


def _cast_bytes(e: Entry, files: FilePool, overflow: dict[str, tuple[int, int]]) -> Any:
    import torch

    data = bytearray(b"".join(bytes(c) for c in e.chunks(files, overflow)))
    return torch.frombuffer(data, dtype=torch_dtype(e.dtype)).reshape(e.src.shape)


def check_overflow(plan: ConvertPlan) -> None:
    result, cast_to = plan.result, plan.cast_to
    if not result.overflow:
        return
    inf = sum(a for a, _ in result.overflow.values())
    zero = sum(b for _, b in result.overflow.values())
    worst = max(result.overflow, key=lambda k: result.overflow[k])
    flag = short_name(cast_to or "") or cast_to
    text = (f"--dtype {flag}: {inf:,} value(s) overflow to inf and {zero:,} underflow to 0 "
            f"in {len(result.overflow)} tensor(s) (e.g. {worst!r}: {result.overflow[worst][0]:,} "
            f"to inf, {result.overflow[worst][1]:,} to 0)")
    if inf and not plan.allow_overflow:  # underflow of tiny values is reported, not refused
        better = "bf16 keeps float32's range" if cast_to == "float16" else "keep fp32"
        raise InspectError(text, hint=f"{better}: try --dtype bf16, or pass --allow-overflow to "
                           "write it anyway; OUT was not written", status=ExitStatus.CHECK_FAILED)
    result.notes.append(text + (" (--allow-overflow)" if inf else ""))


# ------------------------------------------------------------------ DCP folders


def _write_dcp(plan: ConvertPlan, files: FilePool) -> None:
    """A torch.distributed.checkpoint folder (``torch_save_to_dcp``'s layout) written with
    ``dcp.save(no_dist=True)`` into the staged folder, then marked as this tool's output."""
    import torch
    import torch.distributed.checkpoint as dcp

    # placeholders with the right shape/dtype (untouched: no RAM) for DCP's planning; each
    # tensor's bytes are read when DCP's writer asks for it (_StreamingSavePlanner)
    sd: dict[str, Any] = {}
    by_name: dict[str, Entry] = {}
    for e in plan.entries:
        if not e.src.is_tensor:
            sd[e.name] = e.src.value
            continue
        sd[e.name] = torch.empty(e.src.shape, dtype=torch_dtype(e.dtype))
        by_name[e.name] = e
    folder = plan.staged[plan.dst]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dcp.save(sd, storage_writer=dcp.FileSystemWriter(str(folder), single_file_per_rank=False),
                     planner=_streaming_save_planner(by_name, files, plan.result.overflow),
                     no_dist=True)
    except BaseException as exc:  # CheckpointException is a BaseException wrapping the cause
        raise _dcp_error(exc, plan.dst) from None
    (folder / DCP_MARK).write_text(json.dumps({"written_by": "inspect convert",
                                               "source": str(plan.src)}) + "\n", encoding="utf-8")


def _dcp_error(exc: BaseException, dst: Path) -> BaseException:
    """Ctrl-C stays Ctrl-C (exit 130); a full disk stays itself (io/atomic names the file);
    anything else DCP's writer raised is one line."""
    failures = getattr(exc, "failures", None)
    causes = [f[0] if isinstance(f, tuple) else f for f in failures.values()] \
        if isinstance(failures, dict) else [exc]
    if any(isinstance(c, KeyboardInterrupt) for c in causes):
        return KeyboardInterrupt()
    if is_disk_full(exc) or not isinstance(failures, dict):
        return exc
    return InspectError(f"{dst}: writing the DCP folder failed: {first_line(causes[0])}",
                        hint="report this; OUT was not written", status=ExitStatus.INTERNAL)


def _streaming_save_planner(by_name: dict[str, Entry], files: FilePool,
                            overflow: dict[str, tuple[int, int]]) -> Any:
    """A DCP save planner whose tensors are read from IN (cast on the fly) only when the
    writer asks for them, one at a time: peak memory is one tensor, not the checkpoint."""
    import torch
    from torch.distributed.checkpoint.default_planner import DefaultSavePlanner

    class _StreamingSavePlanner(DefaultSavePlanner):
        def lookup_object(self, index: Any) -> Any:
            e = by_name.get(index.fqn)
            if e is None:
                return super().lookup_object(index)
            if not e.nbytes:
                return torch.empty(e.src.shape, dtype=torch_dtype(e.dtype))
            buf = bytearray(e.nbytes)
            pos = 0
            for chunk in e.chunks(files, overflow):
                view = memoryview(chunk).cast("B")
                buf[pos:pos + view.nbytes] = view
                pos += view.nbytes
            if index.offset is not None and any(index.offset):
                raise RuntimeError(f"unexpected chunk offset for {index.fqn!r}")
            return torch.frombuffer(buf, dtype=torch_dtype(e.dtype)).reshape(e.src.shape)

    return _StreamingSavePlanner()
