"""Read a torch.export ``.pt2`` archive without running anything from it.

``torch.export.load`` is not safe on an untrusted file: it unpickles pickled weights,
constants and objects with ``weights_only=False``, retries failed sample inputs without the
restriction, falls back to a legacy reader (another unpickler) when the new one fails, and
``dlopen()``s AOTInductor libraries it extracts. Its JSON deserializer is not safe either:
symbolic sizes go through ``sympy.sympify`` (an ``eval``), guard strings are ``exec``-ed by
``ExportedProgram.module()``, and operator names resolve to any attribute of ``torch``.

So this module reads the file once into memory, validates the zip (io/zipcheck.py), accepts
only the exact member layout ``torch.export.save`` writes (:func:`layout_problems`), checks
every string of the program that reaches an evaluator against a grammar
(:func:`program_problems`), builds the weights and constants from the raw member bytes
itself, unpickles sample inputs with ``weights_only=True`` from those bytes, and only then
hands the checked pieces to torch's ``ExportedProgramDeserializer``. Anything outside the
allowlist is refused without ``--trust-pickle``, naming the member.
"""

from __future__ import annotations

import ast
import io
import json
import re
from dataclasses import dataclass, field
from typing import Any

from torchinspect.errors import InspectError, UnsafeCheckpointError
from torchinspect.io.jsonfile import depth as json_depth
from torchinspect.io.regular import read_regular
from torchinspect.io.zipcheck import ZipArchive, ZipMember, check_zip_bytes, open_zip_bytes

#: The largest .pt2 read into memory (its weights are held there anyway).
MAX_PT2_BYTES = 64 * 1024 ** 3
#: A config, program or sample-inputs member larger than this is refused unread.
MAX_MEMBER_BYTES = 256 * 1024 * 1024
_MAX_JSON_DEPTH = 200
_MAX_DIMS = 64

_MODEL = "model"
_FIXED = {"archive_format", "archive_version", "byteorder", ".data/version",
          ".data/serialization_id"}
_PATTERNS = {
    "program": re.compile(r"models/([A-Za-z0-9_]+)\.json"),
    "weights_config": re.compile(r"data/weights/([A-Za-z0-9_]+)_weights_config\.json"),
    "weight": re.compile(r"data/weights/(weight_[0-9]+)"),
    "constants_config": re.compile(r"data/constants/([A-Za-z0-9_]+)_constants_config\.json"),
    "constant": re.compile(r"data/constants/(tensor_[0-9]+)"),
    "sample_inputs": re.compile(r"data/sample_inputs/([A-Za-z0-9_]+)\.pt"),
    "extra": re.compile(r"extra/[A-Za-z0-9_.\-]+"),
}
# members torch reads with code-running readers: named so the refusal says why
_NEEDS_TRUST = (
    (re.compile(r"data/aotinductor/"), "an AOTInductor package (compiled native code, loaded "
                                       "with dlopen)"),
    (re.compile(r"data/(weights|constants)/[^/]+\.pt"), "a legacy pickled payload"),
    (re.compile(r"data/constants/(custom_obj|opaque_obj)_"), "a pickled object"),
    (re.compile(r"(executorch|mtia)/"), "a backend payload this tool does not read"),
)
_LEGACY_ROOT = {"version", "serialized_exported_program.json", "serialized_state_dict.pt",
                "serialized_constants.pt", "serialized_example_inputs.pt"}


class RefusedArchiveError(UnsafeCheckpointError):
    """The archive holds something only a code-running reader loads (exit 2, one line)."""

    def __init__(self, path: str, reasons: list[str]) -> None:
        shown = "; ".join(reasons[:4]) + (f"; and {len(reasons) - 4} more" if len(reasons) > 4 else "")
        InspectError.__init__(self, f"{path}: refused without --trust-pickle: {shown}", _TRUST_HINT)
        self.path = path
        self.globals = reasons


@dataclass
class Pt2Layout:
    """The validated archive: its bytes and, by role, the member names relative to its folder."""

    archive: ZipArchive
    root: str  # "name/" that every member starts with
    members: dict[str, ZipMember]  # relative name -> member
    needs_trust: list[str]  # members only a code-running reader loads, each with why
    parsed: dict[str, Any] = field(default_factory=dict)  # member -> its parsed content


