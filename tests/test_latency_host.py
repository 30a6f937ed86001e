"""Issue 40, item 4: the host's dispatch cost is measured per host, kept with when and under
what load it was measured, measured again when it is older than the installed torch or was
taken on a loaded machine, and a disturbed measurement is said, never silently used."""

from __future__ import annotations

import json
import os

import pytest

from torchinspect.latency import host as hostmod
from torchinspect.latency.host import HostCost


def _probe(spread: float = 0.05, load: float = 0.5, op_us: float = 2.0) -> HostCost:
    return HostCost(op_us=op_us, module_us=1.5, cpu="test CPU", measured_at=1.7e9, load=load,
                    cores=2, spread=spread, torch="2.x")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(hostmod, "torch_installed_at", lambda: 1.0e9)
    monkeypatch.setattr(hostmod, "_load", lambda: 0.3)
    return tmp_path / "torchinspect" / f"{hostmod.cache_entry()[0]}.json"


def test_a_measurement_is_cached_with_when_and_under_what_load(cache, monkeypatch):
    calls = []
    monkeypatch.setattr(hostmod, "probe_host", lambda: calls.append(1) or _probe())
    first = hostmod.host_cost()
    second = hostmod.host_cost()
    assert len(calls) == 1 and not first.cached and second.cached
    doc = json.loads(cache.read_text())
    assert doc["schema"] == f"torchinspect-cache/{hostmod.cache_entry()[0]}"
    assert doc["version"] == hostmod.PROBE_VERSION
    assert doc["data"]["load"] == 0.5 and doc["data"]["cores"] == 2
    text = second.describe()
    assert "measured earlier on this CPU" in text and "load 0.5 on 2 cores" in text


def test_a_cache_older_than_the_installed_torch_is_measured_again(cache, monkeypatch):
    calls = []
    monkeypatch.setattr(hostmod, "probe_host", lambda: calls.append(1) or _probe())
    hostmod.host_cost()
    monkeypatch.setattr(hostmod, "torch_installed_at", lambda: 2.0e9)  # torch reinstalled since
    again = hostmod.host_cost()
    assert len(calls) == 2 and not again.cached


def test_a_disturbed_probe_is_measured_again_and_labelled_when_it_stays_so(cache, monkeypatch):
    results = iter([_probe(spread=0.9, load=7.0, op_us=6.0), _probe(spread=0.6, load=6.0,
                                                                       op_us=5.0)])
    monkeypatch.setattr(hostmod, "probe_host", lambda: next(results))
    cost = hostmod.host_cost()
    assert cost.op_us == 5.0  # the less disturbed of the two
    assert cost.disturbed
    assert "disturbed" in cost.describe() and "may be high" in cost.describe()
    assert cost.to_dict()["disturbed"] is True


def test_a_cache_taken_under_load_is_replaced_once_the_machine_is_quiet(cache, monkeypatch):
    loaded = _probe(spread=0.05, load=9.0, op_us=7.0)
    monkeypatch.setattr(hostmod, "probe_host", lambda: loaded)
    hostmod.host_cost()
    monkeypatch.setattr(hostmod, "probe_host", lambda: _probe())  # quiet now (load 0.3)
    assert hostmod.host_cost().op_us == 2.0
    monkeypatch.setattr(hostmod, "probe_host", lambda: loaded)
    hostmod.host_cost(refresh=True)
    monkeypatch.setattr(hostmod, "_load", lambda: 8.0)  # still loaded: the cache is kept
    kept = hostmod.host_cost()
    assert kept.cached and kept.op_us == 7.0 and kept.disturbed


def test_a_corrupt_or_planted_cache_is_ignored_with_a_note(cache, monkeypatch):
    monkeypatch.setattr(hostmod, "probe_host", lambda: _probe())
    cache.parent.mkdir(mode=0o700, parents=True)
    cache.write_text("{not json")
    cost = hostmod.host_cost()
    assert cost.note and "corrupt" in cost.note and not cost.cached
    entry, key = hostmod.cache_entry()
    doc = {"schema": f"torchinspect-cache/{entry}", "version": hostmod.PROBE_VERSION, "key": key,
           "data": {"op_us": -1, "module_us": 1.0, "cpu": "x", "measured_at": 2e9,
                    "load": 0.1, "cores": 2, "spread": 0.0, "torch": "2"}}
    cache.write_text(json.dumps(doc))
    again = hostmod.host_cost()
    assert again.op_us == 2.0 and "op_us" in (again.note or "")


def test_a_planted_link_or_fifo_is_never_read(cache, monkeypatch, tmp_path):
    monkeypatch.setattr(hostmod, "probe_host", lambda: _probe())
    cache.parent.mkdir(mode=0o700, parents=True)
    secret = tmp_path / "secret.json"
    secret.write_text("{}")
    cache.symlink_to(secret)
    cost = hostmod.host_cost()
    assert cost.note and "ignored the host-cost cache" in cost.note and not cost.cached
    cache.unlink()
    os.mkfifo(cache)
    cost = hostmod.host_cost()  # returns: the FIFO is not waited on
    assert not cost.cached and "is a FIFO, not a regular file" in (cost.note or "")


def test_the_probe_measures_this_cpu_with_its_load():
    cost = hostmod.probe_host(calls=200, trials=3)
    assert 0 < cost.op_us < 1e3 and 0 < cost.module_us < 1e3
    assert cost.cores >= 1 and cost.measured_at > 0 and cost.spread >= 0


@pytest.mark.parametrize("train", [False, True], ids=["predict", "train"])
def test_a_refused_cache_is_said_in_the_output(cache, monkeypatch, invoke, train):
    monkeypatch.setattr(hostmod, "probe_host", lambda: _probe())
    cache.parent.mkdir(mode=0o700, parents=True)
    os.mkfifo(cache)
    r = invoke("bench", "zoo:mnist-net", "--predict", "h100", *(["--train"] if train else []),
               "-f", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)["predicted"]
    assert any("is a FIFO, not a regular file" in n for n in doc["notes"])
    assert doc["host"]["op_us"] == 2.0 and not doc["host"]["cached"]
