"""Write the GPU-saved checkpoint fixtures (run once on a CUDA machine, commit the outputs).

    python tests/data/make_gpu_checkpoint.py

Produces, next to this script:
  gpu_saved_state_dict.pt   a plain state_dict of a tiny conv+BN+linear model, every tensor
                            on cuda:0 when saved (fixed seed, float32 + one float16 tensor)
  gpu_saved_container.pt    {"model": <same state_dict, "module." prefixed>, "epoch": 7,
                            "optimizer": SGD-with-momentum state (on cuda:0)}
  gpu_saved_reference.pt    the same state_dict saved from CPU, for bit-exact comparisons
Each file is a few KB. The tests use them when present and skip otherwise.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

HERE = Path(__file__).parent


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4, 2)
        self.register_buffer("scale", torch.ones(2, dtype=torch.float16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.bn(self.conv(x)).mean((2, 3))
        return self.fc(x) * self.scale


def main() -> None:
    if not torch.cuda.is_available():
        raise SystemExit("needs a CUDA device: the point is storages tagged 'cuda:0'")
    torch.manual_seed(0)
    model = Tiny()
    torch.save(model.state_dict(), HERE / "gpu_saved_reference.pt")
    model = model.cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(2, 3, 8, 8, device="cuda")).sum().backward()
    opt.step()
    model.eval()
    sd = model.state_dict()
    # the reference must hold the same values as the GPU state_dict: save it again from CPU
    torch.save({k: v.cpu() for k, v in sd.items()}, HERE / "gpu_saved_reference.pt")
    torch.save(sd, HERE / "gpu_saved_state_dict.pt")
    torch.save({"model": {f"module.{k}": v for k, v in sd.items()}, "epoch": 7,
                "optimizer": opt.state_dict()}, HERE / "gpu_saved_container.pt")
    for name in ("gpu_saved_state_dict.pt", "gpu_saved_container.pt", "gpu_saved_reference.pt"):
        print(f"wrote {HERE / name} ({(HERE / name).stat().st_size} bytes)")


if __name__ == "__main__":
    main()