def _bad_name(name: str) -> str | None:
    parts = name.split("/")
    if name.startswith("/") or re.match(r"[A-Za-z]:", name) or "\\" in name:
        return "an absolute path"
    if any(p in ("..", ".") for p in parts):
        return "a '..' or '.' component"
    if any(not p for p in parts[:-1]) or not parts[-1] and len(parts) == 1:
        return "an empty path component"
    if any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in name):
        return "a control character"
    return None


def read_layout(path: str) -> Pt2Layout:
    """Read ``path`` once and check its members against the layout torch.export.save writes.

    Raises InspectError for a name no writer produces (absolute, ``..``, outside the archive's
    folder, unknown); members that only a code-running reader loads are listed in
    ``needs_trust`` (the caller refuses them without ``--trust-pickle``)."""
    data = read_regular(path, limit=MAX_PT2_BYTES)
    archive = open_zip_bytes(data, path)
    names = archive.names
    for name in names:
        if why := _bad_name(name):
            raise InspectError(f"{path}: zip member {name!r} has {why}; no .pt2 writer makes one",
                               hint="the file was built to write or read outside its folder; "
                               "do not load it")
    root = names[0].split("/", 1)[0] + "/" if names and "/" in names[0] else ""
    needs_trust: list[str] = []
    if not root or any(n in _LEGACY_ROOT for n in names):
        legacy = [n for n in names if n in _LEGACY_ROOT]
        needs_trust.append(f"{legacy[0] if legacy else names[0] if names else path} "
                           "(legacy pre-2.7 .pt2 format, read only by an unrestricted unpickler)")
    rel: dict[str, ZipMember] = {}
    for name in names:
        if not name.startswith(root):
            if name not in _LEGACY_ROOT:
                raise InspectError(f"{path}: zip member {name!r} lies outside the archive's "
                                   f"folder {root!r}", hint="a .pt2 keeps every member in one "
                                   "folder; re-save it with torch.export.save")
            continue
        r = name[len(root):]
        if not r or r.endswith("/"):
            continue  # a folder entry holds no bytes
        reason = next((why for pat, why in _NEEDS_TRUST if pat.match(r)), None)
        if reason:
            needs_trust.append(f"{r} ({reason})")
        elif r not in _FIXED and not any(p.fullmatch(r) for p in _PATTERNS.values()):
            raise InspectError(f"{path}: unknown member {r!r} in a .pt2 archive",
                               hint="only the members torch.export.save writes are read; "
                               "re-save it with torch.export.save")
        rel[r] = archive.members[name]
    for kind in ("program", "weights_config", "constants_config", "sample_inputs"):
        for r in rel:
            m = _PATTERNS[kind].fullmatch(r)
            if m and m.group(1) != _MODEL:
                needs_trust.append(f"{r} (a second program {m.group(1)!r}: only 'model' is read)")
    return Pt2Layout(archive, root, rel, needs_trust)


def _read(layout: Pt2Layout, rel: str) -> bytes:
    return layout.archive.read(layout.root + rel, limit=MAX_MEMBER_BYTES)


def _json(layout: Pt2Layout, rel: str) -> Any:
    if rel in layout.parsed:
        return layout.parsed[rel]
    raw = _read(layout, rel)
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError):
        raise _unreadable(layout, rel, "not valid JSON") from None
    if json_depth(obj) > _MAX_JSON_DEPTH:
        raise _unreadable(layout, rel, f"nested over {_MAX_JSON_DEPTH} levels")
    layout.parsed[rel] = obj
    return obj


def _unreadable(layout: Pt2Layout, rel: str, why: str) -> InspectError:
    return InspectError(f"{layout.archive.path}: member {rel} is {why}",
                        hint="the .pt2 is damaged or was not written by torch.export.save")


# --------------------------------------------------------------------- payload configs


