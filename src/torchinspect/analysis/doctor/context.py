"""What a check gets: the model, where its modules were built, the meta trace and the real
runs, each made once and only when a chosen check asks for it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torchinspect import device as devices
from torchinspect.errors import InspectError, first_line


class Skip(Exception):  # noqa: N818 - a check's way to say why it did not run
    """Raised by a check (or by ``Context.trace``/``run``) that cannot run; ``reason`` is
    shown as "TI003 skipped: <reason>"."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class Context:
    """One model under the doctor's checks (``check(ctx) -> list[Finding]``)."""

    case: Any
    model: Any  # the model the static checks read (on meta for MODEL text)
    chosen: set[str]
    sites: dict[str, str] = field(default_factory=dict)  # module name -> line that built it
    inits: dict[str, str] = field(default_factory=dict)  # parameter -> its nn.init.* call
    given_trace: Any = None
    notes: list[str] = field(default_factory=list)
    run_device: str | None = None
    trace_error: InspectError | None = None
    _trace: Any = None
    _run: Any = None
    _run_skip: str | None = None
    _trace_broken: str | None = None

    def trace(self) -> Any:
        """The eval-mode meta trace (the one ``inspect report`` passed, else made once)."""
        if self._trace is not None:
            return self._trace
        if self.trace_error is not None:
            raise Skip(f"the meta trace failed: {self.trace_error.message}")
        from torchinspect.analysis.doctor.sites import model_warnings
        from torchinspect.trace import trace_model

        if self._trace_broken is not None:
            raise Skip(self._trace_broken)
        trace = self.given_trace
        if trace is None or trace.train:
            try:
                with model_warnings(self.notes):
                    trace = trace_model(self.model, self.case.require_example(), device="meta",
                                        rebuild=self.case.rebuild)
            except InspectError as exc:  # the model's forward fails: TI011 says where
                if isinstance(exc.__context__, InspectError) or exc.__context__ is None:
                    raise
                self.trace_error = exc
                raise Skip(f"the meta trace failed: {exc.message}") from None
            except Exception as exc:  # noqa: BLE001 - our own failure: said once, for every check
                self._trace_broken = f"the meta trace could not finish ({first_line(exc, typed=True)})"
                self.notes.append(f"{self._trace_broken}: a bug in torchinspect; the checks "
                                  "that need it are skipped")
                raise Skip(self._trace_broken) from None
        if trace.fallback_reason:
            self.notes.append(f"shapes traced on {trace.device}: {trace.fallback_reason}")
        self._trace = trace
        return trace

    def run(self, code: str | None = None) -> Any:
        """The real runs' facts (``.runtime.RunData``), made once on ``case.requested``."""
        if self._run is None and self._run_skip is None:
            self._start_run()
        if self._run_skip is not None:
            raise Skip(self._run_skip)
        if code is not None and code in self._run.skipped:
            raise Skip(self._run.skipped[code])
        return self._run

    def _start_run(self) -> None:
        if self.case.requested == "meta":
            self._run_skip = "--device meta: no real numbers"
            return
        import torch

        from torchinspect.analysis.doctor.runtime import run_model

        device = devices.real_device(self.case.requested)
        try:
            real = self.case.real_model(device)
            args, kwargs = self.case.inputs_on(device)
        except InspectError as exc:  # too big for this machine, or no way to get weights
            self._run_skip = f"no real model on {device}: {exc.message}"
            return
        from torchinspect.analysis.doctor.rules import rules

        watched = {c for c, r in rules().items() if r.needs == "run"} & self.chosen
        try:
            with torch.random.fork_rng(devices=[]):  # random inputs must not move the user's RNG
                self._run = run_model(real, args, kwargs, self.chosen, watch=bool(watched))
        except InspectError:
            raise  # the model's code ended the process (sys.exit): exit 70 with its message
        except Exception as exc:  # noqa: BLE001 - our own failure: the run checks are skipped
            self._run_skip = f"the real runs could not finish ({first_line(exc, typed=True)})"
            self.notes.append(f"{self._run_skip}: a bug in torchinspect; the checks that "
                              "need them are skipped")
            return
        self.run_device = device
        self.notes += self._run.notes

    def site(self, name: str) -> str | None:
        """Where the module ``name`` (or its closest parent) was built."""
        while True:
            if name in self.sites:
                return self.sites[name]
            if not name:
                return None
            name = name.rpartition(".")[0]
