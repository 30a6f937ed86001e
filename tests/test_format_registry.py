"""The checkpoint-format registry (io/formats.py): one row per format, and every suffix list of
the package read from it."""

from __future__ import annotations

import pytest

from torchinspect.checkpoints.plan import OutputKind, output_kind
from torchinspect.checkpoints.sides import _WEIGHT_SUFFIXES
from torchinspect.cli.output import model_file_stem
from torchinspect.errors import InspectError
from torchinspect.features.inputs import TENSOR_SUFFIXES
from torchinspect.io import checkpoint  # noqa: F401 - registers the weights readers
from torchinspect.io.formats import (
    FORMATS,
    CheckpointFormat,
    reader_for,
    reads,
    suffixes,
    writer_for,
)
from torchinspect.sources.resolve import _FILE_SUFFIXES


def test_every_format_has_one_row_and_every_weights_format_a_reader() -> None:
    assert set(FORMATS) == set(CheckpointFormat)
    for fmt, info in FORMATS.items():
        assert info.format is fmt and info.sniff
        if info.holds == "weights":
            assert callable(reader_for(fmt)), fmt
    with pytest.raises(InspectError, match="no reader for torchscript"):
        reader_for(CheckpointFormat.torchscript)  # a model archive is not read as weights
    with pytest.raises(ValueError, match="already has a reader"):
        reads(CheckpointFormat.safetensors)(lambda *a, **k: None)


def test_a_suffix_names_one_format() -> None:
    listed = [s for info in FORMATS.values() for s in info.suffixes]
    assert len(listed) == len(set(listed))


def test_convert_outputs_are_the_registry_writers() -> None:
    writers = {info.writer for info in FORMATS.values() if info.writer}
    assert writers == {kind.value for kind in OutputKind}
    for info in FORMATS.values():
        for suffix in info.suffixes if info.writer else ():
            assert output_kind(f"out{suffix}") is OutputKind(info.writer)
            assert writer_for(f"out{suffix}") == info.writer
    with pytest.raises(InspectError, match="unknown output format '.pt2'"):
        output_kind("out.pt2")


def test_every_suffix_list_reads_the_registry() -> None:
    assert set(_FILE_SUFFIXES) == set(suffixes(holds=("weights", "model")))
    assert set(_WEIGHT_SUFFIXES) == set(suffixes(holds=("weights", "layout")))
    torch_save = FORMATS[CheckpointFormat.torch_zip].suffixes
    assert set(TENSOR_SUFFIXES) == {*torch_save, ".safetensors", ".npy"}
    for suffix in suffixes():
        assert model_file_stem(f"dir/net{suffix}") == "net", suffix