def config_problems(layout: Pt2Layout) -> list[str]:
    """Entries of the weights/constants configs that only a code-running reader loads."""
    bad: list[str] = []
    for rel in (f"data/weights/{_MODEL}_weights_config.json",
                f"data/constants/{_MODEL}_constants_config.json"):
        if rel not in layout.members:
            continue
        config = _json(layout, rel)
        entries = config.get("config") if isinstance(config, dict) else None
        if not isinstance(entries, dict):
            raise _unreadable(layout, rel, "not a payload config")
        for fqn, meta in entries.items():
            if not isinstance(meta, dict):
                raise _unreadable(layout, rel, f"not a payload config (entry {fqn!r})")
            if meta.get("use_pickle"):
                bad.append(f"{rel}: {fqn} (pickled)")
            elif not str(meta.get("path_name", "")).startswith(("weight_", "tensor_")):
                bad.append(f"{rel}: {fqn} (pickled object)")
    return bad


def sample_input_problems(layout: Pt2Layout) -> list[str]:
    rel = f"data/sample_inputs/{_MODEL}.pt"
    if rel not in layout.members:
        return []
    try:
        _sample_inputs(layout)
    except _NeedsTrust as exc:
        return [str(exc)]
    return []


class _NeedsTrust(Exception):
    pass


def _sample_inputs(layout: Pt2Layout) -> Any:
    import torch

    rel = f"data/sample_inputs/{_MODEL}.pt"
    if rel not in layout.members:
        return None
    if rel in layout.parsed:
        return layout.parsed[rel]
    data = _read(layout, rel)
    if not data:
        return {}
    if data.startswith(b"PK"):  # a torch.save zip inside the archive: the same zip rule
        check_zip_bytes(data, f"{layout.archive.path}: {rel}")
    try:
        obj = torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    except Exception:
        raise _NeedsTrust(f"{rel} (sample inputs need an unrestricted unpickler)") from None
    if not isinstance(obj, (tuple, dict)):
        raise _unreadable(layout, rel, f"a {type(obj).__name__}, not sample inputs")
    layout.parsed[rel] = obj
    return obj


# --------------------------------------------------------------------- the program JSON

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PLAIN = re.compile(r"[A-Za-z0-9_.+\-]*")  # names, FQNs, dtypes, devices, versions
#: keys whose string values are free text, never evaluated (node metadata, string arguments)
_FREE_TEXT = {"metadata", "as_string", "as_strings", "stack_trace", "nn_module_stack",
              "source_fn_stack", "torch_fn", "custom"}
_OP_NAMESPACES = ("torch.ops.aten.", "torch.ops.prims.", "torch.ops.higher_order.",
                  "torch.ops.quantized_decomposed.", "torch.ops.torchvision.")
_OP_DENIED = re.compile(r"torch\.ops\.aten\.(from_file|save|_?load\w*)(\.|$)")
_OPERATOR = {"getitem", "add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "neg", "pos",
             "abs", "eq", "ne", "lt", "le", "gt", "ge", "and_", "or_", "xor", "not_", "invert",
             "lshift", "rshift"}
_MATH = {"ceil", "floor", "trunc", "sqrt", "exp", "log", "sin", "cos", "tan", "tanh", "isnan",
         "isinf", "isfinite", "fabs"}
_SYMPY_CALLS = {"FloorDiv", "ModularIndexing", "Where", "PythonMod", "Mod", "CleanDiv",
                "CeilToInt", "FloorToInt", "CeilDiv", "LShift", "RShift", "PowByNatural",
                "FloatPow", "FloatTrueDiv", "IntTrueDiv", "IsNonOverlappingAndDenseIndicator",
                "TruncToFloat", "TruncToInt", "RoundToInt", "RoundDecimal", "ToFloat", "Identity",
                "Max", "Min", "Abs", "Eq", "Ne", "Lt", "Le", "Gt", "Ge", "And", "Or", "Not",
                "floor", "ceiling", "sqrt", "Piecewise", "Symbol", "ITE", "Integer", "Rational", "Float",
                "OpaqueUnaryFn_sqrt", "BitwiseFn_bitwise_and", "BitwiseFn_bitwise_or"}
