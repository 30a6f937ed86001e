"""Which layers can be extracted, and a context that captures their outputs.

Two kinds of names:

* module names (``layer1``, ``features.29``, ``classifier.4``): any submodule, found with
  ``named_modules``; captured with a forward hook on the module's FIRST call (a module
  called twice, like ResNet's shared ``relu``, has FX names for the later calls).
* FX node names (``layer1.0.relu_1``, ``layer1.0.add``, ``flatten``) from
  ``torchvision.models.feature_extraction.get_graph_node_names``; captured with
  ``create_feature_extractor``, which prunes the graph after the last requested node.

When every requested name is a module name, hooks are used and the forward stops right
after the last requested layer has produced its output (an exception raised from the hook,
caught here). Models FX cannot trace therefore still work by module name.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn

from torchinspect import device as devices
from torchinspect.errors import InspectError, first_line
from torchinspect.guard import training_mode
from torchinspect.shapes import first_tensor
from torchinspect.sources.case import ModelLike, ModelOptions, make_case, materialize
from torchinspect.trace.policy import trace_case


@dataclass
class LayerInfo:
    name: str
    kind: str  # "module" or "node"
    type: str  # module class, or the FX op/target for nodes
    shape: list[int] | None  # output shape at the example input (None: not a tensor)
    dtype: str | None = None
    calls: int = 1  # how many times the module ran in one forward

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class LayerListing:
    model: str
    input: str
    modules: list[LayerInfo]
    nodes: list[LayerInfo]
    fx_error: str | None = None  # why FX node names are not available
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)  # LayerInfo's to_dict is asdict too


def _shape_of(value: Any) -> tuple[list[int] | None, str | None]:
    if isinstance(value, torch.Tensor):
        return list(value.shape), str(value.dtype).removeprefix("torch.")
    if isinstance(value, (tuple, list)) and value and isinstance(value[0], torch.Tensor):
        return list(value[0].shape), str(value[0].dtype).removeprefix("torch.")
    return None, None


def fx_node_names(model: nn.Module) -> list[str]:
    """Eval-mode FX node names (raises when the model cannot be traced)."""
    from torchvision.models.feature_extraction import get_graph_node_names

    with _quiet():
        _, names = get_graph_node_names(model)
    return list(names)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def list_layers(model: ModelLike, *, options: ModelOptions | None = None) -> LayerListing:
    """Every extractable layer with its output shape at the model's example input.

    Module names come from one traced forward (meta by default: no memory, works on
    models FX cannot trace); FX node names, where the model is traceable, with their
    shapes from running the FX graph on meta tensors. ``model``: a MODEL text, a
    ModelCase or an ``nn.Module`` (with ``options.inputs``).
    """
    case = make_case(model, options=options, device="auto")  # a ModelCase as it is
    trace = trace_case(case)
    modules: dict[str, LayerInfo] = {}
    for c in trace.calls:
        if not c.name:
            continue
        if c.name in modules:
            modules[c.name].calls += 1
            continue
        first = first_tensor(c.outputs)
        shape, dtype = (list(first.shape), first.dtype) if first is not None else (None, None)
        modules[c.name] = LayerInfo(c.name, "module", c.type, shape, dtype)
    nodes: list[LayerInfo] = []
    fx_error = None
    try:
        names = [n for n in fx_node_names(case.model) if n not in ("x", "input")]
        outs: dict[str, Any] = {}
        if devices_on_meta(case.model):
            try:
                args, kwargs = materialize(case.require_example(), "meta")
                outs = _run_fx(case.model, names, args, kwargs)
            except Exception:  # names without shapes rather than nothing
                outs = {}
        for n in names:
            shape, dtype = _shape_of(outs.get(n))
            nodes.append(LayerInfo(n, "node", "", shape, dtype))
    except Exception as exc:  # FX cannot trace this model: module names still work
        fx_error = first_line(exc, typed=True)
    notes = []
    if trace.fallback_reason:
        notes.append(f"shapes from a real CPU run: {trace.fallback_reason}")
    return LayerListing(case.name, case.describe_inputs(), list(modules.values()), nodes,
                        fx_error, notes)


def devices_on_meta(model: nn.Module) -> bool:
    return devices.has_meta_tensors(model)


def _run_fx(model: nn.Module, names: Sequence[str], args: tuple[Any, ...],
            kwargs: dict[str, Any]) -> dict[str, Any]:
    from torchvision.models.feature_extraction import create_feature_extractor

    with training_mode(model), _quiet():
        fx = create_feature_extractor(model, return_nodes=list(names))
        with torch.inference_mode():
            return dict(fx(*args, **kwargs))


class _Stop(Exception):
    """Raised from the last hook to end the forward early."""


class LayerCapture:
    """Capture the outputs of ``names`` on each call: ``capture(*args) -> {name: tensor}``.

    Use as a context manager: hooks (or the FX extractor) live inside it, eval mode is set
    and every ``training`` flag is restored on exit. ``method`` is "hooks" or "fx".
    """

    def __init__(self, model: nn.Module, names: Sequence[str], *, early_stop: bool = True) -> None:
        if not names:
            raise InspectError("no layers requested", hint="pass --layers NAME[,NAME...]; "
                               "`inspect features MODEL --list` shows the names")
        self.model = model
        self.names = list(dict.fromkeys(names))
        self.early_stop = early_stop
        modules = dict(model.named_modules())
        self.method = "hooks" if all(n in modules and n for n in self.names) else "fx"
        self._modules = modules
        self._handles: list[Any] = []
        self._fx: Any = None
        self._stack = contextlib.ExitStack()
        self._got: dict[str, Any] = {}

    def __enter__(self) -> LayerCapture:
        self._stack.enter_context(training_mode(self.model))
        if self.method == "fx":
            self._fx = self._build_fx()
        else:
            for n in self.names:
                self._handles.append(self._modules[n].register_forward_hook(self._hook(n)))
        return self

    def __exit__(self, *exc: Any) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self._stack.close()

    def _build_fx(self) -> Any:
        from torchvision.models.feature_extraction import create_feature_extractor

        try:
            known = set(fx_node_names(self.model))
        except Exception as exc:
            bad = [n for n in self.names if n not in self._modules]
            raise InspectError(
                f"layer {', '.join(bad)}: not a module name, and FX node names are not "
                f"available for this model ({first_line(exc, typed=True)})",
                hint="use module names (see `inspect features MODEL --list`)") from None
        prefixes: set[str] = set()
        for k in known:
            parts = k.split(".")
            prefixes.update(".".join(parts[:i]) for i in range(1, len(parts)))
        bad = [n for n in self.names if n not in known and n not in prefixes and n not in self._modules]
        if bad:
            raise _unknown_layers(bad, list(self._modules) + sorted(known))
        try:
            with _quiet():
                fx = create_feature_extractor(self.model, return_nodes=self.names)
            fx.eval()  # shares the model's submodules: their flags are restored on exit
            return fx
        except Exception as exc:
            raise InspectError(f"cannot build an FX feature extractor for {', '.join(self.names)}: "
                               f"{first_line(exc, typed=True)}",
                               hint="use module names (see `inspect features MODEL --list`)") from None

    def _hook(self, name: str) -> Any:
        def hook(_mod: nn.Module, _args: Any, out: Any) -> None:
            if name in self._got:
                return  # first call only
            self._got[name] = out
            if self.early_stop and len(self._got) == len(self.names):
                raise _Stop

        return hook

    def __call__(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        if self._fx is not None:
            out = self._fx(*args, **kwargs)
            return {n: out[n] for n in self.names}
        self._got = {}
        try:
            self.model(*args, **kwargs)
        except _Stop:
            pass
        got, self._got = self._got, {}
        missing = [n for n in self.names if n not in got]
        if missing:
            raise InspectError(f"layer {', '.join(missing)} did not run in the forward",
                               hint="pick layers that the forward calls (`inspect features "
                               "MODEL --list` shows them)")
        return {n: got[n] for n in self.names}


def _unknown_layers(bad: Sequence[str], known: Sequence[str]) -> InspectError:
    import difflib

    near = difflib.get_close_matches(bad[0], list(dict.fromkeys(known)), n=3)
    hint = (f"did you mean {', '.join(near)}? " if near else "") + \
        "`inspect features MODEL --list` shows every layer name"
    return InspectError(f"unknown layer {', '.join(bad)}", hint=hint)


def check_layer_names(model: nn.Module, names: Sequence[str]) -> None:
    """Fail early (before any input is read) on names that are neither modules nor nodes,
    and on TorchScript modules (they take no forward hooks)."""
    scripted = [n for n, m in model.named_modules() if n in names
                and isinstance(m, torch.jit.ScriptModule)]
    if scripted:
        raise InspectError(f"--layers {', '.join(scripted)}: a TorchScript module takes no "
                           "forward hooks, so its output cannot be captured",
                           hint="pick the Python module that calls it, or a layer after it")
    modules = {n for n, _ in model.named_modules() if n}
    if all(n in modules for n in names):
        return
    try:
        known = set(fx_node_names(model))
    except Exception:
        known = set()
    prefixes: set[str] = set()
    for k in known:
        parts = k.split(".")
        prefixes.update(".".join(parts[:i]) for i in range(1, len(parts)))
    bad = [n for n in names if n not in modules and n not in known and n not in prefixes]
    if bad:
        raise _unknown_layers(bad, sorted(modules) + sorted(known))
