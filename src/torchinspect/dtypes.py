"""The one table of dtype names: torch's names and their sizes, the words users type for them,
and the short names of the float types (``fp32``/``fp16``/``bf16``/``fp64``) the commands print.

Leaf module: no torch at import (the CLI and the checkpoint readers use it before torch).
"""

from __future__ import annotations

# torch dtype name (``str(torch.float16)`` without ``torch.``) -> bytes per element
SIZES: dict[str, int] = {
    "float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4,
    "int16": 2, "int8": 1, "uint8": 1, "bool": 1, "complex128": 16, "complex64": 8,
    "uint16": 2, "uint32": 4, "uint64": 8, "float8_e4m3fn": 1, "float8_e5m2": 1,
    "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1, "float8_e8m0fnu": 1,
    "qint8": 1, "quint8": 1, "qint32": 4, "quint4x2": 1, "quint2x4": 1, "complex32": 4,
}

# the words `--input`'s grammar takes for a dtype -> torch dtype name
ALIASES: dict[str, str] = {
    "float": "float32", "float32": "float32", "f32": "float32", "fp32": "float32",
    "half": "float16", "float16": "float16", "fp16": "float16", "f16": "float16",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
    "double": "float64", "float64": "float64", "f64": "float64",
    "long": "int64", "int64": "int64", "i64": "int64",
    "int": "int32", "int32": "int32", "i32": "int32",
    "int16": "int16", "int8": "int8", "uint8": "uint8", "bool": "bool",
}

# floating-point (and complex) types: what a cast or a trainable parameter can be
FLOATING: frozenset[str] = frozenset(
    {"float16", "bfloat16", "float32", "float64", "complex64", "complex128"})

# the float types' short names: short name -> torch name
SHORT: dict[str, str] = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16",
                         "fp64": "float64"}
# the float types a run can be cast to (bench, features, memory --dtype; bench --predict)
RUN: tuple[str, ...] = ("fp32", "fp16", "bf16")


def short_name(text: str) -> str | None:
    """``"half"``, ``"float16"``, ``"fp16"`` -> ``"fp16"``; None for other words."""
    full = ALIASES.get(text.strip().lower())
    return next((short for short, name in SHORT.items() if name == full), None)


def short_of(dtype: object) -> str:
    """A torch dtype (or its name) as the commands print it: ``torch.float16`` -> ``fp16``;
    one without a short name keeps torch's (``torch.int64`` -> ``int64``)."""
    name = str(dtype).removeprefix("torch.")
    return next((short for short, full in SHORT.items() if full == name), name)
