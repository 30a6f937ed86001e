"""Hugging Face model folders: built from config.json, their weights read from headers only.

`summary DIR` says whether the folder's weights (one file, or shards + index, safetensors or
.bin) fit the model built from config.json; `diff DIR` compares them key by key, and the
folder is a diff side like any model or checkpoint. No tensor data is read.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.filterwarnings(
    "ignore::FutureWarning:transformers.*", "ignore::UserWarning:transformers.*",
    "ignore::DeprecationWarning:transformers.*",
)

TINY = {"num_hidden_layers": 2, "hidden_size": 32, "intermediate_size": 64,
        "num_attention_heads": 4, "vocab_size": 500}
TINY_ARGS = [f"{k}={v}" for k, v in TINY.items()]


def save_llama(folder: Path, **extra: object) -> torch.nn.Module:
    cfg = transformers.LlamaConfig(num_key_value_heads=2, architectures=["LlamaForCausalLM"],
                                   **{**TINY, **extra})
    model = transformers.LlamaForCausalLM(cfg)
    model.save_pretrained(folder, safe_serialization=True, max_shard_size="50KB")
    return model


def no_tensor_data(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any read of tensor data (safetensors loaders, torch.load) fails the test."""
    import safetensors
    import safetensors.torch

    def refuse(*a: object, **k: object) -> None:
        raise AssertionError("tensor data was read")

    for mod, name in ((safetensors, "safe_open"), (safetensors.torch, "load_file"),
                      (safetensors.torch, "load"), (torch, "load")):
        monkeypatch.setattr(mod, name, refuse)


def test_sharded_folder_summary_checks_its_weights_against_the_config(tmp_path, invoke, monkeypatch) -> None:
    model = save_llama(tmp_path)
    shards = sorted(tmp_path.glob("model-*.safetensors"))
    assert len(shards) > 2 and (tmp_path / "model.safetensors.index.json").is_file()
    no_tensor_data(monkeypatch)
    r = invoke("summary", str(tmp_path), "--format", "json", "--depth", "0")
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["totals"]["params"] == sum(p.numel() for p in model.parameters())
    note = next(n for n in data["notes"] if "folder's weights" in n)
    assert f"{len(model.state_dict())} tensors in {len(shards)} shards, float32" in note
    assert "match it: every key and shape" in note

    r = invoke("diff", str(tmp_path), "--format", "json")  # the folder alone: weights vs config
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["verdict"] == "strict" and d["loadable"] == len(model.state_dict())
    assert d["a"]["kind"] == "model" and d["b"]["format"] == "hf_sharded"


def test_folder_weights_that_do_not_fit_the_config_are_named(tmp_path, invoke) -> None:
    save_llama(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["num_hidden_layers"] = 3  # the weights hold 2 layers
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    r = invoke("summary", str(tmp_path), "--depth", "0", "--format", "json")
    assert r.exit_code == 0, r.output
    notes = " ".join(json.loads(r.output)["notes"])
    assert "do NOT match it: 9 missing (e.g. 'model.layers.2." in notes  # 7 linears + 2 norms
    r = invoke("diff", str(tmp_path), "--format", "json")
    assert r.exit_code == 1
    d = json.loads(r.output)
    assert d["verdict"] == "partial" and {k.split(".")[2] for k in d["missing"]} == {"2"}


def test_bin_shards_with_tied_weights(tmp_path, invoke, monkeypatch) -> None:
    cfg = transformers.BertConfig(architectures=["BertForMaskedLM"], **TINY)
    model = transformers.BertForMaskedLM(cfg)
    cfg.save_pretrained(tmp_path)
    sd = {k: v for k, v in model.state_dict().items() if not k.startswith("cls.predictions.decoder")}
    keys = sorted(sd)
    weight_map = {}
    for i, part in enumerate((keys[: len(keys) // 2], keys[len(keys) // 2:]), 1):
        name = f"pytorch_model-{i:05d}-of-00002.bin"
        torch.save({k: sd[k] for k in part}, tmp_path / name)
        weight_map.update(dict.fromkeys(part, name))
    (tmp_path / "pytorch_model.bin.index.json").write_text(json.dumps({"weight_map": weight_map}))
    no_tensor_data(monkeypatch)
    r = invoke("summary", str(tmp_path), "--depth", "0", "--format", "json")
    assert r.exit_code == 0, r.output
    notes = " ".join(json.loads(r.output)["notes"])
    assert f"{len(sd)} tensors in 2 shards" in notes
    assert "tied key(s) not saved get their value through the tie" in notes
    r = invoke("diff", str(tmp_path), "--format", "json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["verdict"] == "complete" and "cls.predictions.decoder.weight" in d["tied_fill"]


def test_folder_as_a_diff_side(tmp_path, invoke) -> None:
    model = save_llama(tmp_path / "full")
    single = tmp_path / "single.safetensors"
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, single)
    arch = ["--arg", "num_key_value_heads=2", *[x for a in TINY_ARGS for x in ("--arg", a)]]
    r = invoke("diff", str(tmp_path / "full"), "hf:LlamaForCausalLM", *arch)  # weights vs an arch
    assert r.exit_code == 0 and "loads with strict=True" in r.output, r.output
    r = invoke("diff", str(tmp_path / "full"), str(single))  # weights vs weights
    assert r.exit_code == 0 and "hf_sharded" in r.output, r.output
    r = invoke("diff", str(single), "--arch", str(tmp_path / "full"), "--format", "json")
    assert r.exit_code == 0, r.output  # --arch DIR: the model built from config.json
    d = json.loads(r.output)
    assert d["a"]["kind"] == "model" and d["a"]["label"].endswith("(config.json)")
    cfg_only = tmp_path / "cfg"
    cfg_only.mkdir()
    (cfg_only / "config.json").write_text((tmp_path / "full" / "config.json").read_text())
    from torchinspect.checkpoints import diff_specs

    assert str(diff_specs(str(cfg_only), str(single)).verdict) == "strict"
    r = invoke("diff", str(cfg_only), str(single), "--format", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["a"]["kind"] == "model"
    r = invoke("diff", str(cfg_only))
    assert r.exit_code == 2 and "needs two sides" in r.output
    r = invoke("summary", str(cfg_only), "--depth", "0", "--format", "json")
    assert r.exit_code == 0 and "holds no weights file" in " ".join(json.loads(r.output)["notes"])
