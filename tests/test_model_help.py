"""Every command that takes a model documents every MODEL form, from one shared help text."""

from __future__ import annotations

import typer.main

from torchinspect.cli.app import app

# The prefixes and words a user needs to reach each source that sources/resolve.py accepts.
FORMS = ("resnet18", "zoo:", "file.py:", "pkg.mod:", "timm:", "hf:", "Hugging Face",
         "TorchScript", ".pt2", "--arch")


def _model_arguments() -> dict:
    group = typer.main.get_command(app)
    found = {}
    for name, command in group.commands.items():
        for param in command.params:
            if param.param_type_name == "argument" and "MODEL" in (param.metavar or ""):
                found[name] = param
    return found


def test_every_model_argument_lists_every_form():
    found = _model_arguments()
    # the commands that build a model from a MODEL argument (diff's A is one too, named A)
    assert {"summary", "graph", "features", "flops", "params", "report", "bench", "doctor",
            "export", "check"} <= set(found)
    for name, param in found.items():
        missing = [form for form in FORMS if form not in (param.help or "")]
        assert not missing, f"{name}: MODEL help lacks {missing}"


def test_diff_target_lists_every_form():
    group = typer.main.get_command(app)
    (side,) = [p for p in group.commands["diff"].params if p.name == "a"]
    assert all(form in side.help for form in FORMS)


def test_model_help_shown(invoke):
    result = invoke("summary", "--help", terminal_width=200)
    assert result.exit_code == 0
    assert "hf:TYPE" in result.output and "timm:NAME" in result.output
