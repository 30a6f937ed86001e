"""The files this tool wrote earlier are untrusted input too (issue 38, item 1): the user's
cache (``torchinspect.cache``: ``bench --predict``'s host cost, ``memory --calibrate``'s
workspaces) is private, written through unpredictable O_EXCL temporaries, and read with a
size cap and a schema; whatever was planted there is ignored with a note and measured again."""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from torchinspect import cache


def _check(data):
    if not isinstance(data, dict):
        raise ValueError("not an object")
    return {"us": cache.number(data.get("us"), "us", low=0.0, high=1e4, low_open=True)}


def _read(root: Path, **kw):
    return cache.read("probe", version=1, key={"m": 1}, check=_check, what="probe cache",
                      root=root, **kw)


def _write(root: Path, data=None):
    return cache.write("probe", data if data is not None else {"us": 1.5}, version=1,
                       key={"m": 1}, what="probe cache", root=root)


def test_round_trip_in_a_private_folder(tmp_path: Path) -> None:
    root = tmp_path / "xdg" / "torchinspect"
    assert _read(root).data is None and _read(root).note is None  # nothing yet, no note
    assert _write(root) is None
    assert _read(root).data == {"us": 1.5}
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    assert stat.S_IMODE((root / "probe.json").stat().st_mode) == 0o600
    assert [p.name for p in root.iterdir()] == ["probe.json"]  # no temporary left


