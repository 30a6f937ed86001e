"""arguments.py: the API's shared argument forms (batch lists, renamed keywords)."""

from __future__ import annotations

import pytest

from torchinspect.arguments import parse_batches, renamed_keywords
from torchinspect.errors import InspectError


def test_parse_batches_one_form_for_every_command() -> None:
    assert parse_batches("1, 8,32") == (1, 8, 32)
    assert parse_batches("8,1,8") == (8, 1)  # a size runs once, in the order typed
    assert parse_batches(None) is None and parse_batches("  ") is None
    with pytest.raises(InspectError, match=r"--bench-batch '1,x': 'x' is not a positive") as err:
        parse_batches("1,x", option="--bench-batch")
    assert err.value.hint == "e.g. --bench-batch 1,8,32"
    with pytest.raises(InspectError, match="'0'"):
        parse_batches("0")


def test_renamed_keywords_moves_the_value_and_refuses_both() -> None:
    @renamed_keywords(old="new")
    def f(new: int = 0) -> int:
        return new

    assert f(3) == 3 and f(new=4) == 4
    with pytest.warns(DeprecationWarning, match=r"f\(old=...\) is deprecated; use new="):
        assert f(old=5) == 5
    with pytest.raises(TypeError, match="both old= and new="):
        f(old=1, new=2)
