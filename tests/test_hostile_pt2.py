""".pt2 archives built as an attacker would (issue 29, items 1-3): nothing from the file runs.

Every archive is a real ``torch.export.save`` output, then mutated member by member (names
in another case, duplicates, prefixes, legacy members, ``..``, absolute names, native
libraries) or in its program JSON (strings that torch's deserializer evaluates). The payload
would create a marker file; each test asserts the marker never appears and the command exits
2 with one ``error:`` line. The hypothesis variant (slow) combines mutations at random.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from test_checkpoint_helpers import payloads
from torchinspect.errors import InspectError
from zip_forge import Member, build_zip


class _Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(2, 2)
        self.register_buffer("scale", torch.ones(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) * self.scale


@pytest.fixture(scope="module")
def members(tmp_path_factory: pytest.TempPathFactory) -> list[Member]:
    path = tmp_path_factory.mktemp("pt2") / "tiny.pt2"
    ep = torch.export.export(_Tiny(), (torch.randn(3, 2),),
                             dynamic_shapes=({0: torch.export.Dim("batch", min=2, max=64)},))
    torch.export.save(ep, path)
    with zipfile.ZipFile(path) as zf:
        return [Member(i.filename, zf.read(i)) for i in zf.infolist()]


def _evil_pickle(marker: Path) -> bytes:
    buf = io.BytesIO()
    torch.save(payloads(marker)["exec"], buf)
    return buf.getvalue()


def _code(marker: Path) -> str:
    """Python that creates the marker (for strings torch would eval/exec)."""
    return f"open({str(marker)!r}, 'w')"


def _one_error(result, marker: Path, *needles: str) -> None:
    out = result.output
    assert not marker.exists(), f"payload ran: {out}"
    assert result.exit_code == 2, out
    assert "Traceback" not in out
    assert len([ln for ln in out.splitlines() if ln.startswith("error:")]) == 1, out
    for n in needles:
        assert n in out, out


def _rel(m: Member) -> str:
    return m.name.split("/", 1)[1]


def _with(members: list[Member], rel: str, data: bytes) -> list[Member]:
    return [Member(m.name, data) if _rel(m) == rel else m for m in members]


# --------------------------------------------------------------- the audit's reproductions


def test_a_clean_pt2_loads_without_torch_export_load(tmp_path: Path, invoke, members, monkeypatch) -> None:
    """The safe reader builds the program itself: torch.export.load is never called."""
    path = tmp_path / "ok.pt2"
    path.write_bytes(build_zip(members))

    def refuse(*a: object, **k: object) -> None:
        raise AssertionError("torch.export.load called on an untrusted file")

    monkeypatch.setattr(torch.export, "load", refuse)
    result = invoke("params", path)
    assert result.exit_code == 0, result.output
    assert "8" in result.output  # 2x2 weight + 2 bias (+2 buffer, not a parameter)


def test_same_program_as_torch_export_load(tmp_path: Path, members) -> None:
    from torchinspect.io.pt2 import load_exported_program

    path = tmp_path / "ok.pt2"
    path.write_bytes(build_zip(members))
    ours, theirs = load_exported_program(str(path)), torch.export.load(path)
    x = torch.randn(5, 2)
    torch.testing.assert_close(ours.module()(x), theirs.module()(x))
    assert ours.state_dict.keys() == theirs.state_dict.keys()
    assert str(ours.graph) == str(theirs.graph)
    assert ours.range_constraints.keys().__len__() == len(theirs.range_constraints)


def test_sample_inputs_member_in_another_case_is_refused(tmp_path: Path, invoke, members) -> None:
    """Audit item 1: ``DATA/sample_inputs/model.pt`` (one copy; only the case differs)."""
    marker = tmp_path / "PWNED"
    mutated = [Member(m.name.replace("/data/sample_inputs/", "/DATA/sample_inputs/"), _evil_pickle(marker))
               if "sample_inputs" in m.name else m for m in members]
    path = tmp_path / "case.pt2"
    path.write_bytes(build_zip(mutated))
    for cmd in ("summary", "params"):
        _one_error(invoke(cmd, path), marker, "unknown member", "DATA/sample_inputs/model.pt")


def test_legacy_root_members_beside_a_new_archive_are_refused(tmp_path: Path, invoke, members) -> None:
    """Audit item 2: root-level legacy members (torch.export.load's fallback reader)."""
    marker = tmp_path / "PWNED"
    legacy = [Member("version", b"8.0"), Member("serialized_exported_program.json", b"{}"),
              Member("serialized_example_inputs.pt", _evil_pickle(marker))]
    path = tmp_path / "legacy.pt2"
    path.write_bytes(build_zip(members + legacy))
    _one_error(invoke("summary", path), marker, "legacy pre-2.7", "--trust-pickle")


def test_aotinductor_package_is_refused_before_anything_is_extracted(tmp_path: Path, invoke, members) -> None:
    """Audit item 3: a native library under data/aotinductor/ is never extracted or loaded."""
    marker = tmp_path / "PWNED"
    root = members[0].name.split("/", 1)[0]
    so = Member(f"{root}/data/aotinductor/model/model.wrapper.so", b"\x7fELF" + b"\0" * 60)
    path = tmp_path / "aoti.pt2"
    path.write_bytes(build_zip(members + [so]))
    _one_error(invoke("summary", path), marker, "AOTInductor", "data/aotinductor/model/model.wrapper.so")


@pytest.mark.parametrize("name", ["{root}/data/aotinductor/model/../../../../{out}",
                                  "/{out}", "{root}/../{out}", "{root}/data/..\\..\\{out}"])
def test_member_names_leaving_the_folder_are_refused_even_when_trusted(tmp_path: Path, invoke, members,
                                                                       name: str) -> None:
    marker = tmp_path / "PWNED"
    root = members[0].name.split("/", 1)[0]
    evil = Member(name.format(root=root, out=str(marker).lstrip("/")), b"x")
    path = tmp_path / "escape.pt2"
    path.write_bytes(build_zip(members + [evil]))
    for extra in ([], ["--trust-pickle"]):
        result = invoke("summary", path, *extra)
        _one_error(result, marker, "escape.pt2")
        assert not list(tmp_path.rglob("PWNED*"))


# --------------------------------------------------------------- strings torch evaluates


def _program(members: list[Member]) -> dict:
    return json.loads(next(m.data for m in members if _rel(m) == "models/model.json"))


def _with_program(members: list[Member], program: dict) -> list[Member]:
    return _with(members, "models/model.json", json.dumps(program).encode())


def _sym_expr(program: dict, text: str) -> None:
    for meta in program["graph_module"]["graph"]["tensor_values"].values():
        for size in meta["sizes"]:
            if "as_expr" in size:
                size["as_expr"]["expr_str"] = text
                return
    raise AssertionError("no symbolic size in the fixture")


def _target(program: dict, text: str) -> None:
    program["graph_module"]["graph"]["nodes"][0]["target"] = text


def _guard(program: dict, text: str) -> None:
    program["guards_code"] = [text]


def _arg_name(program: dict, text: str) -> None:
    program["graph_module"]["graph"]["nodes"][0]["inputs"][0]["name"] = text


def _forward_arg(program: dict, text: str) -> None:
    program["graph_module"]["module_call_graph"][0]["signature"]["forward_arg_names"] = [text]


def _stack_trace(program: dict, text: str) -> None:
    program["graph_module"]["graph"]["nodes"][0]["metadata"]["stack_trace"] = \
        'File "a.py", line 1, in f\n    x\r' + text


def _in_spec(program: dict, text: str) -> None:
    """A keyword-argument name (the kwargs dict's context) goes into the generated forward()."""
    signature = program["graph_module"]["module_call_graph"][0]["signature"]
    spec = json.loads(signature["in_spec"])
    kwargs = spec[1]["children_spec"][1]
    kwargs["context"] = json.dumps(["x':" + text + ",'y"])
    kwargs["children_spec"] = [{"type": None, "context": None, "children_spec": []}]
    signature["in_spec"] = json.dumps(spec)


STRING_ATTACKS: dict[str, tuple[Callable[[dict, str], None], str]] = {
    "sympify": (_sym_expr, "__import__('os').system('true') or {code}"),
    "sympify_call": (_sym_expr, "Max(s0, exec(\"{code}\"))"),
    "operator": (_target, "torch.from_file"),
    "operator_call": (_target, "_operator.call"),
    "aten_from_file": (_target, "torch.ops.aten.from_file.default"),
    "guard": (_guard, "{code} is None"),
    "guard_attr": (_guard, "L['x'].__class__.__init__.__globals__ is None"),
    "arg_name": (_arg_name, 'x")+{code}+("'),
    "forward_arg": (_forward_arg, "x=({code})"),
    "stack_trace": (_stack_trace, "{code}"),
    "in_spec": (_in_spec, "{code}"),
}


@pytest.mark.parametrize("attack", sorted(STRING_ATTACKS))
def test_program_strings_torch_would_evaluate_are_refused(tmp_path: Path, invoke, members, attack: str) -> None:
    marker = tmp_path / "PWNED"
    program = _program(members)
    mutate, text = STRING_ATTACKS[attack]
    mutate(program, text.format(code=_code(marker)))
    path = tmp_path / f"{attack}.pt2"
    path.write_bytes(build_zip(_with_program(members, program)))
    for cmd in ("summary", "params"):
        _one_error(invoke(cmd, path), marker, "models/model.json", "--trust-pickle")


@pytest.mark.parametrize("what", ["use_pickle", "custom_obj"])
def test_pickled_weights_and_objects_are_refused(tmp_path: Path, invoke, members, what: str) -> None:
    marker = tmp_path / "PWNED"
    rel = "data/weights/model_weights_config.json"
    config = json.loads(next(m.data for m in members if _rel(m) == rel))
    entry = next(iter(config["config"].values()))
    if what == "use_pickle":
        entry["use_pickle"] = True
    else:
        entry["path_name"] = "custom_obj_0"
    path = tmp_path / "p.pt2"
    path.write_bytes(build_zip(_with(members, rel, json.dumps(config).encode())))
    _one_error(invoke("summary", path), marker, rel)


@pytest.mark.parametrize("change", ["offset", "stride", "dtype", "missing"])
def test_weight_views_outside_their_file_are_refused(tmp_path: Path, invoke, members, change: str) -> None:
    rel = "data/weights/model_weights_config.json"
    config = json.loads(next(m.data for m in members if _rel(m) == rel))
    entry = config["config"]["lin.weight"]
    if change == "offset":
        entry["tensor_meta"]["storage_offset"] = {"as_int": 10 ** 6}
    elif change == "stride":
        entry["tensor_meta"]["strides"][0] = {"as_int": 2 ** 40}
    elif change == "dtype":
        entry["tensor_meta"]["dtype"] = 999
    else:
        entry["path_name"] = "weight_99"
    path = tmp_path / "v.pt2"
    path.write_bytes(build_zip(_with(members, rel, json.dumps(config).encode())))
    result = invoke("params", path)
    assert result.exit_code == 2, result.output
    assert "lin.weight" in result.output and "Traceback" not in result.output


def test_deep_json_is_refused_without_a_crash(tmp_path: Path, invoke, members) -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    path = tmp_path / "deep.pt2"
    path.write_bytes(build_zip(_with(members, "models/model.json", deep)))
    result = invoke("params", path)
    assert result.exit_code == 2, result.output
    assert "models/model.json" in result.output


def test_trusted_loading_still_uses_torch(tmp_path: Path, invoke, members) -> None:
    """--trust-pickle keeps today's loader for files the safe reader refuses (a weight
    stored pickled, as torch.export.save does for tensor subclasses)."""
    rel = "data/weights/model_weights_config.json"
    config = json.loads(next(m.data for m in members if _rel(m) == rel))
    entry = config["config"]["lin.weight"]
    entry["use_pickle"] = True
    buf = io.BytesIO()
    torch.save(torch.nn.Parameter(torch.randn(2, 2)), buf)
    mutated = _with(_with(members, rel, json.dumps(config).encode()),
                    f"data/weights/{entry['path_name']}", buf.getvalue())
    path = tmp_path / "t.pt2"
    path.write_bytes(build_zip(mutated))
    refused = invoke("params", path)
    assert refused.exit_code == 2 and "lin.weight (pickled)" in refused.output, refused.output
    result = invoke("params", path, "--trust-pickle")
    assert result.exit_code == 0, result.output


# --------------------------------------------------------------- mutation generator


def _mutations(members: list[Member], marker: Path) -> list[tuple[str, list[Member]]]:
    """Every member renamed, duplicated, moved or joined by a foreign one; the sample inputs
    always carry the payload (so any reader that touches them unrestricted creates the marker)."""
    evil = _evil_pickle(marker)
    base = [Member(m.name, evil) if "sample_inputs" in m.name else m for m in members]
    root = base[0].name.split("/", 1)[0]
    out: list[tuple[str, list[Member]]] = []
    for i, m in enumerate(base):
        rel = _rel(m)
        others = base[:i] + base[i + 1:]
        variants = {
            "upper": Member(f"{root}/{rel.upper()}", m.data),
            "swapcase_root": Member(f"{root.swapcase()}/{rel}", m.data),
            "prefixed": Member(f"x/{m.name}", m.data),
            "nested": Member(f"{root}/x/{rel}", m.data),
            "dotdot": Member(f"{root}/../{rel}", m.data),
            "absolute": Member(f"/{m.name}", m.data),
        }
        for how, v in variants.items():
            out.append((f"{how}:{rel}", base[:i] + [v] + base[i + 1:]))
        out.append((f"duplicate:{rel}", base + [Member(m.name, m.data)]))
        out.append((f"duplicate_case:{rel}", base + [Member(f"{root}/{rel.swapcase()}", m.data)]))
        out.append((f"missing:{rel}", others))
    for extra in ("version", "serialized_exported_program.json", "serialized_example_inputs.pt",
                  f"{root}/data/aotinductor/model/model.wrapper.so", f"{root}/data/weights/model.pt",
                  f"{root}/data/constants/opaque_obj_0", f"{root}/executorch/model.pte",
                  f"{root}/lib.so", f"{root}/data/sample_inputs/other.pt"):
        out.append((f"extra:{extra}", base + [Member(extra, evil)]))
    return out


MUTATION_KINDS = ["upper", "swapcase_root", "prefixed", "nested", "dotdot", "absolute", "duplicate",
                  "duplicate_case", "missing", "extra"]


@pytest.mark.parametrize("kind", MUTATION_KINDS)
def test_mutated_archives_never_run_the_payload(tmp_path: Path, invoke, members, kind: str) -> None:
    """The generator over every member: each mutation is exit 2 with one line, or (a member
    torch never reads gone missing) a clean read; never the payload."""
    marker = tmp_path / "PWNED"
    for label, mutated in _mutations(members, marker):
        if label.split(":", 1)[0] != kind:
            continue
        path = tmp_path / "m.pt2"
        path.write_bytes(build_zip(mutated))
        result = invoke("params", path)
        assert not marker.exists(), label
        assert "Traceback" not in result.output, (label, result.output)
        if label.startswith("missing:") and result.exit_code == 0:
            continue  # e.g. .data/serialization_id: torch does not need it
        assert result.exit_code == 2, (label, result.output)
        assert len([ln for ln in result.output.splitlines() if ln.startswith("error:")]) == 1, label


def test_check_pt2_refuses_without_reading_the_program(tmp_path: Path, members) -> None:
    from torchinspect.sources.pt2 import check_pt2

    root = members[0].name.split("/", 1)[0]
    path = tmp_path / "a.pt2"
    path.write_bytes(build_zip(members + [Member(f"{root}/data/aotinductor/x.so", b"")]))
    with pytest.raises(InspectError, match="AOTInductor"):
        check_pt2(str(path), trust_pickle=False)
    check_pt2(str(path), trust_pickle=True)  # trusted: torch's own loader decides


@pytest.mark.slow
def test_random_mutation_combinations_never_run_the_payload(tmp_path: Path, invoke, members) -> None:
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies
    marker = tmp_path / "PWNED"
    pool = _mutations(members, marker)

    @hypothesis.settings(max_examples=40, deadline=None, derandomize=True)
    @hypothesis.given(st.lists(st.integers(0, len(pool) - 1), min_size=1, max_size=3))
    def run(picks: list[int]) -> None:
        names: dict[str, Member] = {}
        extra: list[Member] = []
        for k in picks:  # combine: the union of the mutations' member lists
            for m in pool[k][1]:
                if m.name in names and names[m.name].data != m.data:
                    extra.append(m)
                names.setdefault(m.name, m)
        path = tmp_path / "h.pt2"
        path.write_bytes(build_zip(list(names.values()) + extra))
        result = invoke("params", path)
        assert not marker.exists(), picks
        assert result.exit_code in (0, 2), result.output
        assert "Traceback" not in result.output

    run()
