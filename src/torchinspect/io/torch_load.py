"""The one call to ``torch.load``: weights_only, CPU, mmap for zip files; errors explained.

There is no automatic unsafe retry: a weights-only refusal becomes
:class:`UnsafeCheckpointError` naming the offending globals, and only an explicit
``trust_pickle=True`` (the ``--trust-pickle`` flag) loads a full pickle.
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import pickletools
import struct
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from torchinspect.errors import InspectError, UnsafeCheckpointError, first_line
from torchinspect.io.formats import CheckpointFormat, zip_prefix
from torchinspect.io.state_dict import extract_state_dict
from torchinspect.io.torchzip import MAX_PICKLE_BYTES, NeedsTorch, read_torch_zip_structure
from torchinspect.io.zipcheck import open_zip

_CUT_SHORT = "the download or copy was probably cut short; fetch the file again"


UNRESOLVED = "<unresolvable global>"
_STRING_OPS = frozenset({"STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE", "BINUNICODE",
                         "SHORT_BINUNICODE", "BINUNICODE8"})
_MARK = object()


class _Unknown:
    """A stack value the scan does not track (anything but a string)."""


def _pop_to_mark(stack: list[Any]) -> None:
    while stack:
        if stack.pop() is _MARK:
            return


def scan_pickle_globals(data: bytes, max_pickles: int = 4) -> list[str]:
    """List exactly the ``module.name`` globals a pickle stream imports (nothing runs).

    Walks the opcodes with the stack and the memo tracked (GLOBAL, INST, STACK_GLOBAL with
    its strings from PUT/BINPUT/MEMOIZE and GET/BINGET), so a memoized module name is paired
    with the right attribute. A STACK_GLOBAL whose operands are not plain strings (built at
    load time) is reported as :data:`UNRESOLVED`, never guessed. Reads up to ``max_pickles``
    consecutive pickles (a legacy torch file is several).
    """
    found: list[str] = []
    stream = io.BytesIO(data)
    for _ in range(max_pickles):
        stack: list[Any] = []
        memo: dict[int, Any] = {}
        arg: Any  # pickletools types it as a union of every opcode's argument
        try:
            for op, arg, _pos in pickletools.genops(stream):
                name = op.name
                if name in _STRING_OPS:
                    stack.append(arg.decode("latin1") if isinstance(arg, bytes) else str(arg))
                elif name in ("GLOBAL", "INST"):
                    if name == "INST":
                        _pop_to_mark(stack)
                    found.append(str(arg).replace(" ", "."))
                    stack.append(_Unknown())
                elif name == "STACK_GLOBAL":
                    attr = stack.pop() if stack else None
                    mod = stack.pop() if stack else None
                    ok = isinstance(mod, str) and isinstance(attr, str)
                    found.append(f"{mod}.{attr}" if ok else UNRESOLVED)
                    stack.append(_Unknown())
                elif name == "MARK":
                    stack.append(_MARK)
                elif name in ("PUT", "BINPUT", "LONG_BINPUT"):
                    memo[int(arg)] = stack[-1] if stack else _Unknown()
                elif name == "MEMOIZE":
                    memo[len(memo)] = stack[-1] if stack else _Unknown()
                elif name in ("GET", "BINGET", "LONG_BINGET"):
                    stack.append(memo.get(int(arg), _Unknown()))
                elif name == "DUP":
                    stack.append(stack[-1] if stack else _Unknown())
                elif name == "STOP":
                    break
                else:
                    before = op.stack_before
                    if pickletools.markobject in before:
                        _pop_to_mark(stack)
                        extra = before.index(pickletools.markobject)
                    else:
                        extra = len(before)
                    for _i in range(min(extra, len(stack))):
                        stack.pop()
                    stack.extend(_Unknown() for _ in op.stack_after)
        except Exception:  # noqa: BLE001 - a broken stream just ends the scan
            break
        if stream.tell() >= len(data):
            break
    return list(dict.fromkeys(found))


def unsafe_globals(path: Path, fmt: CheckpointFormat) -> list[str]:
    """Globals in the checkpoint that a weights-only load does not allow."""
    from torchinspect.privtorch import weights_only_allowed

    if fmt is CheckpointFormat.torch_zip:
        archive = open_zip(path)
        prefix = zip_prefix(archive.names)
        if prefix is None:
            return []
        data = archive.read(prefix + "data.pkl", limit=MAX_PICKLE_BYTES)
    else:
        data = path.read_bytes()[: 64 * 1024 * 1024]
    allowed = weights_only_allowed()
    allowed |= set(HARMLESS_GLOBALS)
    return sorted(g for g in scan_pickle_globals(data) if g not in allowed)


#: Harmless globals training scripts put beside the weights (timm's ``args`` Namespace,
#: Lightning's ``pathlib`` paths in ``hyper_parameters``, ``collections`` containers). They are
#: plain data: a weights-only load reads them under ``torch.serialization.safe_globals``.
#: Everything else is still refused.
HARMLESS_GLOBALS: tuple[str, ...] = (
    "argparse.Namespace", "pathlib.PosixPath", "pathlib.WindowsPath", "pathlib.PurePosixPath",
    "pathlib.PureWindowsPath", "pathlib.Path", "collections.defaultdict", "collections.Counter",
    "collections.deque", "collections.OrderedDict",
    # defaultdict factories; protocol-2 pickles (torch.save's default) spell builtins __builtin__
    *(f"{m}.{n}" for m in ("builtins", "__builtin__") for n in ("list", "dict", "set", "int", "float")),
)


def _harmless_objects() -> list[Any]:
    import argparse
    import collections
    import pathlib

    factories: list[Any] = [(t, f"__builtin__.{t.__name__}") for t in (list, dict, set, int, float)]
    return [argparse.Namespace, pathlib.PosixPath, pathlib.WindowsPath, pathlib.PurePosixPath,
            pathlib.PureWindowsPath, pathlib.Path, collections.defaultdict, collections.Counter,
            collections.deque, collections.OrderedDict, list, dict, set, int, float, *factories]


def plain_pickle_error(path: Path) -> InspectError:
    """A ``pickle.dump`` file (not ``torch.save``): torch.load cannot read it whatever flag.
    The globals it would import are named (read statically; nothing is unpickled)."""
    try:
        with open(path, "rb") as fh:
            names = scan_pickle_globals(fh.read(64 * 1024 * 1024))
    except OSError:
        names = []
    shown = f" (it imports {', '.join(names[:8])}{' ...' if len(names) > 8 else ''})" if names else ""
    return InspectError(
        f"{path} is a plain Python pickle (pickle.dump), not a torch.save checkpoint{shown}: "
        "torch.load cannot read it, with or without --trust-pickle",
        hint="such files (e.g. Detectron2 .pkl weights, numpy arrays in a pickle) need the "
        "tool that wrote them; convert them to a torch.save state_dict or .safetensors there",
    )


def torch_load(path: str | os.PathLike[str], fmt: CheckpointFormat, *,
               trust_pickle: bool = False, mmap: bool = True, map_location: Any = "cpu") -> Any:
    """``torch.load`` with weights_only (unless trusted), CPU storages, mmap for zip files.

    Torch's own warnings (TypedStorage, pickle protocol) are silenced: the tool reports what
    matters itself.
    """
    import warnings

    import torch

    path = Path(path)
    if fmt is CheckpointFormat.pickle:
        raise plain_pickle_error(path)
    if fmt is CheckpointFormat.torch_zip:
        check_torch_zip(path)
    use_mmap = mmap and fmt is CheckpointFormat.torch_zip
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if trust_pickle:
                return torch.load(str(path), map_location=map_location, weights_only=False,
                                  mmap=use_mmap)
            with torch.serialization.safe_globals(_harmless_objects()):
                return torch.load(str(path), map_location=map_location, weights_only=True,
                                  mmap=use_mmap)
    except pickle.UnpicklingError as exc:
        if trust_pickle:
            raise InspectError(f"{path}: cannot unpickle: {first_line(exc)}",
                               hint="the file is corrupt or not a torch.save checkpoint") from None
        bad = unsafe_globals(path, fmt)
        if bad:
            raise UnsafeCheckpointError(str(path), bad) from None
        raise InspectError(
            f"{path}: a weights-only load refused the file: {_clean_reason(exc)}",
            hint="only if you trust this file and where it came from, pass --trust-pickle "
            "(it runs code from the file)",
        ) from None
    except ModuleNotFoundError as exc:
        raise InspectError(
            f"{path}: the pickled model needs the Python module {exc.name!r}, which is not importable",
            hint=f"pass --python-path DIR (the folder that holds {exc.name}.py or its package), "
            "run from that folder, or set PYTHONPATH=DIR",
        ) from None
    except AttributeError as exc:
        if trust_pickle and "Can't get attribute" in str(exc):
            raise InspectError(f"{path}: the pickled model needs a class that is not importable "
                               f"({first_line(exc)})",
                               hint="pass --python-path DIR (the folder that holds the model's "
                               "code), run from it, or set PYTHONPATH=DIR") from None
        raise _explain(path, fmt, exc) from None
    except (EOFError, RuntimeError, OSError, ValueError, zipfile.BadZipFile, struct.error,
            KeyError, IndexError, TypeError, MemoryError, AssertionError) as exc:
        raise _explain(path, fmt, exc) from None
    except Exception as exc:  # noqa: BLE001 - torch's loader on corrupt bytes (found by fuzzing)
        raise _explain(path, fmt, exc) from None


def check_torch_zip(path: Path) -> None:
    """What torch.load of a zip checkpoint may trust: the archive passes io/zipcheck.py's rule
    (no duplicate members, headers agree, no compression bomb) and, when the restricted
    reader understands the pickle, every storage record holds the bytes the pickle claims and
    every tensor lies inside its storage. Raises InspectError; nothing from the file runs."""
    try:
        read_torch_zip_structure(path)
    except NeedsTorch:  # unknown globals or compressed records; the archive was validated first
        pass


@contextlib.contextmanager
def python_path(dirs: Sequence[str | os.PathLike[str]]) -> Iterator[None]:
    """``--python-path DIR``: ``DIR`` first on ``sys.path`` while a whole-model pickle of a
    user class loads (``--trust-pickle``), and ``sys.path`` exactly as before afterwards
    (modules imported meanwhile stay imported, so the model keeps working)."""
    import sys

    if not dirs:
        yield
        return
    for d in dirs:
        if not Path(d).is_dir():
            raise InspectError(f"--python-path {d}: no such folder",
                               hint="pass the folder that holds the model's module (its .py file or package)")
    saved = list(sys.path)
    sys.path[:0] = [str(Path(d).resolve()) for d in dirs]
    try:
        yield
    finally:
        sys.path[:] = saved


def _clean_reason(exc: BaseException) -> str:
    text = str(exc)
    for line in text.splitlines():
        if "Unsupported global" in line or "Unsupported operand" in line:
            return line.strip()[:300]
    return first_line(exc)


def _explain(path: Path, fmt: CheckpointFormat, exc: BaseException) -> InspectError:
    msg = first_line(exc)
    low = msg.lower()
    if isinstance(exc, MemoryError):
        return InspectError(f"{path}: ran out of memory while loading", hint="free memory or use a machine with more RAM")
    if isinstance(exc, EOFError) or "ran out of input" in low or "unexpected eof" in low:
        return InspectError(f"{path} ends early (truncated checkpoint)", hint=_CUT_SHORT)
    if "central directory" in low or "failed reading" in low or "failed finding" in low:
        return InspectError(f"{path}: truncated or corrupt zip checkpoint ({msg})", hint=_CUT_SHORT)
    if "invalid magic number" in low:
        return InspectError(f"{path}: not a torch.save checkpoint ({msg})",
                            hint="pass a file written by torch.save, or a .safetensors file")
    if "cuda" in low and "deserialize" in low:
        return InspectError(f"{path}: storages saved on a GPU could not be mapped to CPU ({msg})",
                            hint="report this; the reader maps every storage to CPU")
    if fmt is CheckpointFormat.torch_zip and ("size" in low or "storage" in low or "offset" in low):
        return InspectError(f"{path}: corrupt or truncated checkpoint ({msg})", hint=_CUT_SHORT)
    return InspectError(f"{path}: cannot read checkpoint ({type(exc).__name__}: {msg})",
                        hint="the file is corrupt, truncated, or not a torch.save checkpoint")


def load_state_dict_with_devices(path: Path, fmt: CheckpointFormat, key: str | None,
                                 trust_pickle: bool) -> tuple[Any, dict[str, Any], str | None,
                                                              dict[int, str]]:
    """Weights-only load (mmap, on CPU) that also records the device each storage was saved on.

    Returns ``(obj, state_dict, key_used, saved_location_by_storage_data_ptr)``.
    """
    locations: dict[int, str] = {}

    def record(storage: Any, location: str) -> Any:
        locations[storage.data_ptr()] = location
        return storage

    obj = torch_load(path, fmt, trust_pickle=trust_pickle, mmap=True, map_location=record)
    sd, used = extract_state_dict(obj, key, source=str(path))
    return obj, sd, used, locations
