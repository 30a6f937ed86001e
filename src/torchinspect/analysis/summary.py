"""`inspect summary`: a Keras/torchinfo-like layer table with totals, from one Trace.

Row numbers follow the convention of ``trace/tree.py``: Params and MACs include
everything inside the module (the root row is the model total), Self columns are the module's
own. Returns a `Summary` dataclass; ``report/summary.py`` presents it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from torchinspect.analysis.conventions import conventions
from torchinspect.analysis.params import left_out_notes
from torchinspect.analysis.saved_params import is_bare_checkpoint
from torchinspect.arguments import check_depth, renamed_keywords
from torchinspect.errors import InspectError
from torchinspect.gpus import find_gpu
from torchinspect.io.formats import CheckpointFormat, detect_format
from torchinspect.io.torchscript import torchscript_refusal
from torchinspect.memory.faking import make_target
from torchinspect.memory.predict import predict_case
from torchinspect.memory.result import MemoryResult
from torchinspect.memory.step import StepConfig
from torchinspect.memory.watch import InferenceWatch
from torchinspect.shapes import format_shape_tree, shape_lists
from torchinspect.sources.case import ModelCase, ModelLike, ModelOptions, make_case
from torchinspect.trace import trace_case
from torchinspect.trace.records import ModuleInfo, Trace
from torchinspect.trace.tree import (
    ShownCall,
    call_of,
    fold_repeats,
    never_ran_notes,
    shown_tree,
    used_by_parent,
)


class Column(StrEnum):
    """Columns of the summary table (``--columns``)."""

    layer = "layer"
    type = "type"
    input = "input"
    output = "output"
    kernel = "kernel"
    params = "params"
    params_pct = "params_pct"
    self_params = "self_params"
    macs = "macs"
    self_macs = "self_macs"
    trainable = "trainable"
    output_bytes = "output_bytes"  # bytes of the call's output tensors, at their dtype
    flops = "flops"  # 2 x macs (inclusive), the convention of the totals
    time = "time"  # predicted ms on a named GPU (`--gpu`, inspect bench --predict's model)


OPTIONAL_COLUMNS = (Column.self_params, Column.output_bytes, Column.flops, Column.time)
DEFAULT_COLUMNS: tuple[Column, ...] = tuple(c for c in Column if c not in OPTIONAL_COLUMNS)
HEADERS = {
    Column.layer: "Layer", Column.type: "Type", Column.input: "Input shape",
    Column.output: "Output shape", Column.kernel: "Kernel", Column.params: "Params",
    Column.params_pct: "% params", Column.self_params: "Self params", Column.macs: "MACs",
    Column.self_macs: "Self MACs", Column.trainable: "Trainable",
    Column.output_bytes: "Output bytes", Column.flops: "FLOPs", Column.time: "Time (pred.)",
}


def parse_columns(text: str | list[str] | None) -> tuple[Column, ...]:
    """``"layer,output,params"`` -> Columns (``layer`` is always first)."""
    if text is None:
        return DEFAULT_COLUMNS
    parts = text if isinstance(text, list) else [p for p in text.replace(" ", "").split(",") if p]
    cols: list[Column] = []
    for p in parts:
        try:
            cols.append(Column(p.strip().lower().replace("%", "").replace("-", "_")))
        except ValueError:
            raise InspectError(f"--columns: unknown column {p!r}",
                               hint=f"choose from {', '.join(c.value for c in Column)}") from None
    if Column.layer in cols:
        cols.remove(Column.layer)
    return (Column.layer, *cols)


@dataclass
class SummaryRow:
    name: str
    label: str  # tree-drawn text for the Layer column
    type: str
    depth: int
    input: str  # the exact shape text (tables shorten it; CSV keeps it whole)
    output: str
    kernel: str | None
    params: int | None  # inclusive; None on a recursive row (counted on the module's first)
    params_pct: float | None
    macs: int  # inclusive: this call and every call inside it
    trainable: str | None
    self_params: int | None = None  # registered on this module itself
    self_macs: int = 0  # ops run directly in this call's forward
    repeat: int = 1
    container: bool = False  # its children are shown as rows of their own
    called: bool = True  # False: a container (ModuleList, ...) whose forward never ran
    ran: bool = True  # False: a module holding parameters/buffers that never ran
    runs_as: str | None = None  # not called itself; its tied weights ran in this module
    recursive: bool = False  # a later call of a module shown before (params on the first)
    calls: int = 1  # how many times the module ran in the forward
    call_number: int = 0  # 0 for its first call, 1 for the second, ...
    output_bytes: int = 0  # bytes of this call's output tensors (× repeat on a folded row)
    flops: int = 0  # 2 x macs
    time_ms: float | None = None  # predicted on --gpu (inclusive, per call); None: not asked
    # JSON: the shapes as lists and objects (``shape_lists``); None for a row with no call
    input_shape: Any = None
    output_shape: Any = None

    def to_dict(self) -> dict[str, Any]:
        """``input``/``output`` as lists of dimensions (nested lists and objects for several
        tensors), their texts as ``input_text``/``output_text``."""
        d = asdict(self)
        for side in ("input", "output"):
            d[f"{side}_text"] = d[side]
            d[side] = d.pop(f"{side}_shape")
        return d


@dataclass
class Totals:
    params: int
    trainable: int
    frozen: int
    buffers: int
    macs: int
    flops: int
    param_bytes: int
    param_bytes_by_dtype: dict[str, int]
    buffer_bytes: int
    input_bytes: int
    leaf_output_bytes: int  # the sum of every leaf module's outputs (torchinfo's estimate)
    estimated_total_bytes: int  # weights + buffers + input + leaf_output_bytes
    # with a memory prediction (the default): the activations allocated at the predicted
    # inference peak (the peak itself is peak_inference_bytes); None without one
    predicted_activation_bytes: int | None = None
    memory_method: str = "leaf outputs"  # predicted | leaf outputs: which figures the table shows
    memory_device: str | None = None  # the allocator the prediction follows (cuda)
    memory_gpu: str | None = None  # the GPU it is for (cuBLAS workspace, SM count): h100
    peak_inference_bytes: int | None = None
    peak_inference_at: str | None = None  # "inference at layer1.0.conv1"
    peak_training_bytes: int | None = None  # --memory train
    peak_training_at: str | None = None
    training_optimizer: str | None = None
    # a decoder with a KV cache: bytes per token per sequence in its cache (trace/generation.py);
    # an encoder-decoder also per prompt token (its cross-attention cache); None otherwise
    kv_bytes_per_token: int | None = None
    kv_bytes_per_prompt_token: int | None = None

    @property
    def activation_bytes(self) -> int:
        """The activations a table shows: predicted at the inference peak when there is a
        prediction, else the sum of leaf outputs (``memory_method`` says which)."""
        if self.predicted_activation_bytes is not None:
            return self.predicted_activation_bytes
        return self.leaf_output_bytes

    @property
    def total_bytes(self) -> int:
        """The memory a table shows: the predicted inference peak, else the estimate."""
        if self.peak_inference_bytes is not None:
            return self.peak_inference_bytes
        return self.estimated_total_bytes


@dataclass
class Summary:
    """The result of `summarize` (``to_dict()`` for data; report/summary.py renders it)."""

    model: str
    input: str
    device: str
    fallback_reason: str | None
    train: bool
    depth: int
    columns: tuple[Column, ...]
    rows: list[SummaryRow]
    totals: Totals
    not_counted: dict[str, int]
    notes: list[str] = field(default_factory=list)
    folded: bool = False
    trace: Trace | None = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "input": self.input,
            "device": self.device,
            "fallback_reason": self.fallback_reason,
            "train": self.train,
            "depth": self.depth,
            "convention": conventions(),
            "totals": asdict(self.totals),
            "macs_by_op": self.trace.macs_by_op if self.trace else {},
            "not_counted": dict(self.not_counted),
            "notes": list(self.notes),
            "layers": [r.to_dict() for r in self.rows],
        }


def totals_of(trace: Trace, memory: MemoryResult | None = None) -> Totals:
    p = trace.params
    act = trace.activation_bytes
    totals = Totals(
        params=p.total, trainable=p.trainable, frozen=p.frozen, buffers=p.buffers,
        macs=trace.total_macs, flops=2 * trace.total_macs, param_bytes=p.param_bytes,
        param_bytes_by_dtype={k: v.bytes for k, v in p.by_dtype.items()},
        buffer_bytes=p.buffer_bytes, input_bytes=trace.input_bytes, leaf_output_bytes=act,
        estimated_total_bytes=p.param_bytes + p.buffer_bytes + trace.input_bytes + act,
    )
    if memory is not None and memory.inference is not None:
        run = memory.inference
        totals.memory_method, totals.memory_device = "predicted", memory.device
        totals.memory_gpu = memory.gpu
        totals.predicted_activation_bytes = run.breakdown.get("activations", 0)
        totals.peak_inference_bytes = run.peak
        totals.peak_inference_at = run.where
    if memory is not None and memory.training is not None:
        totals.peak_training_bytes = memory.training.peak
        totals.peak_training_at = memory.training.where
        totals.training_optimizer = memory.config.get("optimizer")
    return totals


MEMORY_CHOICES = ("inference", "train", "none")


def predict_summary_memory(case: ModelCase, memory: str, gpu: str | None = None) -> tuple[
        MemoryResult | None, str | None]:
    """The memory lines' prediction (``inspect memory``'s engine, CUDA caching allocator) for
    ``gpu`` (None: the GPU here, else the default): inference, and a training step (AdamW) with
    ``memory="train"``; ``(None, why)`` when the model cannot be predicted (the summary then
    shows the sum of leaf outputs)."""
    if memory not in MEMORY_CHOICES:
        raise InspectError(f"--memory {memory!r}: expected one of {', '.join(MEMORY_CHOICES)}",
                           hint="--memory inference (the default), train or none")
    if memory == "none":
        return None, None
    try:
        return predict_case(case, StepConfig(train=memory == "train"),
                            make_target("cuda", gpu, fast=True),
                            top=0), None
    except InspectError as exc:
        return None, f"memory not predicted ({exc.message}): the memory lines are sums of leaf outputs"


def trace_with_memory(case: ModelCase, train: bool, memory: str, gpu: str | None = None) -> tuple[
        Trace, MemoryResult | None, str | None]:
    """The trace and the memory lines' prediction, from one forward where it can be shared
    (``memory/watch.py``: the inference prediction logged during the trace's meta forward),
    else as two (the trace, then ``predict_summary_memory``): the same figures either way."""
    watch = None
    if memory == "inference":
        watch = InferenceWatch(case, make_target("cuda", gpu, fast=True))
    trace = trace_case(case, train=train, watch=watch)
    if watch is not None and watch.diverged:  # a fused kernel ran where the trace counts ops
        trace = trace_case(case, train=train)
    if watch is not None and watch.usable:
        return trace, watch.result(), None
    predicted, why = predict_summary_memory(case, memory, gpu)
    return trace, predicted, why


def add_times(summary: Summary, case: ModelCase, gpu: str) -> None:
    """Fill each row's ``time_ms``: the latency predicted per call of its module on ``gpu``
    (``inspect bench --predict``'s model at the case's input and the model's own dtype), and
    the note that says so."""
    from torchinspect.latency import module_times, validation_text

    times, pred = module_times(case, gpu)
    for row in summary.rows:
        t = times.get(row.name)
        row.time_ms = None if t is None or not row.ran else t / max(row.calls, 1)
    r = pred.results[0]
    summary.notes.append(
        f"Time (pred.): PREDICTED ms per call on {pred.gpu} ({r.dtype}, CUDA-graph replay; "
        f"whole model {r.gpu_ms:.3f} ms, eager {r.eager_ms:.3f} ms, {r.binds} binds), not "
        f"measured; {pred.source}; {validation_text(pred.validation)}")


def summary_columns(columns: str | list[str] | tuple[Column, ...] | None,
                    gpu: str | None) -> tuple[Column, ...]:
    """The columns to show: as given, else the default ones (and ``time`` with a GPU); a
    ``time`` column needs a GPU to predict it for, and ``gpu`` must be the catalogue's."""
    if gpu is not None:
        find_gpu(gpu)  # an unknown name: did-you-mean, exit 2
    if isinstance(columns, tuple):
        cols = columns
    elif columns is None and gpu is not None:
        cols = (*DEFAULT_COLUMNS, Column.time)
    else:
        cols = parse_columns(columns)
    if Column.time in cols and gpu is None:
        raise InspectError("--columns time: predicted for which GPU?",
                           hint="add --gpu NAME (e.g. --gpu h100)")
    return cols


def kernel_text(info: ModuleInfo | None) -> str | None:
    if info is None or "kernel_size" not in info.layer:
        return None
    lay = info.layer

    def dims(v: Any) -> str:
        return "×".join(str(x) for x in v) if isinstance(v, list) else str(v)

    def one(v: Any) -> str:
        return str(v[0]) if isinstance(v, list) and len(set(v)) == 1 else dims(v)

    def trivial(v: Any, unit: int) -> bool:
        return all(x == unit for x in v) if isinstance(v, list) else v == unit

    text = dims(lay["kernel_size"])
    if "stride" in lay and not trivial(lay["stride"], 1):
        text += f" s{one(lay['stride'])}"
    if "padding" in lay and not isinstance(lay["padding"], str) and not trivial(lay["padding"], 0):
        text += f" p{one(lay['padding'])}"
    elif isinstance(lay.get("padding"), str) and lay["padding"] != "valid":
        text += f" p={lay['padding']}"  # padding="same"
    if "dilation" in lay and not trivial(lay["dilation"], 1):
        text += f" d{one(lay['dilation'])}"
    if lay.get("groups", 1) not in (1, None):
        text += f" g{lay['groups']}"
    return text


def _trainable(info: ModuleInfo | None) -> str | None:
    if info is None or info.total_params == 0:
        return None
    if info.total_trainable == info.total_params:
        return "yes"
    return "no" if info.total_trainable == 0 else "partial"


def rows_of(trace: Trace, root: ShownCall, model_name: str) -> list[SummaryRow]:
    rows: list[SummaryRow] = []
    total = trace.params.total

    def leaf_name(node: ShownCall, parent: ShownCall | None) -> str:
        name = node.call.name
        if parent is None:
            return model_name
        pname = parent.call.name
        short = name[len(pname) + 1:] if pname and name.startswith(pname + ".") else name
        if node.fold > 1 and node.fold_last:
            last = node.fold_last.rpartition(".")[2]
            short = f"{short}…{last} (×{node.fold})"
        return short + _call_suffix(trace, node)

    def walk(node: ShownCall, parent: ShownCall | None, prefix: str, last: bool) -> None:
        info = trace.modules.get(node.call.name)
        if parent is None:
            label, child_prefix = leaf_name(node, None), ""
        else:
            label = prefix + ("└─" if last else "├─") + leaf_name(node, parent)
            child_prefix = prefix + ("  " if last else "│ ")
        params = node.params
        rows.append(SummaryRow(
            name=node.call.name, label=label, type=node.call.type, depth=node.call.depth,
            input=format_shape_tree(node.call.inputs, limit=EXACT),
            output=format_shape_tree(node.call.outputs, limit=EXACT),
            kernel=kernel_text(info), params=params,
            params_pct=(100.0 * params / total) if params is not None and total else None,
            macs=node.macs, trainable=_trainable(info), self_params=node.self_params,
            self_macs=node.self_macs, repeat=node.fold, container=bool(node.children),
            called=node.called, ran=node.ran, runs_as=node.runs_as, recursive=node.recursive,
            calls=info.calls if info else 1, call_number=node.call.call_number,
            output_bytes=node.call.output_bytes * node.fold, flops=2 * node.macs,
            input_shape=shape_lists(node.call.inputs) if node.called else None,
            output_shape=shape_lists(node.call.outputs) if node.called else None,
        ))
        for i, ch in enumerate(node.children):
            walk(ch, node, child_prefix, i == len(node.children) - 1)

    walk(root, None, "", True)
    return rows


EXACT = 10**9  # shape texts kept whole in the rows (the table shortens them)


def _call_suffix(trace: Trace, node: ShownCall) -> str:
    """`` (not run)`` for a module that never ran, `` (call 2/3)`` for a module run
    several times (a block reused in a loop), else nothing."""
    if not node.ran:
        return " (not run)"
    if node.runs_as is not None:
        if used_by_parent(node.call.name, node.runs_as):
            parent = node.call.name.rpartition(".")[0]
            return " (used by its parent)" if node.runs_as == parent else \
                f" (used by {node.runs_as or 'the model'})"
        return f" (tied, runs as {node.runs_as})"
    return call_of(trace, node.call) if node.called and node.fold == 1 else ""


def summary_from_trace(trace: Trace, *, model: str, inputs: str, depth: int = 3,
                       columns: tuple[Column, ...] = DEFAULT_COLUMNS, fold: bool = False,
                       notes: list[str] | None = None,
                       memory: MemoryResult | None = None) -> Summary:
    check_depth(depth)
    root = shown_tree(trace, depth, not_run=True)
    if root is None:
        raise InspectError(f"{model}: the forward ran no module", hint="is the model callable?")
    if fold:
        fold_repeats(trace, root)
    return Summary(
        model=model, input=inputs, device=trace.device, fallback_reason=trace.fallback_reason,
        train=trace.train, depth=depth, columns=columns, rows=rows_of(trace, root, model),
        totals=totals_of(trace, memory), not_counted=dict(trace.uncounted),
        notes=[*(notes or []), *trace.notes, *never_ran_notes(trace)], folded=fold, trace=trace,
    )


def refuse_bare_checkpoint(model_or_spec: Any, options: ModelOptions | None) -> None:
    """A summary runs the model (shapes, MACs): a weights file alone has none to run. The
    error points to ``params``, which counts its tensors from the file's metadata, rather
    than showing that view here: a summary whose rows are key prefixes instead of layers,
    with no shapes or MACs, would be a different table under the same name and schema."""
    opts = options or ModelOptions()
    if is_bare_checkpoint(model_or_spec, opts.arch, opts.trust_pickle):
        if detect_format(model_or_spec) is CheckpointFormat.torchscript:
            raise torchscript_refusal(model_or_spec)
        raise InspectError(
            f"{model_or_spec}: a weights file without an architecture: summary needs a model "
            "to run (shapes, MACs)",
            hint=f"`inspect params {model_or_spec}` counts its tensors, bytes and keys from the "
            f"file alone; `inspect summary {model_or_spec} --arch resnet18` (or zoo:NAME, "
            "file.py:Name) runs it")


@renamed_keywords(model_or_spec="model")
def summarize(model: ModelLike, inputs: Any = None, *, depth: int = 3,
              columns: str | list[str] | tuple[Column, ...] | None = None, fold: bool = False,
              device: str | None = None, train: bool = False,
              options: ModelOptions | None = None, memory: str = "inference",
              gpu: str | None = None) -> Summary:
    """Summarize a model: ``summarize("resnet18", "3,224,224")`` or ``summarize(model, x)``.

    ``memory``: the predicted peak of ``inference`` (default), also of a training step
    (``train``), or ``none`` (the sum of leaf outputs, as torchinfo). ``gpu`` (a name of the
    GPU catalogue, e.g. ``"h100"``): predict for that GPU: each row's ``time_ms`` (the ``time``
    column, shown by default with a GPU) and the memory lines (default: the GPU here, else
    h100)."""
    check_depth(depth)
    cols = summary_columns(columns, gpu)  # usage errors before the model is built
    gpu = find_gpu(gpu).name if gpu is not None else None
    refuse_bare_checkpoint(model, options)
    case = make_case(model, inputs, options=options, device=device)
    trace, predicted, why = trace_with_memory(case, train, memory, gpu)
    notes = [*case.notes, *left_out_notes(case.model), *([why] if why else [])]
    summary = summary_from_trace(trace, model=case.name, inputs=case.describe_inputs(),
                                 depth=depth, columns=cols, fold=fold, notes=notes,
                                 memory=predicted)
    if gpu is not None:
        add_times(summary, case, gpu)
    add_kv_per_token(summary, case)
    return summary


def add_kv_per_token(summary: Summary, case: ModelCase) -> None:
    """A decoder's KV bytes per token (``inspect memory --generate`` tells the whole call)."""
    from torchinspect.trace.generation import kv_per_token

    kv = kv_per_token(case)
    if kv is not None:
        summary.totals.kv_bytes_per_token = kv.decoded
        summary.totals.kv_bytes_per_prompt_token = kv.prompt or None
