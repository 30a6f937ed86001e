"""Small models for the latency sets that torchvision, timm and the zoo lack (each named
``benchmarks/latency_zoo.py:Name`` in latency_measure.MODELS, so a predictor builds the same
model from the same spec).

``GRUNet``: a 2-layer GRU over 64 steps of 256 features (the development set's RNN).
``TextEncoder``: ``nn.TransformerEncoder``, 6 layers of width 512 over 128 tokens (an
encoder-only transformer; validation until issue 40, development since).
``FastEncoder``: ``nn.TransformerEncoder``, 4 layers of width 384 (6 heads, GELU) over 197
tokens (the development set's fast-path transformer; added with sweep 2).
The classes after them came with sweep 3 (issue 40); each docstring says its set.
"""

from __future__ import annotations

import torch
from torch import nn


class GRUNet(nn.Module):
    example_input = "1,64,256"

    def __init__(self) -> None:
        super().__init__()
        self.gru = nn.GRU(256, 512, num_layers=2, batch_first=True)
        self.head = nn.Linear(512, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.gru(x)
        return self.head(out[:, -1])


class TextEncoder(nn.Module):
    example_input = "1,128,512"

    def __init__(self) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(512, 8, 2048, batch_first=True, dropout=0.0)
        self.encoder = nn.TransformerEncoder(layer, 6, enable_nested_tensor=False)
        self.head = nn.Linear(512, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x).mean(1))


class FastEncoder(nn.Module):
    example_input = "1,197,384"

    def __init__(self) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(384, 6, 1536, batch_first=True, dropout=0.0,
                                           activation="gelu")
        self.encoder = nn.TransformerEncoder(layer, 4, enable_nested_tensor=False)
        self.head = nn.Linear(384, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x)[:, 0])


# ---- added with sweep 3 (issue 40): the op kinds earlier sets lacked. Each is generic
# (common published shapes of its family, not a copy of any held-out model). The development
# ones may be tuned on; the validation ones (latency_measure.VALIDATION) never.


class UNetTransposed(nn.Module):
    """Development: a 3-level U-Net whose decoder upsamples with ``ConvTranspose2d`` (k2 s2)."""

    example_input = "1,3,128,128"

    def __init__(self, width: int = 32) -> None:
        super().__init__()

        def block(cin: int, cout: int) -> nn.Sequential:
            return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout),
                                 nn.ReLU(inplace=True), nn.Conv2d(cout, cout, 3, padding=1),
                                 nn.BatchNorm2d(cout), nn.ReLU(inplace=True))

        c = [width, 2 * width, 4 * width, 8 * width]
        self.downs = nn.ModuleList([block(3, c[0]), block(c[0], c[1]), block(c[1], c[2])])
        self.mid = block(c[2], c[3])
        self.ups = nn.ModuleList([nn.ConvTranspose2d(c[i + 1], c[i], 2, stride=2)
                                  for i in (2, 1, 0)])
        self.decs = nn.ModuleList([block(2 * c[i], c[i]) for i in (2, 1, 0)])
        self.head = nn.Conv2d(c[0], 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = []
        for down in self.downs:
            x = down(x)
            skips.append(x)
            x = nn.functional.max_pool2d(x, 2)
        x = self.mid(x)
        for up, dec in zip(self.ups, self.decs, strict=True):
            x = dec(torch.cat([up(x), skips.pop()], 1))
        return self.head(x)


class TCNSmall(nn.Module):
    """Development: a temporal convolutional network, ``Conv1d`` k3 with dilations 1..16."""

    example_input = "1,32,2048"

    def __init__(self) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Conv1d(32, 96, 3, padding=1), nn.ReLU()]
        for d in (1, 2, 4, 8, 16):
            layers += [nn.Conv1d(96, 96, 3, padding=d, dilation=d), nn.BatchNorm1d(96), nn.ReLU()]
        self.net = nn.Sequential(*layers, nn.Conv1d(96, 8, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class Seq2SeqTransformer(nn.Module):
    """Development: ``nn.Transformer`` (3+3 layers, width 256) with a causal target mask and
    a source padding mask."""

    example_input = ["1,80,256", "1,60,256"]

    def __init__(self) -> None:
        super().__init__()
        self.t = nn.Transformer(256, 8, 3, 3, 1024, dropout=0.1, batch_first=True)
        self.head = nn.Linear(256, 1000)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        causal = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1], device=tgt.device,
                                                                dtype=tgt.dtype)
        pad = torch.zeros(src.shape[0], src.shape[1], dtype=torch.bool, device=src.device)
        out = self.t(src, tgt, tgt_mask=causal, src_key_padding_mask=pad,
                     memory_key_padding_mask=pad, tgt_is_causal=True)
        return self.head(out)


class BiLSTMProj(nn.Module):
    """Development: a bidirectional 2-layer ``nn.LSTM`` with ``proj_size`` (hidden 512,
    projected to 128) over 120 steps of 64 features, and a tagging head."""

    example_input = "1,120,64"

    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.LSTM(64, 512, num_layers=2, batch_first=True, bidirectional=True,
                           proj_size=128)
        self.head = nn.Linear(256, 20)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.rnn(x)[0])


