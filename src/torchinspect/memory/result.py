"""Results of ``inspect memory``: plain dataclasses with one ``to_dict()``."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from torchinspect.memory.budget import MemoryBudget

# the makeup of an allocated total, in this order everywhere
CATEGORIES = ("weights", "buffers", "input", "gradients", "optimizer state", "activations",
              "temporaries", "workspace")


@dataclass
class PhasePeak:
    """The highest allocated total within one phase of one run."""

    phase: str  # inference, forward, backward, optimizer
    step: int  # training iteration: 1 (optimizer state created), 2 (steady state); 0 inference
    peak: int
    module: str  # the module running when it happened ("" outside any module)
    breakdown: dict[str, int]


@dataclass
class RunMemory:
    """One predicted run: inference, or two training steps (first and steady state)."""

    mode: str  # inference | training
    peak: int
    phase: str
    step: int
    module: str
    breakdown: dict[str, int]  # what is allocated at the peak, by category
    phases: list[PhasePeak]
    saved: list[tuple[str, int]]  # modules by activation bytes alive when the backward starts
    saved_total: int = 0
    timeline: list[tuple[str, int, int]] = field(default_factory=list)  # (phase, step, bytes)
    ops: int = 0
    optimizer_state: int = 0
    gradients: int = 0
    # cuDNN workspaces not measured for this GPU give a range (workspace.py); equal to peak
    # when every workspace is known
    peak_low: int | None = None
    peak_high: int | None = None
    high_at: str = ""  # the op whose workspace sets peak_high (its module and problem)
    peak_at: str = ""  # set by the replay: the cuDNN workspace allocated at the peak, if any

    @property
    def where(self) -> str:
        """``forward at layer1.0``, ``backward at fc``, ``optimizer step``, ``inference at x``."""
        if self.phase == "optimizer":
            return f"optimizer step ({'first' if self.step == 1 else 'steady'} step)"
        at = f" at {self.module}" if self.module else ""
        step = "" if self.mode == "inference" else f" ({'first' if self.step == 1 else 'steady'} step)"
        return f"{self.phase}{at}{step}"

    def phase_peak(self, phase: str, step: int) -> PhasePeak | None:
        return next((p for p in self.phases if p.phase == phase and p.step == step), None)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["where"] = self.where
        d.pop("peak_at", None)
        d["saved"] = [{"module": m, "bytes": b} for m, b in self.saved]
        d["timeline"] = [{"phase": p, "step": s, "bytes": b} for p, s, b in self.timeline]
        return d


@dataclass
class MemoryResult:
    """The predicted peak memory of one model at one batch (inference and a training step)."""

    model: str
    input: str
    batch: int | None
    device: str  # the allocator the prediction follows: cuda (caching allocator) or cpu
    gpu: str | None  # the GPU whose cuBLAS workspace size is used
    config: dict[str, Any]
    params: int
    weight_bytes: int
    buffer_bytes: int
    input_bytes: int
    inference: RunMemory | None
    training: RunMemory | None
    budget: int | None = None  # --fit: the bytes a peak may reach (the usable memory)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def peak(self) -> int:
        """The larger of the inference and training peaks."""
        return max(r.peak for r in (self.inference, self.training) if r is not None)

    def fits(self, mode: str) -> bool | None:
        run = self.inference if mode == "inference" else self.training
        if self.budget is None or run is None:
            return None
        return run.peak <= self.budget

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model, "input": self.input, "batch": self.batch, "device": self.device,
            "gpu": self.gpu, "config": self.config, "params": self.params,
            "weight_bytes": self.weight_bytes, "buffer_bytes": self.buffer_bytes,
            "input_bytes": self.input_bytes,
            "inference": self.inference.to_dict() if self.inference else None,
            "training": self.training.to_dict() if self.training else None,
            "budget": self.budget, "notes": list(self.notes), "seconds": round(self.seconds, 3),
        }


@dataclass
class FitProbe:
    """One prediction of the --fit search: its peak (the upper end where there is a range)."""

    mode: str
    batch: int
    peak: int
    where: str = ""
    ranged: bool = False  # peak is the upper end of a range (cuDNN workspaces not measured)


@dataclass
class FitResult:
    """``--fit``: the largest batch whose predicted peak fits the budget, per mode."""

    budget: int  # the usable bytes the peaks are compared with
    inference: int | None  # None: not even batch 1 fits
    training: int | None
    probes: list[FitProbe]
    capped: bool = False  # the search stopped at its batch limit

    def edge(self, mode: str) -> list[FitProbe]:
        """The probes at the batch found and the next one up (the search makes both)."""
        found = getattr(self, mode)
        batches = (found, found + 1) if found is not None else (1, 2)
        out = []
        for b in batches:
            probe = next((p for p in reversed(self.probes) if p.mode == mode and p.batch == b), None)
            if probe is not None:
                out.append(probe)
        return out

    @property
    def binding(self) -> str | None:
        """The mode that limits the batch (training when both were searched and it is lower)."""
        found = {m: getattr(self, m) for m in ("inference", "training")
                 if any(p.mode == m for p in self.probes)}
        if not found:
            return None
        return min(found, key=lambda m: (found[m] if found[m] is not None else -1,
                                         m == "inference"))

    def to_dict(self) -> dict[str, Any]:
        return {"budget": self.budget, "inference": self.inference, "training": self.training,
                "binding": self.binding,
                "probes": [{"mode": p.mode, "batch": p.batch, "peak": p.peak, "where": p.where,
                            "upper_end": p.ranged} for p in self.probes],
                "capped": self.capped}


@dataclass
class MemorySweep:
    """Several batches (``--batch 1,8,32``), and the ``--fit`` search when asked."""

    results: list[MemoryResult]
    fit: FitResult | None = None
    budget: MemoryBudget | None = None  # --fit: the memory given and what of it is usable

    def to_dict(self) -> dict[str, Any]:
        return {"results": [r.to_dict() for r in self.results],
                "fit": self.fit.to_dict() if self.fit else None,
                "memory": self.budget.to_dict() if self.budget else None}
