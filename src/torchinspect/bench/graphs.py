"""One forward captured in a CUDA graph, and a failed capture that leaves the process usable.

``capture(torch, step, device)`` warms ``step`` up on a side stream, captures one call in a
``torch.cuda.CUDAGraph`` and returns its replay. A forward that cannot be captured (a host
sync, a CPU-to-GPU copy, PyTorch's nested-tensor path for a padded encoder) makes
``torch.cuda.graph``'s exit fail with "operation failed due to a previous error during
capture" *before* the CUDA random generators leave capture mode: every later random op of the
process then fails with "Offset increment outside graph capture encountered unexpectedly"
(``CUDAGeneratorState::increase``). So a failed capture is undone here: the graph is reset,
each default CUDA generator gets a fresh copy of its state (``clone_state``: the same seed and
offset, out of capture mode), the device is synchronized and its cache emptied, and one random
op proves the device works. The error raised (``GraphCaptureFailed``) names what the forward
did that a graph cannot hold; ``DeviceUnusable`` says the device could not be recovered.

``torch`` is passed in (the module, or a stand-in in tests): nothing here imports it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torchinspect.errors import first_line


class GraphCaptureFailed(RuntimeError):
    """The forward could not be captured in a CUDA graph (the device is usable again)."""


class DeviceUnusable(RuntimeError):
    """A failed capture left the CUDA device unusable for the rest of this process."""


def capture(torch: Any, step: Callable[[], Any], device: str) -> Callable[[], Any]:
    """Warm up on a side stream, capture one call of ``step``, return its replay."""
    side = torch.cuda.Stream(device=device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream(device).wait_stream(side)
    torch.cuda.synchronize(device)
    graph = torch.cuda.CUDAGraph()
    cause: list[BaseException] = []
    try:
        with torch.cuda.graph(graph):
            try:
                out = step()
            except Exception as exc:
                cause.append(exc)  # the forward's own error: the graph's exit hides it
                raise
    except Exception as exc:
        reason = first_line(cause[0] if cause else exc, typed=True)
        del cause[:]
        recover(torch, device, graph)
        raise GraphCaptureFailed(
            f"the forward cannot be captured in a CUDA graph ({reason}); time it without "
            "--cuda-graphs") from None
    torch.cuda.synchronize(device)

    def replay() -> Any:
        graph.replay()
        return out

    return replay


def recover(torch: Any, device: str, graph: Any = None) -> None:
    """Undo a failed capture (see the module docstring); ``DeviceUnusable`` if it stays broken."""
    if graph is not None:
        try:
            graph.reset()
        except Exception:  # noqa: BLE001 - a half-captured graph may refuse; it is dropped anyway
            pass
    for gen in getattr(torch.cuda, "default_generators", ()):
        try:  # a fresh state: same seed and offset, out of capture mode
            gen.graphsafe_set_state(gen.clone_state())
        except Exception:  # noqa: BLE001 - a generator that was never registered is fine as is
            pass
    try:
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        probe = torch.empty(16, device=device)
        probe.normal_()  # the random generator, as the next model's inputs use it
        torch.cuda.synchronize(device)
    except Exception as exc:  # noqa: BLE001 - said as the device's state, not a traceback
        raise DeviceUnusable(f"the CUDA device is unusable after a failed CUDA-graph capture "
                             f"({first_line(exc, typed=True)}); run each model in a process of "
                             "its own, or without --cuda-graphs") from None
