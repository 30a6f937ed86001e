"""torchrun ranks of ``inspect features``: the process group, its barrier, rank 0's weights
for every rank, and the slowest rank's timings.

Under ``torchrun`` (``WORLD_SIZE`` > 1) each rank takes a contiguous slice of the sorted
list of pending inputs and writes its own shards; rank 0 holds the output folder's lock,
recovers the folder before the others look, and merges every rank's progress after a
barrier. NCCL on CUDA, gloo on CPU.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class Ranks:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    owned: bool = False  # we initialized the process group
    device: str = "cpu"

    def barrier(self) -> None:
        if self.world > 1:
            import torch.distributed as dist

            if self.device.startswith("cuda"):
                dist.barrier(device_ids=[torch.device(self.device).index or 0])
            else:
                dist.barrier()

    def close(self) -> None:
        if self.owned:
            import torch.distributed as dist

            dist.destroy_process_group()

    def broadcast_weights(self, net: torch.nn.Module) -> None:
        """Every rank computes with rank 0's parameters and buffers."""
        if self.world <= 1:
            return
        import torch.distributed as dist

        with torch.no_grad():
            for t in [*net.parameters(), *net.buffers()]:
                dist.broadcast(t.data, src=0)

    def gather(self, value: Any) -> list[Any]:
        """``value`` of every rank (rank order); ``[value]`` in one process."""
        if self.world <= 1:
            return [value]
        import torch.distributed as dist

        every = [value] * self.world
        dist.all_gather_object(every, value)
        return every

    def first_error(self, error: str | None) -> str | None:
        """Rank 0's error (or any rank's), known to every rank: all ranks stop together."""
        if self.world <= 1:
            return error
        return next((e for e in self.gather(error) if e), None)


def init_ranks(device: str) -> Ranks:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Ranks(device=device)
    import torch.distributed as dist

    local = int(os.environ.get("LOCAL_RANK", "0"))
    if device == "cuda":  # one GPU per local rank
        device = f"cuda:{local}"
    owned = False
    if not dist.is_initialized():
        if device.startswith("cuda"):
            torch.cuda.set_device(torch.device(device))
            dist.init_process_group("nccl", device_id=torch.device(device))
        else:
            dist.init_process_group("gloo")
        owned = True
    return Ranks(dist.get_rank(), dist.get_world_size(), local, owned, device)


def slowest(ranks: Ranks, mine: tuple[float | None, ...]) -> list[float | None]:
    """Per position of ``mine``: the largest value over the ranks (None where none has one)."""
    every = ranks.gather(mine)
    out: list[float | None] = []
    for k in range(len(mine)):
        vals = [v[k] for v in every if v[k] is not None]
        out.append(round(max(vals), 4) if vals else None)
    return out
