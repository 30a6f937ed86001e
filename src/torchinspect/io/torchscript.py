"""What a TorchScript archive holds, read without running it.

``torch.jit.load`` runs the archive's TorchScript: every class's ``__setstate__`` executes on
load, and TorchScript can call ``torch.from_file(path, shared=True, size=...)``, which creates
or overwrites a file of the author's choosing. So without ``--trust-pickle`` a TorchScript
file is never loaded (:func:`torchscript_refusal`); what can be read without running it is
its ``data.pkl``: the module tree with every tensor's name, shape and dtype. That pickle is
read by the same restricted unpickler as a torch.save checkpoint (io/torchzip.py), with the
archive's own classes (``__torch__.*``) replaced by an inert record of their state.
"""

from __future__ import annotations

import io
import pickle
import struct
from collections import OrderedDict
from pathlib import Path
from typing import Any

from torchinspect.errors import InspectError
from torchinspect.io.torchzip import (
    MetaUnpickler,
    NeedsTorch,
    TensorRef,
    TorchZip,
    check_views,
    iter_tensor_refs,
    open_torch_zip,
)

#: The note every listing of a TorchScript file carries.
NOT_LOADED_NOTE = ("TorchScript archive NOT loaded (loading runs code from the file); tensors "
                   "listed from its data.pkl without running it. --trust-pickle loads it")


def torchscript_refusal(path: str | Path, *, listing: bool = True) -> InspectError:
    """The one-line refusal for commands that need the TorchScript module itself."""
    hint = (f"`inspect params {path}` lists its tensors without running it; " if listing else "")
    return InspectError(
        f"{path}: a TorchScript archive runs code from the file when it is loaded (its "
        "__setstate__ methods); refused without --trust-pickle",
        hint=hint + "only if you trust this file and where it came from, pass --trust-pickle "
        "(it runs code from the file)")


class ScriptObject:
    """Stand-in for an instance of one of the archive's ``__torch__`` classes: its state
    (usually a dict of attributes) is kept, none of its code exists here."""

    qualname = "__torch__"

    def __init__(self, *args: Any) -> None:
        self.state: Any = args or None

    def __setstate__(self, state: Any) -> None:
        self.state = state


def _same(value: Any, *_: Any) -> Any:
    return value


# torch.jit._pickle helpers TorchScript writes around typed lists: identity stand-ins
_JIT_PICKLE = {n: _same for n in ("build_intlist", "build_floatlist", "build_boollist",
                                  "build_tensorlist", "build_doublelist", "restore_type_tag")}


class ScriptUnpickler(MetaUnpickler):
    """:class:`MetaUnpickler` plus the archive's ``__torch__`` classes as inert records."""

    def __init__(self, file: Any) -> None:
        super().__init__(file, encoding="utf-8")
        self._classes: dict[str, type] = {}

    def find_class(self, module: str, name: str) -> Any:
        if module == "__torch__" or module.startswith("__torch__."):
            qual = f"{module}.{name}"
            cls = self._classes.get(qual)
            if cls is None:
                cls = self._classes[qual] = type("ScriptObject", (ScriptObject,), {"qualname": qual})
            return cls
        if module == "torch.jit._pickle" and name in _JIT_PICKLE:
            return _JIT_PICKLE[name]
        return super().find_class(module, name)


def _flatten(obj: Any, prefix: str, out: OrderedDict[str, TensorRef], depth: int = 0) -> None:
    if depth > 200:
        raise NeedsTorch("module tree nested too deep")
    if isinstance(obj, TensorRef):
        out[prefix or "tensor"] = obj
    elif isinstance(obj, ScriptObject):
        _flatten(obj.state, prefix, out, depth + 1)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), out, depth + 1)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _flatten(v, f"{prefix}.{i}" if prefix else str(i), out, depth + 1)


def read_torchscript_structure(path: str | Path) -> tuple[OrderedDict[str, TensorRef], TorchZip]:
    """Every tensor of the archive's module tree by attribute path (``layer1.0.weight``),
    as :class:`TensorRef` (shape, dtype, where its bytes are); no code from the file runs.

    Raises InspectError when the pickle holds anything beyond plain data, tensors and the
    archive's own classes (quantized tensors, say): then only ``--trust-pickle`` can read it.
    """
    archive, pkl = open_torch_zip(path)
    try:
        root = ScriptUnpickler(io.BytesIO(pkl)).load()
    except NeedsTorch as exc:
        raise InspectError(f"{path}: the TorchScript archive's data.pkl needs {exc} to be read, "
                           "which this tool does not read without running the file",
                           hint="only if you trust this file, pass --trust-pickle (it runs code "
                           "from the file)") from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError,
            KeyError, struct.error, RecursionError, OverflowError) as exc:
        raise InspectError(f"{path}: the TorchScript archive's data.pkl is not readable "
                           f"({type(exc).__name__})", hint="re-save it with torch.jit.save") from None
    tensors: OrderedDict[str, TensorRef] = OrderedDict()
    try:
        _flatten(root, "", tensors)
    except NeedsTorch as exc:
        raise InspectError(f"{path}: {exc}", hint="re-save it with torch.jit.save") from None
    refs = iter_tensor_refs(list(tensors.values()))
    for ref in refs:
        held = archive.record_sizes.get(ref.storage.key)
        if held is None:
            archive.storage_offset(ref.storage.key)  # raises: missing
        elif held != ref.storage.nbytes:
            raise InspectError(f"{archive.path}: storage data/{ref.storage.key} holds {held:,} "
                               f"bytes, its tensors say {ref.storage.nbytes:,} (corrupt archive)",
                               hint="the file is corrupt; fetch it again")
    check_views(archive.path, refs)
    return tensors, archive
