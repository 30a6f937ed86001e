"""The doctor on the held-out pitfall models of tests/data/doctor_validation/ (not tuned on):
every marked statement found at its line with the right diagnosis, every clean twin without
warnings or errors (the cases and the scoring: tests/doctor_cases.py)."""

from __future__ import annotations

import pytest

from doctor_cases import THIRD_PASS, Case, cases, score
from torchinspect.analysis.doctor import diagnose
from torchinspect.sources.case import ModelOptions

CASES = cases()


def test_the_set_is_there() -> None:
    assert len(CASES) >= 40
    assert all(c.expected for c in CASES)
    third = [c for c in CASES if c.number >= THIRD_PASS]
    assert len(third) >= 25
    assert any(len({name for _, name, _ in c.expected} | {c.model_file.name}) > 1 for c in third)


def _findings(model: str, inputs: list[str]) -> list[dict[str, object]]:
    result = diagnose(model, options=ModelOptions(device="cpu", inputs=inputs))
    return [{"code": f.code, "severity": str(f.severity), "location": f.location}
            for f in result.findings]


# torch.tensor(a_tensor) warns "To copy construct from a tensor...": the model's own warning
@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_found_at_the_line_and_twin_clean(case: Case) -> None:
    found = _findings(case.trigger, case.inputs)
    s = score(case, found, _findings(case.twin, case.inputs))
    assert s["found_at_line"], (case.expected, found)
    assert s["right_diagnosis"], s["misdiagnosed"]
    assert s["twin_noise"] == [], s["twin_noise"]
