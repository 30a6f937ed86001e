"""Every registered doctor check against models built to break its assumptions: parameters
that appear and vanish in forward, modules replaced during forward, outputs that are not
tensors, forwards that raise. No check may fail on its own (``DoctorResult.broken``), the
run never raises, and the model is left as it was given. A check that does fail is one
"could not finish" line, and the exit code follows the other checks' findings."""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from typer.testing import CliRunner

from torchinspect.analysis.doctor import RULES, diagnose, rules
from torchinspect.cli.app import app


class ParameterAppears(nn.Module):
    """The issue's reproduction: ``self.gain = nn.Parameter(...)`` inside forward."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        self.gain = nn.Parameter(torch.ones(h.shape[-1]))
        return h * self.gain


class ParameterVanishes(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.scale = nn.Parameter(torch.ones(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if "scale" in self._parameters:
            del self.scale
        self.fc.register_parameter("bias", None)
        return self.fc(x)


class ModuleReplaced(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8))
        self.head = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.body = nn.Identity()  # the module tree changes under the checks
        self.head = nn.Linear(8, 2)
        return self.head(self.body(x))


class NotTensors(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> Any:
        h = self.fc(x)
        return {"name": "out", "count": 3, "none": None, "pair": (h, [h.sum().item()]),
                "object": object(), "ints": torch.arange(3)}


class ReturnsNone(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> None:
        self.fc(x)


class Raises(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)
        self.bn = nn.BatchNorm1d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise ValueError("this model refuses every input")


class RaisesInTraining(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            raise RuntimeError("training is not supported")
        return F.softmax(self.fc(x), dim=0)


class Everything(nn.Module):
    """Appears, vanishes, replaces, stores graph state and reshapes, all at once."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 8), nn.Linear(8, 8)])
        self.norm = nn.BatchNorm1d(8)
        self.lost = [nn.Linear(8, 8)]

    def forward(self, x: torch.Tensor) -> Any:
        self.layers.append(nn.Linear(8, 8))
        self.memory = torch.tensor(self.norm(self.layers[0](x)))
        self.layers[1] = nn.Linear(8, 8)
        h = self.norm(self.layers[-1](x)).view(x.shape[-1], x.shape[0])
        self.cache = (h, [h])
        return [h, None, "text"]


MODELS = [ParameterAppears, ParameterVanishes, ModuleReplaced, NotTensors, ReturnsNone, Raises,
          RaisesInTraining, Everything]


def _state(model: nn.Module) -> Any:
    return (sorted(vars(model)), {k: id(v) for k, v in model.named_parameters()},
            {k: id(v) for k, v in model.named_modules()})


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("cls", MODELS, ids=[c.__name__ for c in MODELS])
@pytest.mark.parametrize("batch", [1, 3])
def test_no_check_fails_on_a_model_that_breaks_its_assumptions(cls: type, batch: int) -> None:
    model = cls()
    before = _state(model)
    r = diagnose(model, torch.randn(batch, 8))
    assert r.broken == {}, r.broken  # no check's own code failed
    assert set(r.checked) | set(r.skipped) == set(rules())
    assert _state(model) == before


def test_the_issue_reproduction_is_found_not_exit_70() -> None:
    r = diagnose(ParameterAppears(), torch.randn(1, 8))
    assert [f.code for f in r.findings if f.severity.value == "error"] == ["TI012"]
    assert r.findings[0].location and r.findings[0].location.endswith(
        f"test_doctor_guard.py:{ParameterAppears.forward.__code__.co_firstlineno + 2}")


def test_a_failing_check_is_one_line_and_the_others_stand(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(ctx: Any) -> list[Any]:
        raise KeyError("gain")

    monkeypatch.setitem(RULES, "TI007", dataclasses.replace(RULES["TI007"], check=boom))
    r = diagnose("zoo:pitfall-layer-list")
    assert r.broken == {"TI007": "KeyError: 'gain'"}
    assert "TI007" not in r.checked and [f.code for f in r.findings] == ["TI001"]
    result = CliRunner().invoke(app, ["doctor", "zoo:pitfall-layer-list"])
    assert result.exit_code == 1, result.output  # TI001 is an error: --fail-on error
    assert "TI007 could not finish: KeyError: 'gain'" in result.output
    ok = CliRunner().invoke(app, ["doctor", "zoo:doctor-layer-modulelist"])
    assert ok.exit_code == 0, ok.output  # not 70: the findings decide


class Warns(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        warnings.warn("this layer is deprecated", DeprecationWarning, stacklevel=1)
        return self.fc(x)


def test_the_models_own_warnings_are_one_note_at_their_line() -> None:
    # pytest turns warnings into errors here: none may escape the doctor's runs
    r = diagnose(Warns(), torch.randn(1, 8))
    line = Warns.forward.__code__.co_firstlineno + 1
    said = [n for n in r.notes if "warns" in n]
    assert len(said) == 1, r.notes  # once, though every forward and the trace warned
    assert said[0].startswith("the model's code warns (at ") and \
        f"test_doctor_guard.py:{line}): DeprecationWarning: this layer is deprecated" in said[0]