_SYMBOL_ASSUMPTIONS = {"positive", "negative", "integer", "real", "nonnegative", "nonpositive",
                       "finite", "zero", "nonzero", "rational", "even", "odd"}
_GUARD_ATTRS = {"size", "stride", "storage_offset", "dim", "numel", "inf", "nan", "isnan",
                "isinf", "floor", "ceil", "sqrt", "trunc", "is_contiguous"}
_MAX_TEXT = 1 << 16


def _operator_ok(target: str) -> bool:
    if target.startswith(_OP_NAMESPACES):
        return bool(re.fullmatch(r"[A-Za-z0-9_.]+", target)) and not _OP_DENIED.match(target)
    if target.startswith("_operator."):
        return target[len("_operator."):] in _OPERATOR
    if target.startswith("math."):
        return target[len("math."):] in _MATH
    return bool(re.fullmatch(r"torch\.(_?sym_[a-z_]+)", target))


def _allowed_ast(text: str, check: Any) -> bool:
    if len(text) > _MAX_TEXT:
        return False
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return all(check(node) for node in ast.walk(tree))


_ARITH = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.Load, ast.operator,
          ast.unaryop, ast.boolop, ast.cmpop)


def _sympy_node_ok(node: ast.AST) -> bool:
    """sympify's input: arithmetic on numbers, symbols and the shape functions torch emits.
    No attributes, subscripts, lambdas, keywords or calls of anything else."""
    if isinstance(node, _ARITH):
        return True
    if isinstance(node, ast.Constant):
        return type(node.value) in (int, float, bool) or (
            isinstance(node.value, str) and bool(_IDENT.fullmatch(node.value)))
    if isinstance(node, ast.Name):
        return not node.id.startswith("_")
    if isinstance(node, ast.keyword):
        return node.arg in _SYMBOL_ASSUMPTIONS
    if isinstance(node, ast.Call):
        return isinstance(node.func, ast.Name) and _sympy_class(node.func.id)
    return False


def _sympy_class(name: str) -> bool:
    """``name`` is one of torch's shape functions or a sympy expression class (``Add``,
    ``Integer``, ``Symbol``: constructing one evaluates nothing but its checked arguments)."""
    if name in _SYMPY_CALLS:
        return True
    if name.startswith("_"):
        return False
    import sympy

    from torchinspect.privtorch import shape_functions

    obj = getattr(shape_functions(), name, None) or getattr(sympy, name, None)
    return isinstance(obj, type) and issubclass(obj, sympy.Basic)


def _guard_node_ok(node: ast.AST) -> bool:
    """A guard torch exec()s in ExportedProgram.module(): comparisons of input sizes
    (``L['x'].size()[0] >= 2``), ``math.isnan``, numbers. No other names or calls."""
    if isinstance(node, _ARITH):
        return True
    if isinstance(node, ast.Constant):
        return type(node.value) in (int, float, bool, str) and (
            not isinstance(node.value, str) or bool(_PLAIN.fullmatch(node.value)))
    if isinstance(node, ast.Name):
        return node.id in ("L", "math", "args")
    if isinstance(node, ast.Attribute):
        return node.attr in _GUARD_ATTRS
    if isinstance(node, ast.Subscript):
        return True
    if isinstance(node, ast.Call):
        return isinstance(node.func, ast.Attribute) and not node.keywords
    return False


def _treespec_ok(text: str) -> bool:
    """A pytree spec (JSON): every string in it (types, dict keys, nested contexts) plain;
    its keys become code in the generated forward()."""
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return False
    stack = [obj]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            if v.startswith(("[", "{", "\"")):
                try:
                    stack.append(json.loads(v))
                    continue
                except (ValueError, RecursionError):
                    return False
            if not _PLAIN.fullmatch(v):
                return False
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return True


def _free_text_ok(text: str) -> bool:
    """Printable text and newlines only: a carriage return or other line break would end a
    comment of the generated code (stack traces are copied into it)."""
    return len(text) <= _MAX_TEXT and text.replace("\n", "").isprintable()


