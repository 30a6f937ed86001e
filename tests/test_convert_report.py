"""The convert report's table stays small whatever the metadata (issue 20, item 16); its time
is measured by benchmarks/cpu_cost.py, not asserted here."""

from __future__ import annotations

import json
from pathlib import Path

import torch


def test_long_metadata_value_is_truncated_in_the_table_and_full_in_json(tmp_path: Path, invoke) -> None:
    value = "x" * 2_000_000
    src = tmp_path / "meta.pt"
    torch.save({"state_dict": {"w": torch.zeros(2)}, "note": value}, src)
    table = invoke("convert", src, tmp_path / "a.safetensors")
    assert table.exit_code == 0, table.output[-500:]
    assert len(table.output) < 10_000, len(table.output)  # the table shows a prefix, not 2 MB
    shown = f"({len('note = ' + value):,} characters; --format json shows all)"
    assert shown in " ".join(table.output.split())
    report = invoke("convert", src, tmp_path / "b.safetensors", "-f", "json")
    assert report.exit_code == 0
    assert json.loads(report.output)["metadata"]["note"] == value


def test_dropped_tensor_entries_are_described_not_named_by_an_internal_class(tmp_path: Path,
                                                                            invoke) -> None:
    src = tmp_path / "ckpt.pt"
    torch.save({"state_dict": torch.nn.Linear(3, 2).state_dict(), "loss": torch.tensor(0.5),
                "ema": torch.ones(4)}, src)
    r = invoke("convert", src, tmp_path / "out.safetensors")
    assert r.exit_code == 0, r.output
    assert "loss: float32 scalar tensor" in r.output and "ema: float32 tensor (4,)" in r.output
    assert "TensorRef" not in r.output and "Ref" not in r.output