class SmallConvNet(nn.Module):
    """Development: a 4-layer CNN for 32x32 images (conv-BN-ReLU, max-pool), the small model
    people serve at batch 1."""

    example_input = "1,3,32,32"

    def __init__(self) -> None:
        super().__init__()
        chans = [3, 32, 64, 128, 256]
        layers: list[nn.Module] = []
        for cin, cout in zip(chans, chans[1:], strict=False):
            layers += [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
                       nn.ReLU(inplace=True), nn.MaxPool2d(2)]
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(256 * 2 * 2, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


class DCGANGenerator(nn.Module):
    """Validation: a DCGAN generator, ``ConvTranspose2d`` k4 s2 from a 128-d latent to a
    64x64 image (BN, ReLU, Tanh)."""

    example_input = "1,128,1,1"

    def __init__(self, latent: int = 128, width: int = 64) -> None:
        super().__init__()
        w = width
        self.net = nn.Sequential(
            nn.ConvTranspose2d(latent, 8 * w, 4, 1, 0, bias=False), nn.BatchNorm2d(8 * w),
            nn.ReLU(True),
            nn.ConvTranspose2d(8 * w, 4 * w, 4, 2, 1, bias=False), nn.BatchNorm2d(4 * w),
            nn.ReLU(True),
            nn.ConvTranspose2d(4 * w, 2 * w, 4, 2, 1, bias=False), nn.BatchNorm2d(2 * w),
            nn.ReLU(True),
            nn.ConvTranspose2d(2 * w, w, 4, 2, 1, bias=False), nn.BatchNorm2d(w), nn.ReLU(True),
            nn.ConvTranspose2d(w, 3, 4, 2, 1, bias=False), nn.Tanh())

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.net(z)


class Vocoder1d(nn.Module):
    """Validation: a HiFi-GAN-like vocoder: mel frames upsampled 8x8x2x2 by ``ConvTranspose1d``,
    each stage followed by residual blocks of dilated ``Conv1d`` (kernel 3, 7; dilation 1, 3,
    5), leaky ReLU."""

    example_input = "1,80,64"

    def __init__(self, width: int = 256) -> None:
        super().__init__()
        self.pre = nn.Conv1d(80, width, 7, padding=3)
        self.ups = nn.ModuleList()
        self.res = nn.ModuleList()
        ch = width
        for rate in (8, 8, 2, 2):
            self.ups.append(nn.ConvTranspose1d(ch, ch // 2, 2 * rate, rate, padding=rate // 2))
            ch //= 2
            self.res.append(nn.ModuleList([
                nn.Conv1d(ch, ch, k, padding=d * (k - 1) // 2, dilation=d)
                for k in (3, 7) for d in (1, 3, 5)]))
        self.post = nn.Conv1d(ch, 1, 7, padding=3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        act = nn.functional.leaky_relu
        x = self.pre(x)
        for up, convs in zip(self.ups, self.res, strict=True):
            x = up(act(x, 0.1))
            for conv in convs:
                x = x + conv(act(x, 0.1))
        return torch.tanh(self.post(act(x)))


class DilatedConv1dStack(nn.Module):
    """Validation: a WaveNet-style stack of gated ``Conv1d`` (kernel 2, dilations 1..512,
    twice) with residual and skip 1x1 convolutions, after a wide-kernel (k15) input layer."""

    example_input = "1,1,8000"

    def __init__(self, ch: int = 64, skip: int = 128) -> None:
        super().__init__()
        self.inp = nn.Conv1d(1, ch, 15, padding=7)
        self.dils = [2**i for i in range(10)] * 2
        self.filt = nn.ModuleList([nn.Conv1d(ch, 2 * ch, 2, dilation=d, padding=d)
                                   for d in self.dils])
        self.resid = nn.ModuleList([nn.Conv1d(ch, ch, 1) for _ in self.dils])
        self.skips = nn.ModuleList([nn.Conv1d(ch, skip, 1) for _ in self.dils])
        self.out = nn.Sequential(nn.ReLU(), nn.Conv1d(skip, skip, 1), nn.ReLU(),
                                 nn.Conv1d(skip, 256, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.inp(x)
        total = 0
        for filt, resid, skip in zip(self.filt, self.resid, self.skips, strict=True):
            h = filt(x)[..., : x.shape[-1]]
            a, b = h.chunk(2, 1)
            h = torch.tanh(a) * torch.sigmoid(b)
            x = x + resid(h)
            total = total + skip(h)
        return self.out(total)


class SeparableConv1dNet(nn.Module):
    """Validation: a QuartzNet-like speech encoder: depthwise ``Conv1d`` with wide kernels
    (33..87, groups = channels) and pointwise convolutions, BN, ReLU, over 80 mel bins."""

    example_input = "1,80,800"

    def __init__(self) -> None:
        super().__init__()

        def sep(cin: int, cout: int, k: int, stride: int = 1, dil: int = 1) -> nn.Sequential:
            return nn.Sequential(
                nn.Conv1d(cin, cin, k, stride=stride, padding=dil * (k // 2), dilation=dil,
                          groups=cin, bias=False),
                nn.Conv1d(cin, cout, 1, bias=False), nn.BatchNorm1d(cout), nn.ReLU())

        self.net = nn.Sequential(
            sep(80, 256, 33, stride=2), sep(256, 256, 33), sep(256, 256, 39), sep(256, 512, 51),
            sep(512, 512, 63), sep(512, 512, 75), sep(512, 512, 87, dil=2),
            nn.Conv1d(512, 1024, 1), nn.ReLU(), nn.Conv1d(1024, 29, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class GroupedConvNet(nn.Module):
    """Validation: a ResNeXt-style network at 160x160: bottlenecks whose 3x3 convolution has
    32 groups (widths 128..1024), stride-2 stages, global pooling."""

    example_input = "1,3,160,160"

    def __init__(self, groups: int = 32) -> None:
        super().__init__()

        class Block(nn.Module):
            def __init__(self, cin: int, mid: int, cout: int, stride: int) -> None:
                super().__init__()
                self.body = nn.Sequential(
                    nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU(True),
                    nn.Conv2d(mid, mid, 3, stride, 1, groups=groups, bias=False),
                    nn.BatchNorm2d(mid), nn.ReLU(True),
                    nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout))
                self.short = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                            nn.BatchNorm2d(cout))
                              if stride != 1 or cin != cout else nn.Identity())

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return torch.relu(self.body(x) + self.short(x))

        self.stem = nn.Sequential(nn.Conv2d(3, 64, 3, 2, 1, bias=False), nn.BatchNorm2d(64),
                                  nn.ReLU(True), nn.MaxPool2d(3, 2, 1))
        blocks: list[nn.Module] = []
        cin = 64
        for mid, cout, n, stride in ((128, 256, 2, 1), (256, 512, 2, 2), (512, 1024, 3, 2),
                                     (1024, 2048, 2, 2)):
            for i in range(n):
                blocks.append(Block(cin, mid, cout, stride if i == 0 else 1))
                cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(2048, 100)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(x)).mean((2, 3)))


class CausalDecoder(nn.Module):
    """Validation: ``nn.TransformerDecoder`` (6 layers, width 512, 8 heads, GELU, pre-norm)
    over 96 target tokens with a causal mask (``tgt_is_causal``), cross-attending to 64
    memory tokens with a memory padding mask; an LM head of 8000."""

    example_input = ["1,96,512", "1,64,512"]

    def __init__(self) -> None:
        super().__init__()
        layer = nn.TransformerDecoderLayer(512, 8, 2048, dropout=0.1, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.decoder = nn.TransformerDecoder(layer, 6, norm=nn.LayerNorm(512))
        self.head = nn.Linear(512, 8000)

    def forward(self, tgt: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        causal = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1], device=tgt.device,
                                                                dtype=tgt.dtype)
        pad = torch.zeros(memory.shape[0], memory.shape[1], dtype=torch.bool,
                          device=memory.device)
        out = self.decoder(tgt, memory, tgt_mask=causal, memory_key_padding_mask=pad,
                           tgt_is_causal=True)
        return self.head(out)


class ProjLSTM(nn.Module):
    """Validation: a 3-layer unidirectional ``nn.LSTM`` with ``proj_size`` (hidden 1024,
    projected to 256; the LSTMP of speech recognisers) over 200 frames of 80 features."""

    example_input = "1,200,80"

    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.LSTM(80, 1024, num_layers=3, batch_first=True, proj_size=256)
        self.head = nn.Linear(256, 500)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.rnn(x)[0])


class CifarResNet20(nn.Module):
    """Validation: ResNet-20 for 32x32 images (3 stages of 3 basic blocks, 16/32/64
    channels): the classic small CNN served at batch 1."""

    example_input = "1,3,32,32"

    def __init__(self) -> None:
        super().__init__()

        class Basic(nn.Module):
            def __init__(self, cin: int, cout: int, stride: int) -> None:
                super().__init__()
                self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
                self.b1 = nn.BatchNorm2d(cout)
                self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
                self.b2 = nn.BatchNorm2d(cout)
                self.short = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                            nn.BatchNorm2d(cout))
                              if stride != 1 or cin != cout else nn.Identity())

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                y = torch.relu(self.b1(self.c1(x)))
                return torch.relu(self.b2(self.c2(y)) + self.short(x))

        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16),
                                  nn.ReLU(True))
        layers: list[nn.Module] = []
        cin = 16
        for cout, stride in ((16, 1), (32, 2), (64, 2)):
            for i in range(3):
                layers.append(Basic(cin, cout, stride if i == 0 else 1))
                cin = cout
        self.layers = nn.Sequential(*layers)
        self.head = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.layers(self.stem(x)).mean((2, 3)))