def program_problems(program: Any) -> list[str]:
    """Every string of the serialized program that would reach an evaluator and is outside
    the grammar torch writes: symbolic expressions (sympify), guards (exec), operator names
    (attribute lookups on torch), pytree specs and names (code of the generated forward)."""
    bad: list[str] = []
    stack: list[tuple[Any, str, str]] = [(program, "", "")]
    while stack and len(bad) < 8:
        value, key, where = stack.pop()
        if isinstance(value, dict):
            for k, v in value.items():
                if key not in _FREE_TEXT and not (isinstance(k, str) and _PLAIN.fullmatch(k)):
                    bad.append(f"{where}: key {k!r}")
                    continue
                is_node = "inputs" in value and "outputs" in value
                stack.append((v, "target" if k == "target" and is_node else
                              key if key in _FREE_TEXT else k, f"{where}.{k}"))
        elif isinstance(value, list):
            stack.extend((v, key, f"{where}[{i}]") for i, v in enumerate(value))
        elif isinstance(value, str):
            ok = (_operator_ok(value) if key in ("target", "as_operator")
                  else _allowed_ast(value, _sympy_node_ok) if key == "expr_str"
                  else _allowed_ast(value, _guard_node_ok) if key == "guards_code"
                  else _treespec_ok(value) if key in ("in_spec", "out_spec")
                  else _free_text_ok(value) if key in _FREE_TEXT
                  else bool(_PLAIN.fullmatch(value)))
            if not ok:
                shown = value if len(value) <= 60 else value[:57] + "..."
                bad.append(f"{where.lstrip('.')} = {shown!r}")
    return bad


# --------------------------------------------------------------------- building


def _int(v: Any) -> int | None:
    """A serialized SymInt that is a plain non-negative int, else None."""
    if isinstance(v, dict) and set(v) == {"as_int"} and type(v["as_int"]) is int and v["as_int"] >= 0:
        return v["as_int"]
    return None


def _ints(v: Any) -> list[int] | None:
    """A list of plain non-negative serialized ints, else None."""
    if not isinstance(v, list):
        return None
    out = [_int(x) for x in v]
    return None if None in out else [x for x in out if x is not None]


def _tensors(layout: Pt2Layout, kind: str) -> dict[str, Any]:
    """The weights (``kind`` "weights") or constants of the program, built from the raw
    member bytes: each file once, views (aliases) kept, every view inside its file."""
    import torch

    from torchinspect.privtorch import export_deserializer

    dtypes = export_deserializer()[3]

    rel = f"data/{kind}/{_MODEL}_{kind}_config.json"
    if rel not in layout.members:
        if kind == "weights":
            raise _unreadable(layout, rel.rsplit("/", 1)[0], "missing its weights config")
        return {}
    entries = _json(layout, rel)["config"]
    files: dict[str, Any] = {}
    out: dict[str, Any] = {}
    for fqn, meta in entries.items():
        where = f"{rel}: {fqn}"
        tm = meta.get("tensor_meta")
        path_name = meta.get("path_name")
        if not isinstance(tm, dict) or not isinstance(path_name, str) \
                or not isinstance(fqn, str) or not _PLAIN.fullmatch(fqn):
            raise _unreadable(layout, where, "not a tensor entry")
        member = f"data/{kind}/{path_name}"
        if member not in layout.members:
            raise _unreadable(layout, where, f"naming a missing member {member}")
        raw_dtype = tm.get("dtype")
        dtype = dtypes.get(raw_dtype) if isinstance(raw_dtype, int) else None
        sizes, strides = _ints(tm.get("sizes")), _ints(tm.get("strides"))
        offset = _int(tm.get("storage_offset", {"as_int": 0}))
        if dtype is None or sizes is None or strides is None or offset is None \
                or len(sizes) != len(strides) or len(sizes) > _MAX_DIMS:
            raise _unreadable(layout, where, "a tensor entry with a bad dtype, size or stride")
        flat = files.get(path_name)
        if flat is None:
            flat = files[path_name] = _flat(layout, member, dtype, where)
        if flat.dtype != dtype:
            raise _unreadable(layout, where, "a view of another dtype of a shared file")
        numel = 1
        for s in sizes:
            numel *= s
        span = 0 if numel == 0 else offset + sum((s - 1) * st for s, st in zip(sizes, strides, strict=True)) + 1
        if span > flat.numel():
            raise _unreadable(layout, where, f"a view reaching element {span:,} of a "
                              f"{flat.numel():,}-element file")
        t = torch.as_strided(flat, sizes, strides, offset)
        if kind == "weights" and meta.get("is_param"):
            t = torch.nn.Parameter(t, requires_grad=bool(tm.get("requires_grad")))
        out[fqn] = t
    return out


