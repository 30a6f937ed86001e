"""`inspect report MODEL` without -o writes MODEL.html in the current folder (issue 24):
never 60 KB of HTML on the terminal, never over an existing page without --force."""

from __future__ import annotations

import json

import pytest

from torchinspect.cli.output import model_file_stem

FAST = ("--no-graph", "--no-doctor")


@pytest.mark.slow
def test_report_without_output_writes_model_html(invoke, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = invoke("report", "zoo:convnet", *FAST)
    assert r.exit_code == 0, r.output
    assert r.stdout == ""  # nothing on the terminal but where the page went
    assert "convnet.html" in r.stderr and "wrote convnet.html" in r.stderr
    page = (tmp_path / "convnet.html").read_text()
    assert page.lstrip().lower().startswith("<!doctype html") and "zoo:convnet" in page
    # a second run refuses to replace it, and leaves it as it was
    again = invoke("report", "zoo:convnet", *FAST)
    assert again.exit_code == 2
    assert "error: convnet.html already exists" in again.stderr and "--force" in again.stderr
    assert (tmp_path / "convnet.html").read_text() == page
    forced = invoke("report", "zoo:convnet", *FAST, "--force")
    assert forced.exit_code == 0, forced.output
    # -o names the file as before; several models get one comparison page
    assert invoke("report", "zoo:convnet", *FAST, "-o", "mine.html").exit_code == 0
    assert (tmp_path / "mine.html").is_file()
    both = invoke("report", "zoo:convnet", "zoo:mnist-net", *FAST)
    assert both.exit_code == 0, both.output
    assert (tmp_path / "convnet-vs-mnist-net.html").is_file()


def test_report_other_formats_still_print(invoke, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = invoke("report", "zoo:convnet", *FAST, "--format", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["schema"].startswith("torchinspect/report/")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("spec", "stem"), [
    ("resnet18", "resnet18"), ("zoo:gpt", "gpt"), ("models/net.py:Net", "Net"),
    ("ckpt/model.pth", "model"), ("hf:org/bert-base", "bert-base"), ("timm:vit_base_patch16_224", "vit_base_patch16_224"),
    ("my model.safetensors", "my_model"), ("../..", "model"), ("pkg.mod:make", "make"),
])
def test_model_file_stem_is_a_safe_name(spec, stem):
    assert model_file_stem(spec) == stem
