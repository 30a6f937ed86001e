"""Failure explanation: one line saying which op or construct made the export fail, and
in which module of the model."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from torchinspect.errors import first_line

_OP_RE = re.compile(r"OpOverload\(op='([^']+)'")
_CALL_RE = re.compile(r'The following call raised this error:\s*\n\s*File "([^"]+)", line (\d+), '
                      r'in (\w+)\s*\n\s*(.+)')


def _chain(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in out:
        out.append(cur)
        cur = cur.__cause__ or cur.__context__
    return out


def _module_of(chain: list[BaseException], names: dict[int, str]) -> str | None:
    """The innermost module of the model on the failing stack (or in the failing FX node)."""
    found: str | None = None
    for e in chain:
        tb = e.__traceback__
        while tb is not None:
            loc = tb.tb_frame.f_locals
            owner = loc.get("self")
            if owner is not None and id(owner) in names:
                found = names[id(owner)]
            node = loc.get("node")
            stack = getattr(node, "meta", {}).get("nn_module_stack") if node is not None else None
            if stack:
                path = list(stack.values())[-1][0]
                found = re.sub(r"^L\['self'\]\.?", "", str(path)).replace("._modules['", ".") \
                    .replace("']", "") or found
            tb = tb.tb_next
    return found


def explain_failure(exc: BaseException, model: Any, opset: int | None) -> str:
    """One line saying which op or construct made the export fail, and where."""
    names = {id(m): (n or "(model)") for n, m in model.named_modules(remove_duplicate=False)}
    chain = _chain(exc)
    where = _module_of(chain, names)
    mod = ""
    if where is not None:
        mtype = next((type(m).__name__ for n, m in model.named_modules() if (n or "(model)") == where), None)
        mod = f" in {where}" + (f" ({mtype})" if mtype else "")
    text = "\n".join(str(e) for e in chain)
    kinds = {type(e).__name__ for e in chain}
    call = _CALL_RE.search(text)
    at = f" at {Path(call.group(1)).name}:{call.group(2)}: {call.group(4).strip()}" if call else ""
    if "GuardOnDataDependentSymNode" in kinds or "data-dependent" in text or \
            "data dependent" in text:
        return f"data-dependent Python control flow{mod}{at} (a branch on a tensor's value)"
    op = _OP_RE.search(text)
    if "DispatchError" in kinds or "No ONNX function found" in text:
        opname = op.group(1) if op else "an op"
        return (f"unsupported op {opname}{mod or ' in the model' + chr(39) + 's own forward'}: "
                f"no ONNX translation at opset {opset if opset is not None else _default_opset()}")
    if "ConstraintViolation" in text or "Constraints violated" in text or \
            "specialized" in text.lower():
        return f"the dynamic dims conflict with the model{mod}{at}: {first_line(chain[-1])}"
    return f"{type(chain[-1]).__name__}{mod}{at}: {first_line(chain[-1])}"


def _default_opset() -> str:
    from torchinspect.privtorch import onnx_default_opset

    return onnx_default_opset()