def _flat(layout: Pt2Layout, rel: str, dtype: Any, where: str) -> Any:
    import torch

    m = layout.members[rel]
    size = torch.empty((), dtype=dtype).element_size()
    if m.file_size % size:
        raise _unreadable(layout, where, f"{m.file_size:,} bytes, not whole {dtype} elements")
    if m.method != 0:  # deflated: inflate (bounded) into a buffer of our own
        return torch.frombuffer(bytearray(layout.archive.read(layout.root + rel)), dtype=dtype) \
            if m.file_size else torch.empty(0, dtype=dtype)
    if not m.file_size:
        return torch.empty(0, dtype=dtype)
    data = layout.archive.data
    assert data is not None
    return torch.frombuffer(data, dtype=dtype, count=m.file_size // size, offset=m.data_offset)


def refusals(path: str, layout: Pt2Layout) -> list[str]:
    """Everything in the archive that only ``--trust-pickle`` may load (empty: safe)."""
    bad = list(layout.needs_trust)
    if bad:
        return bad
    if f"models/{_MODEL}.json" not in layout.members:
        raise InspectError(f"{path}: no models/{_MODEL}.json in the archive (not a "
                           "torch.export program)", hint="save it with torch.export.save")
    bad += config_problems(layout)
    bad += [f"models/{_MODEL}.json: {p}" for p in program_problems(_json(layout, f"models/{_MODEL}.json"))]
    bad += sample_input_problems(layout)
    return bad


def _check_versions(path: str, layout: Pt2Layout) -> None:
    from torch.export.pt2_archive.constants import ARCHIVE_FORMAT_VALUE, ARCHIVE_VERSION_VALUE

    for rel, want in (("archive_format", ARCHIVE_FORMAT_VALUE),
                      ("archive_version", ARCHIVE_VERSION_VALUE), ("byteorder", "little")):
        if rel in layout.members:
            got = _read(layout, rel)[:64].decode("utf-8", "replace").strip()
            if got != want:
                raise InspectError(f"{path}: {rel} is {got!r}; this torch reads {want!r}",
                                   hint="re-save it with this version of torch")
        elif rel != "byteorder":
            raise InspectError(f"{path}: no {rel} member (not a torch.export archive)",
                               hint="save it with torch.export.save")


def load_exported_program(path: str) -> Any:
    """The ExportedProgram in the ``.pt2`` at ``path``, built without running code from it.

    Raises UnsafeCheckpointError (exit 2) naming what would need ``--trust-pickle``, and
    InspectError for a damaged or unknown layout."""
    layout = read_layout(path)
    bad = refusals(path, layout)
    if bad:
        raise RefusedArchiveError(path, bad)
    _check_versions(path, layout)
    from torchinspect.privtorch import export_deserializer

    schema, deserializer, to_dataclass, _ = export_deserializer()

    program = _json(layout, f"models/{_MODEL}.json")
    state_dict = _tensors(layout, "weights")
    constants = _tensors(layout, "constants")
    sample = _sample_inputs(layout)
    try:
        serialized = to_dataclass(schema.ExportedProgram, program)
        return deserializer(None).deserialize(serialized, state_dict, constants, sample)
    except Exception as exc:
        raise InspectError(f"{path}: not a loadable torch.export program ({type(exc).__name__}: "
                           f"{str(exc).splitlines()[0][:160] if str(exc) else ''})",
                           hint="save it with torch.export.save(torch.export.export(model, args), "
                           "path) with this version of torch") from None


_TRUST_HINT = ("only if you trust this file and where it came from, pass --trust-pickle (it "
               "runs code from the file: pickles, native libraries or Python in the program)")
