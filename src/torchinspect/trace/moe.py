"""Mixture-of-experts blocks: total parameters vs parameters active per token.

A block is a module that routes each token to ``top_k`` of ``num_experts`` experts
(transformers' ``*SparseMoeBlock``: ``top_k``/``num_experts_per_tok`` on the block or its
router, experts as one fused module with ``num_experts`` or as an ``nn.ModuleList``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import nn

from torchinspect.trace.records import ModuleInfo

_TOP_K = ("top_k", "num_experts_per_tok", "k", "topk")
_COUNT = ("num_experts", "num_local_experts", "n_routed_experts")


@dataclass(frozen=True)
class MoeBlock:
    name: str
    experts: str  # qualified name of the experts module
    num_experts: int
    top_k: int
    expert_params: int  # all experts of this block

    @property
    def active_expert_params(self) -> int:
        return self.expert_params * self.top_k // self.num_experts


def _int_attr(obj: Any, names: tuple[str, ...]) -> int | None:
    for n in names:
        v = getattr(obj, n, None)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


def find_moe(model: nn.Module, infos: dict[str, ModuleInfo]) -> list[MoeBlock]:
    blocks = []
    for name, module in model.named_modules():
        experts = getattr(module, "experts", None)
        if not isinstance(experts, nn.Module):
            continue
        router = next((getattr(module, r) for r in ("gate", "router") if
                       isinstance(getattr(module, r, None), nn.Module)), None)
        cfg = getattr(module, "config", None)
        k = _int_attr(module, _TOP_K) or (router is not None and _int_attr(router, _TOP_K)) \
            or (cfg is not None and _int_attr(cfg, _TOP_K))
        count = _int_attr(experts, _COUNT) or _int_attr(module, _COUNT) or (
            router is not None and _int_attr(router, _COUNT)) or (
            len(experts) if isinstance(experts, nn.ModuleList) else None)
        ename = f"{name}.experts" if name else "experts"
        info = infos.get(ename)
        if not k or not count or info is None or k >= count:
            continue
        blocks.append(MoeBlock(name, ename, count, k, info.total_params))
    return blocks


def moe_notes(model: nn.Module, infos: dict[str, ModuleInfo]) -> list[str]:
    blocks = find_moe(model, infos)
    if not blocks:
        return []
    total = infos[""].total_params if "" in infos else 0
    inactive = sum(b.expert_params - b.active_expert_params for b in blocks)
    ks = sorted({(b.top_k, b.num_experts) for b in blocks})
    shape = ", ".join(f"top-{k} of {e}" for k, e in ks)
    return [
        f"mixture of experts: {len(blocks)} block(s), {shape} experts per token; "
        f"{total:,} parameters in total, {total - inactive:,} active per token",
        "MoE MACs count top-k experts for every token (tokens x k x expert size): the same "
        "whichever experts the router picks (on meta no routing runs; a real run uses the "
        "router's real choice, and the total does not change)",
    ]