def test_the_folder_follows_xdg(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache.cache_root() == tmp_path / "torchinspect"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/dir")  # ignored, as the XDG rules say
    assert cache.cache_root() == Path(os.path.expanduser("~")) / ".cache" / "torchinspect"


@pytest.mark.parametrize("data", [
    {"us": -5.0}, {"us": 0}, {"us": 1e300}, {"us": "1"}, {"us": True}, {"us": None}, [], "x",
], ids=repr)
def test_values_out_of_range_or_of_the_wrong_type_are_ignored_with_a_note(tmp_path, data) -> None:
    root = tmp_path / "c"
    _write(root)
    doc = json.loads((root / "probe.json").read_text())
    (root / "probe.json").write_text(json.dumps({**doc, "data": data}))
    found = _read(root)
    assert found.data is None and "corrupt" in found.note and "measuring again" in found.note


@pytest.mark.parametrize("raw", [
    b"\x00\xff not json", b'{"us": NaN}', b"[" * 100000, b'{"schema": "torchinspect-cache/other"}',
    json.dumps({"schema": "torchinspect-cache/probe", "version": 99, "key": {"m": 1},
                "data": {"us": 1}}).encode(),
], ids=["binary", "nan", "deep", "other-schema", "other-version"])
def test_corrupt_files_are_ignored_with_a_note(tmp_path, raw) -> None:
    root = tmp_path / "c"
    _write(root)
    (root / "probe.json").write_bytes(raw)
    found = _read(root)
    assert found.data is None and "ignored the probe cache" in found.note


def test_a_foreign_key_is_named(tmp_path) -> None:
    root = tmp_path / "c"
    _write(root)
    doc = json.loads((root / "probe.json").read_text())
    (root / "probe.json").write_text(json.dumps({**doc, "key": {"m": 2}}))
    found = _read(root, describe=lambda k: f"machine {k.get('m') if isinstance(k, dict) else k}")
    assert found.data is None and "measured on machine 2, not machine 1" in found.note


def test_a_fifo_a_symlink_and_an_oversized_file_are_refused_without_blocking(tmp_path) -> None:
    root = tmp_path / "c"
    _write(root)
    entry = root / "probe.json"
    entry.unlink()
    os.mkfifo(entry)
    assert "is a FIFO, not a regular file" in _read(root).note  # never blocks on open
    assert _write(root) is None and entry.is_file()  # the FIFO is replaced, never written into
    secret = tmp_path / "secret.json"
    secret.write_text(entry.read_text())
    entry.unlink()
    entry.symlink_to(secret)
    assert "symbolic link" in _read(root).note
    assert _write(root, {"us": 2.0}) is None
    assert json.loads(secret.read_text())["data"] == {"us": 1.5}  # the link's target untouched
    entry.write_bytes(b" " * (cache.MAX_BYTES + 1))
    assert "over the" in _read(root).note


def test_planted_temporary_names_cannot_redirect_a_write(tmp_path) -> None:
    """The old writers used ``host-cost.<pid>.tmp``: a symlink planted at every name a run
    could pick made the run overwrite the link's target. Names are now random and created
    O_EXCL|O_NOFOLLOW: the planted links are never followed."""
    root = tmp_path / "c"
    root.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text("keep")
    for pid in range(os.getpid() - 5, os.getpid() + 5):
        for name in (f"probe.{pid}.tmp", f"probe.tmp{pid}", f".probe.{pid}.tmp"):
            (root / name).symlink_to(victim)
    assert _write(root) is None
    assert victim.read_text() == "keep" and _read(root).data == {"us": 1.5}


def test_a_folder_that_is_a_link_or_not_ours_is_not_used(tmp_path, monkeypatch) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    root = tmp_path / "link"
    root.symlink_to(elsewhere)
    assert "symbolic link" in _write(root)
    assert not list(elsewhere.iterdir())
    open_root = tmp_path / "open"
    open_root.mkdir(mode=0o777)
    os.chmod(open_root, 0o777)
    assert _write(open_root) is None
    assert stat.S_IMODE(open_root.stat().st_mode) == 0o700  # ours: made private
    monkeypatch.setattr(os, "geteuid", lambda: os.getuid() + 4242)  # as if another user ran us
    assert "belongs to another user" in _write(open_root)
    assert "belongs to another user" in _read(open_root).note


def test_a_file_of_another_user_inside_the_folder_is_refused(tmp_path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to give a file away")
    root = tmp_path / "c"
    _write(root)
    os.chown(root / "probe.json", 4242, 4242)
    assert "belongs to another user" in _read(root).note


def test_two_writers_at_once_leave_one_whole_entry(tmp_path) -> None:
    root = tmp_path / "c"
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            for _ in range(30):
                assert _write(root, {"us": float(i + 1)}) is None
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert _read(root).data["us"] in (1.0, 2.0, 3.0, 4.0)
    assert [p.name for p in root.iterdir()] == ["probe.json"]


def test_stale_temporaries_of_killed_writers_are_removed(tmp_path) -> None:
    root = tmp_path / "c"
    _write(root)
    old = root / ".probe.0123456789abcdef.tmp"
    old.write_text("half")
    os.utime(old, (1, 1))
    fresh = root / ".probe.fedcba9876543210.tmp"  # a writer that may still run
    fresh.write_text("half")
    _write(root)
    assert not old.exists() and fresh.exists()


def test_a_full_disk_is_a_note_naming_the_entry_and_the_bytes(tmp_path, monkeypatch) -> None:
    import errno

    real = os.write

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    note = _write(tmp_path / "c")
    monkeypatch.setattr(os, "write", real)
    assert "no space left on the device" in note and "probe.json" in note and "bytes needed" in note
    assert not [p for p in (tmp_path / "c").iterdir()]  # the temporary is gone


# ------------------------------------------------------------------ through the CLI


def test_bench_predict_ignores_a_crafted_host_cost_and_says_so(tmp_path, monkeypatch, invoke) -> None:
    """A crafted entry made ``bench --predict`` print a negative host time with exit 0."""
    from torchinspect.latency.host import PROBE_VERSION, cache_entry

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    name, key = cache_entry()
    root = tmp_path / "torchinspect"
    root.mkdir(mode=0o700)
    (root / f"{name}.json").write_text(json.dumps({
        "schema": f"torchinspect-cache/{name}", "version": PROBE_VERSION, "key": key,
        "data": {"op_us": -1e6, "module_us": -1e6, "cpu": "x"}}))
    r = invoke("bench", "zoo:mnist-net", "--predict", "h100", "-f", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)["predicted"]
    assert doc["host"]["op_us"] > 0 and not doc["host"]["cached"]
    assert all(row["host_ms"] > 0 for row in doc["results"])
    assert any("ignored the host-cost cache" in n and "op_us" in n for n in doc["notes"])
    again = invoke("bench", "zoo:mnist-net", "--predict", "h100", "-f", "json")
    assert json.loads(again.stdout)["predicted"]["host"]["cached"]  # measured again and saved


def test_bench_predict_never_blocks_on_a_fifo_in_the_cache(tmp_path, monkeypatch, invoke) -> None:
    from torchinspect.latency.host import cache_entry

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    name, _ = cache_entry()
    root = tmp_path / "torchinspect"
    root.mkdir(mode=0o700)
    os.mkfifo(root / f"{name}.json")
    r = invoke("bench", "zoo:mnist-net", "--predict", "h100", "-f", "json")
    assert r.exit_code == 0, r.output
    assert any("is a FIFO, not a regular file" in n for n in json.loads(r.stdout)["predicted"]["notes"])


# ------------------------------------------------------------------ fuzz: any bytes in the cache


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                     lambda kids: st.lists(kids, max_size=4)
                     | st.dictionaries(st.text(max_size=6), kids, max_size=4), max_leaves=12)


def _fuzz_bytes():
    doc = st.fixed_dictionaries({"schema": st.sampled_from(["torchinspect-cache/probe", "x"]),
                                 "version": st.sampled_from([1, 2, "1", None]),
                                 "key": st.sampled_from([{"m": 1}, {"m": 2}, [], None]),
                                 "data": _JSON})
    return st.one_of(st.binary(max_size=300),
                     doc.map(lambda d: json.dumps(d, allow_nan=True).encode()),
                     _JSON.map(lambda d: json.dumps(d, allow_nan=True).encode()))


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(raw=_fuzz_bytes())
def test_fuzz_a_cache_file_is_used_validated_or_ignored_with_a_note(tmp_path_factory, raw) -> None:
    """Whatever the file holds: the entry is returned only when every value passes the
    schema, else None with a one-line note; never an exception."""
    root = tmp_path_factory.mktemp("c")
    _write(root)
    (root / "probe.json").write_bytes(raw)
    found = _read(root)
    if found.data is not None:
        assert 0 < found.data["us"] <= 1e4 and found.note is None
    else:
        assert found.note is None or ("\n" not in found.note and "probe.json" in found.note)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=_JSON)
def test_fuzz_host_cost_and_calibration_checks_refuse_what_is_not_a_measurement(data) -> None:
    from torchinspect.latency.host import _check as host_check
    from torchinspect.memory.calibrate import MAX_WORKSPACE, _entries

    for check in (host_check, _entries):
        try:
            value = check(data)
        except (ValueError, TypeError, KeyError):
            continue
        if check is host_check:
            assert 0 < value.op_us <= 1e4 and 0 < value.module_us <= 1e4
        else:
            assert all(v is None or 0 <= v <= MAX_WORKSPACE for v in value.values())
