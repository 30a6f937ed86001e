"""inspect features: layer capture, inputs and preprocessing, shards/manifest, resume, ranks."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision
from PIL import Image
from safetensors.torch import load_file
from torch import nn

from torchinspect.errors import InspectError
from torchinspect.features import FeatureFolder, LayerCapture, extract_features
from torchinspect.features.inputs import make_preprocess

ROOT = Path(__file__).resolve().parents[1]

from features_tiny import Tiny  # noqa: E402  (tests/ is on sys.path: pytest prepend import mode)


class Untraceable(Tiny):
    def forward(self, x):
        x = self.relu(self.conv(x))
        if x.sum() > 0:  # data-dependent control flow: FX symbolic tracing fails
            x = x * 2
        return self.fc(torch.flatten(self.pool(x), 1))


def _tiny(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return Tiny()


def _images(folder: Path, n: int = 6, size=(40, 30)) -> list[Path]:
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(n):
        p = folder / f"img{i:02d}.png"
        Image.fromarray(rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)).save(p)
        out.append(p)
    return out


def _expected(net: nn.Module, img: Image.Image, resize: int, crop: int) -> torch.Tensor:
    """The reference: PIL's RGB conversion + torchvision's published-weights transform class."""
    from torchvision.transforms._presets import ImageClassification

    t = ImageClassification(crop_size=crop, resize_size=resize)
    x = torch.from_numpy(np.asarray(img.convert("RGB")).copy()).permute(2, 0, 1)
    with torch.no_grad():
        return net.relu(net.conv(t(x).unsqueeze(0)))[0]


# ------------------------------------------------------------------ recipes


@pytest.mark.slow
def test_vgg16_recipes_match_direct_slicing(tmp_path):
    torch.manual_seed(0)
    vgg = torchvision.models.vgg16().eval()
    x = torch.randn(2, 3, 64, 64)
    torch.save(x, tmp_path / "x.pt")  # a batch of 2 samples -> 2 rows
    r = extract_features(vgg, [str(tmp_path / "x.pt")], layers=["features.29", "features.30", "classifier.4"],
                         output=tmp_path / "out", example=torch.zeros(1, 3, 64, 64), workers=0)
    f = FeatureFolder.open(r.output)
    with torch.no_grad():
        relu5_3 = vgg.features[:30](x)
        pool5 = vgg.features(x)
        fc7 = vgg.classifier[:5](torch.flatten(vgg.avgpool(pool5), 1))
    assert [e["id"] for e in f.manifest["inputs"]] == [f"{tmp_path / 'x.pt'}#0", f"{tmp_path / 'x.pt'}#1"]
    torch.testing.assert_close(f.rows("features.29"), relu5_3)
    torch.testing.assert_close(f.rows("features.30"), pool5)
    torch.testing.assert_close(f.rows("classifier.4"), fc7)
    assert r.layers["classifier.4"]["shape"] == [4096] and r.method == "hooks"


def test_resnet_stages_and_gap_cli(invoke, tmp_path):
    torch.manual_seed(0)
    torch.save(torchvision.models.resnet18().state_dict(), tmp_path / "w.pt")
    r = invoke("features", "resnet18", "--weights", tmp_path / "w.pt", "--input", "2,3,64,64",
               "-l", "layer1,layer2,layer3,layer4", "-l", "avgpool", "--pool", "gap",
               "-o", tmp_path / "out", "--format", "json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    shapes = {k: v["shape"] for k, v in data["layers"].items()}
    assert shapes == {"layer1": [64], "layer2": [128], "layer3": [256], "layer4": [512], "avgpool": [512]}
    assert data["rows"] == 2 and data["schema"] == "torchinspect/features/v1"
    m = torchvision.models.resnet18()
    m.load_state_dict(torch.load(tmp_path / "w.pt", weights_only=True))
    from torchinspect.inputs import TensorSpec  # the random rows are seeded: rebuild them

    x = TensorSpec((2, 3, 64, 64)).make("cpu", torch.Generator().manual_seed(0))
    with torch.no_grad():
        feat = torch.flatten(m.eval().avgpool(m.layer4(m.layer3(m.layer2(m.layer1(
            m.maxpool(m.relu(m.bn1(m.conv1(x))))))))), 1)
    torch.testing.assert_close(FeatureFolder.open(tmp_path / "out").rows("avgpool"), feat)


def test_list_shows_modules_and_fx_nodes(invoke):
    r = invoke("features", "resnet18", "--list", "--format", "json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    mods = {m["name"]: m for m in data["modules"]}
    nodes = {n["name"]: n for n in data["nodes"]}
    assert mods["avgpool"]["shape"] == [1, 512, 1, 1] and mods["layer1.0.relu"]["calls"] == 2
    assert nodes["layer1.0.relu_1"]["shape"] == [1, 64, 56, 56] and "layer4.1.add" in nodes


# ------------------------------------------------------------------ FX and module capture


def test_fx_node_name_extracts_the_later_call():
    torch.manual_seed(0)
    m = torchvision.models.resnet18().eval()
    x = torch.randn(1, 3, 64, 64)
    with LayerCapture(m, ["layer1.0.relu_1"]) as cap, torch.no_grad():
        got = cap(x)["layer1.0.relu_1"]
    assert cap.method == "fx"
    with torch.no_grad():
        want = m.layer1[0](m.maxpool(m.relu(m.bn1(m.conv1(x)))))  # relu_1 is the block's output
    torch.testing.assert_close(got, want)


def test_untraceable_model_extracts_by_module_name_and_stops_early(tmp_path):
    torch.manual_seed(0)
    m = Untraceable().train()
    fc_calls = []
    m.fc.register_forward_hook(lambda *a: fc_calls.append(1))
    x = torch.randn(3, 3, 16, 16)
    np.save(tmp_path / "x.npy", x.numpy())
    r = extract_features(m, [str(tmp_path / "x.npy")], layers=["relu"], output=tmp_path / "o",
                         example=torch.zeros(1, 3, 16, 16), workers=0)
    torch.testing.assert_close(FeatureFolder.open(r.output).rows("relu"), m.relu(m.conv(x)).detach())
    assert fc_calls == []  # the forward stopped after the last requested layer
    assert m.training and m.conv.training  # flags restored
    assert len(m.fc._forward_hooks) == 1 and not m.relu._forward_hooks  # only the test's hook
    with pytest.raises(InspectError, match="FX node names are not available"):
        with LayerCapture(m, ["relu_1"]):
            pass


def test_unknown_layer_is_a_usage_error(invoke, tmp_path):
    r = invoke("features", "resnet18", "-l", "layer5", "-o", tmp_path / "o")
    assert r.exit_code == 2
    assert "error: unknown layer layer5" in r.stderr and "did you mean" in r.stderr
    r = invoke("features", "resnet18", "-l", "layer4", "-o", tmp_path / "o", tmp_path / "missing")
    assert r.exit_code == 2 and "no such file" in r.stderr


# ------------------------------------------------------------------ images


def test_folder_with_corrupt_grayscale_and_rgba(invoke, tmp_path):
    folder = tmp_path / "imgs"
    rng = np.random.default_rng(1)
    _images(folder / "a", n=2)
    gray = Image.fromarray(rng.integers(0, 255, (30, 40), dtype=np.uint8), mode="L")
    gray.save(folder / "gray.png")
    rgba = Image.fromarray(rng.integers(0, 255, (30, 40, 4), dtype=np.uint8), mode="RGBA")
    rgba.save(folder / "rgba.png")
    pal = gray.convert("P")
    pal.save(folder / "z_palette.png")
    (folder / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0" + b"not a jpeg" * 20)
    (folder / "notes.txt").write_text("ignored")
    net = _tiny()
    torch.save(net.state_dict(), tmp_path / "w.pt")
    spec = ROOT / "tests" / "features_tiny.py"
    r = invoke("features", f"{spec}:Tiny", "--weights", tmp_path / "w.pt", folder, "-l", "relu",
               "--resize", "24", "--crop", "20", "-o", tmp_path / "out", "--workers", "1")
    assert r.exit_code == 1, r.output
    assert "broken.jpg: not a readable image" in r.stdout and "could not be read" in r.stderr
    f = FeatureFolder.open(tmp_path / "out")
    ids = [Path(e["id"]).name for e in f.manifest["inputs"]]
    assert ids == ["img00.png", "img01.png", "gray.png", "rgba.png", "z_palette.png"]
    assert [Path(e["id"]).name for e in f.manifest["failed"]] == ["broken.jpg"]
    rows = f.rows("relu")
    for k, img in enumerate([Image.open(folder / "a" / "img00.png"), gray, rgba, pal]):
        torch.testing.assert_close(rows[[0, 2, 3, 4][k]], _expected(net, img, 24, 20), atol=1e-5, rtol=1e-5)


def test_collect_inputs_order_exclusion_and_explicit_files(tmp_path):
    from torchinspect.features.inputs import collect_inputs

    root = tmp_path / "in"
    for rel in ("b.jpg", "a/z.png", "a/b/c.jpg", "a2.jpg", "out/x.jpg", "out2/y.jpg",
                ".hidden/h.jpg", ".dot.jpg", "t.pt"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(b"x")
    (root / "readme.txt").write_text("ignored")
    torch.save(torch.zeros(3, 4, 4), root / "t.pt")
    # the output folder inside an input folder is skipped; its sibling "out2" is not
    items, ignored = collect_inputs([str(root), str(root / "b.jpg"), str(root / "out" / "x.jpg")],
                                    sample_rank=3, exclude=root / "out")
    rel = [os.path.relpath(it.path, root) for it in items]
    assert rel == ["a/b/c.jpg", "a/z.png", "a2.jpg", "b.jpg", "out2/y.jpg", "t.pt"]
    assert [it.kind for it in items] == ["image"] * 5 + ["tensor"]
    assert sorted(os.path.basename(f) for f in ignored) == [".dot.jpg", "readme.txt"]  # .hidden/ is not walked
    assert items[0].id == (root / "a" / "b" / "c.jpg").as_posix()
    # the output folder given as an input is not read at all
    assert collect_inputs([str(root / "out")], exclude=root / "out") == ([], [])


def test_published_transforms_match_torchvision(tmp_path):
    img = Image.fromarray(np.random.default_rng(2).integers(0, 255, (375, 500, 3), dtype=np.uint8))
    prep = make_preprocess("resnet18", None)
    assert (prep.resize, prep.crop) == (256, (224, 224)) and "published" in prep.source
    x = torch.from_numpy(np.asarray(img).copy()).permute(2, 0, 1)
    ours = prep.normalize(prep.geometry(x).unsqueeze(0))[0]
    ref = torchvision.models.ResNet18_Weights.IMAGENET1K_V1.transforms()(x)
    torch.testing.assert_close(ours, ref, atol=1e-5, rtol=0)


# ------------------------------------------------------------------ storage, manifest, resume


def test_safetensors_round_trip_and_manifest(tmp_path):
    net = _tiny()
    x = torch.randn(5, 3, 8, 8)
    torch.save(x, tmp_path / "x.pt")
    r = extract_features(net, [str(tmp_path / "x.pt")], layers=["conv", "fc"], output=tmp_path / "o",
                         example=torch.zeros(1, 3, 8, 8), batch_size=2, save_dtype="bf16",
                         shard_size=600, workers=0)
    man = json.loads((tmp_path / "o" / "manifest.json").read_text())
    assert man["status"] == "complete" and man["rows"] == 5 and man["save_dtype"] == "bf16"
    assert man["layers"] == ["conv", "fc"] and man["tensors"]["conv"] == {"shape": [8, 8, 8], "dtype": "bfloat16"}
    assert [e["row"] for e in man["inputs"]] == list(range(5))
    assert man["versions"]["torch"] == torch.__version__ and man["runs"][0]["rows"] == 5
    assert len(man["shards"]) == 3  # 2 rows of conv in bf16 = 2 KB > 600 B: one shard per batch
    with torch.no_grad():
        want = {"conv": net.conv(x), "fc": net(x)}
    got = {k: torch.cat([load_file(str(tmp_path / "o" / s["file"]))[k] for s in man["shards"]])
           for k in want}
    for k in want:
        assert got[k].dtype == torch.bfloat16
        assert torch.equal(got[k], want[k].to(torch.bfloat16))  # bf16 kept exact
    assert r.rows == 5 and r.new_rows == 5 and not (tmp_path / "o" / ".parts").exists()


def test_resume_after_interrupt_gives_identical_rows(tmp_path):
    folder = tmp_path / "imgs"
    _images(folder, n=9)
    net = _tiny()
    kw = dict(layers=["relu", "fc"], resize=24, crop=20, batch_size=2, workers=0)
    full = extract_features(net, [str(folder)], output=tmp_path / "full", **kw)

    calls = []

    def stop_after_two(p):
        calls.append(p.rows)
        if len(calls) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        extract_features(net, [str(folder)], output=tmp_path / "part", progress=stop_after_two, **kw)
    man = json.loads((tmp_path / "part" / "manifest.json").read_text())
    assert man["status"] == "incomplete" and man["rows"] == 4
    again = extract_features(net, [str(folder)], output=tmp_path / "part", **kw)
    assert (again.skipped, again.new_rows, again.rows) == (4, 5, 9)
    a, b = FeatureFolder.open(full.output), FeatureFolder.open(again.output)
    assert [e["id"] for e in a.manifest["inputs"]] == [e["id"] for e in b.manifest["inputs"]]
    for k in ("relu", "fc"):
        torch.testing.assert_close(a.rows(k), b.rows(k), atol=1e-6, rtol=1e-6)
    with pytest.raises(InspectError, match="other settings"):
        extract_features(net, [str(folder)], output=tmp_path / "part", **{**kw, "layers": ["conv"]})


KILL_SCRIPT = """
import os, sys, torch
kill = os._exit  # the real one: torchinspect contains a model's os._exit, not this test's
sys.path[:0] = [{src!r}, {root!r}, {tests!r}]
from features_tiny import Tiny
from torchinspect.features import extract_features
torch.manual_seed(0)
net = Tiny()
n = []
def die(p):
    n.append(1)
    if len(n) == 3:
        kill(9)   # killed: no flush, no cleanup
extract_features(net, [{folder!r}], output={out!r}, layers=["relu"], resize=24, crop=20,
                 batch_size=2, workers=0, progress=die)
"""


@pytest.mark.slow
def test_killed_run_loses_at_most_the_batch_in_flight(tmp_path):
    folder = tmp_path / "imgs"
    _images(folder, n=9)
    script = KILL_SCRIPT.format(src=str(ROOT / "src"), root=str(ROOT), tests=str(ROOT / "tests"),
                                folder=str(folder),
                                out=str(tmp_path / "o"))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 9, proc.stderr
    parts = sorted(p.name for p in (tmp_path / "o" / ".parts").iterdir())
    assert len(parts) == 3  # every finished batch is on disk

    torch.manual_seed(0)
    net = Tiny()
    again = extract_features(net, [str(folder)], output=tmp_path / "o", layers=["relu"], resize=24,
                             crop=20, batch_size=2, workers=0)
    assert (again.skipped, again.new_rows, again.rows) == (6, 3, 9)
    full = extract_features(net, [str(folder)], output=tmp_path / "full", layers=["relu"], resize=24,
                            crop=20, batch_size=2, workers=0)
    torch.testing.assert_close(FeatureFolder.open(tmp_path / "o").rows("relu"),
                               FeatureFolder.open(full.output).rows("relu"), atol=1e-6, rtol=1e-6)


# ------------------------------------------------------------------ torchrun


def _one_and_two_ranks(args: list[str], tmp_path: Path, **env_extra: str) -> tuple[FeatureFolder, FeatureFolder]:
    """The CLI ``args`` (``-m torchinspect features ...``) in one process, then under torchrun
    with 2 processes; their output folders."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}", **env_extra}
    one = subprocess.run([sys.executable, *args, "-o", str(tmp_path / "one")], env=env,
                         capture_output=True, text=True, timeout=300)
    assert one.returncode == 0, one.stderr
    two = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                          "--nproc-per-node", "2", *args, "-o", str(tmp_path / "two")], env=env,
                         capture_output=True, text=True, timeout=300)
    assert two.returncode == 0, two.stderr
    return FeatureFolder.open(tmp_path / "one"), FeatureFolder.open(tmp_path / "two")


@pytest.mark.slow
def test_two_gloo_ranks_match_one_process(tmp_path):
    folder = tmp_path / "imgs"
    _images(folder / "x", n=5)
    _images(folder / "y", n=4)
    torch.manual_seed(0)
    torch.save(Tiny().state_dict(), tmp_path / "w.pt")
    spec = f"{ROOT / 'tests' / 'features_tiny.py'}:Tiny"
    args = ["-m", "torchinspect", "features", spec, "--weights", str(tmp_path / "w.pt"), str(folder),
            "-l", "relu,fc", "--resize", "24", "--crop", "20", "--batch", "2", "--workers", "0"]
    a, b = _one_and_two_ranks(args, tmp_path, OMP_NUM_THREADS="1")
    assert b.manifest["runs"][0]["world_size"] == 2 and b.manifest["runs"][0]["rows"] == 9
    assert {s["file"].split("-")[2] for s in b.manifest["shards"]} == {"r000", "r001"}
    assert [e["id"] for e in a.manifest["inputs"]] == [e["id"] for e in b.manifest["inputs"]]
    for k in ("relu", "fc"):
        torch.testing.assert_close(a.rows(k), b.rows(k), atol=1e-6, rtol=1e-6)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                    reason="needs 2 CUDA GPUs (run on the two-GPU machine)")
def test_cuda_two_gpu_ranks_match_one_gpu(tmp_path):
    folder = tmp_path / "imgs"
    _photo_jpegs(folder / "x", [(90, 70)] * 5)
    _photo_jpegs(folder / "y", [(70, 90)] * 4)
    _images(folder / "z", n=2)  # PNGs: the CPU decoder inside the GPU path
    torch.manual_seed(0)
    torch.save(Tiny().state_dict(), tmp_path / "w.pt")
    spec = f"{ROOT / 'tests' / 'features_tiny.py'}:Tiny"
    args = ["-m", "torchinspect", "features", spec, "--weights", str(tmp_path / "w.pt"), str(folder),
            "-l", "relu,fc", "--resize", "40", "--crop", "32", "--batch", "2", "--workers", "1",
            "--device", "cuda", "--no-progress"]
    a, b = _one_and_two_ranks(args, tmp_path)
    run = b.manifest["runs"][0]
    assert run["world_size"] == 2 and run["device"] == "cuda" and run["rows"] == 11
    assert {s["file"].split("-")[2] for s in b.manifest["shards"]} == {"r000", "r001"}
    assert [e["id"] for e in a.manifest["inputs"]] == [e["id"] for e in b.manifest["inputs"]]
    for k in ("relu", "fc"):  # two GPUs may pick other cuDNN (TF32) algorithms: close, not equal
        torch.testing.assert_close(a.rows(k), b.rows(k), atol=2e-3, rtol=2e-3)


@pytest.mark.cuda
def test_cuda_gpu_decode_matches_cpu_decode_with_png_fallback(tmp_path):
    folder = tmp_path / "imgs"
    folder.mkdir()
    rng = np.random.default_rng(3)
    for i in range(5):
        Image.fromarray(rng.integers(0, 255, (60, 80, 3), dtype=np.uint8)).save(folder / f"{i}.jpg")
    _images(folder, n=2)  # PNGs: decoded on the CPU even when JPEGs go to nvjpeg
    (folder / "z_broken.jpg").write_bytes(b"\xff\xd8\xff\xe0" + b"x" * 64)
    net = _tiny()
    kw = dict(layers=["relu", "fc"], resize=40, crop=32, batch_size=4, device="cuda", workers=2)
    gpu = extract_features(net, [str(folder)], output=tmp_path / "gpu", **kw)
    cpu = extract_features(net, [str(folder)], output=tmp_path / "cpu", gpu_decode=False, **kw)
    a, b = FeatureFolder.open(gpu.output), FeatureFolder.open(cpu.output)
    assert gpu.rows == cpu.rows == 7 and [f["id"] for f in gpu.failed] == [str(folder / "z_broken.jpg")]
    assert [e["id"] for e in a.manifest["inputs"]] == [e["id"] for e in b.manifest["inputs"]]
    torch.testing.assert_close(a.rows("fc"), b.rows("fc"), atol=0.05, rtol=0.05)  # nvjpeg vs libjpeg


def _photo_jpegs(folder: Path, sizes: list[tuple[int, int]]) -> list[Path]:
    """Smooth gradients + mild noise, quality 90 (like photos): (width, height) each."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(5)
    out = []
    for i, (w, h) in enumerate(sizes):
        yy, xx = np.mgrid[0:h, 0:w]
        base = np.stack([(xx * (0.3 + 0.1 * c) + yy * (0.2 + 0.1 * i) + 40 * c) % 256 for c in range(3)], -1)
        img = np.clip(base + rng.normal(0, 6, (h, w, 3)), 0, 255).astype(np.uint8)
        p = folder / f"p{i:02d}.jpg"
        Image.fromarray(img).save(p, quality=90)
        out.append(p)
    return out


@pytest.mark.cuda
def test_cuda_batched_preprocessing_matches_the_cpu_path(tmp_path):
    """nvjpeg + one batched resize/crop/normalize per image size == libjpeg + the CPU
    path's per-image transforms (resnet50's published transforms), within JPEG IDCT noise."""
    from torchinspect.features.gpu import GpuImages
    from torchinspect.features.inputs import decode_cpu

    files = _photo_jpegs(tmp_path, [(500, 375), (375, 500), (500, 375), (320, 240), (500, 375)])
    prep = make_preprocess("resnet50", None)
    assert (prep.resize, prep.crop) == (256, (224, 224))
    datas = [torch.frombuffer(bytearray(p.read_bytes()), dtype=torch.uint8) for p in files]
    gpu = GpuImages(prep, "cuda")
    errors: list = []
    imgs = gpu.decode(datas, [str(p) for p in files], errors)
    assert errors == [] and all(im.is_cuda for im in imgs)
    cpu_decoded = [decode_cpu(p.read_bytes(), str(p)) for p in files]
    ref = prep.normalize(torch.stack([prep.geometry(im) for im in cpu_decoded]))
    level = 1 / 255 / min(prep.std)  # one uint8 level, normalized
    # the preprocessing alone (same pixels in): batched per size on the GPU == the CPU path
    rows = gpu.preprocess([im.cuda() for im in cpu_decoded])  # 3 sizes, rows in input order
    pre = torch.stack(list(rows)).cpu()
    assert pre.shape == ref.shape == (5, 3, 224, 224)
    assert (pre - ref).abs().max() <= 2.01 * level  # uint8 rounding of the resize only
    assert (pre - ref).abs().mean() < 0.1 * level
    # nvjpeg vs libjpeg decoding: equal almost everywhere (IDCT/upsampling at a few pixels)
    got = torch.stack(list(gpu.preprocess(imgs))).cpu()
    diff = (got - ref).abs()
    assert diff.mean() < level and (diff > 4 * level).float().mean() < 0.02
    # one size: a single (N, C, H, W) tensor, equal to per-image GPU transforms + normalize
    same = [imgs[0], imgs[2], imgs[4]]
    batch = gpu.preprocess(same)
    assert isinstance(batch, torch.Tensor) and batch.shape == (3, 3, 224, 224)
    per_image = prep.normalize(torch.stack([prep.geometry(im) for im in same]))
    torch.testing.assert_close(batch, per_image, atol=1e-5, rtol=1e-5)


@pytest.mark.cuda
def test_cuda_mixed_sizes_end_to_end_and_callers_module_untouched(tmp_path):
    folder = tmp_path / "imgs"
    _photo_jpegs(folder, [(90, 70), (70, 90), (90, 70), (64, 64), (90, 70)])
    _images(folder, n=1)  # one PNG in the same batch
    net = _tiny()
    kw = dict(layers=["relu", "fc"], resize=40, crop=32, batch_size=8, device="cuda", workers=1)
    gpu = extract_features(net, [str(folder)], output=tmp_path / "gpu", dtype="fp16", **kw)
    cpu = extract_features(net, [str(folder)], output=tmp_path / "cpu", gpu_decode=False, dtype="fp16", **kw)
    a, b = FeatureFolder.open(gpu.output), FeatureFolder.open(cpu.output)
    assert gpu.rows == cpu.rows == 6 and not gpu.failed
    assert [e["id"] for e in a.manifest["inputs"]] == [e["id"] for e in b.manifest["inputs"]]
    torch.testing.assert_close(a.rows("relu").float(), b.rows("relu").float(), atol=0.05, rtol=0.05)
    assert gpu.startup_seconds is not None and gpu.loop_seconds is not None
    assert gpu.warmup_seconds is not None  # the copy is ours: warmed up on zeros while decoding
    assert a.manifest["runs"][-1]["loop_seconds"] == pytest.approx(gpu.loop_seconds, abs=1e-3)
    # the caller's module was copied to the GPU (and made channels-last there), not changed
    assert net.conv.weight.device.type == "cpu" and net.conv.weight.is_contiguous()


# ------------------------------------------------------------------ safety (issue 20)

TINY = f"{ROOT / 'tests' / 'features_tiny.py'}:Tiny"
HOLD_LOCK = """
import sys, time
sys.path[:0] = [{src!r}]
from pathlib import Path
from torchinspect.features.resume import FolderLock
with FolderLock(Path({out!r})):
    print("locked", flush=True)
    time.sleep(60)
"""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}


@contextlib.contextmanager
def _lock_holder(out: Path):
    """Another process holding OUT's lock for the block; killed (-9) after it."""
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK.format(src=str(ROOT / "src"), out=str(out))],
                              stdout=subprocess.PIPE, text=True, env=_env())
    try:
        assert holder.stdout.readline().strip() == "locked"
        yield holder
    finally:
        holder.kill()  # kill -9: the kernel drops the lock with the process
        holder.wait()
        holder.stdout.close()


@pytest.mark.slow
def test_second_writer_is_refused_with_the_holder_and_a_dead_holder_frees_the_folder(invoke, tmp_path):
    _images(tmp_path / "imgs", n=3)
    out = tmp_path / "o"
    out.mkdir()
    with _lock_holder(out) as holder:
        r = invoke("features", TINY, tmp_path / "imgs", "-l", "relu", "-o", out, "--workers", "0")
        assert r.exit_code == 2, r.output
        import socket

        assert f"pid {holder.pid} on {socket.gethostname()}, started " in r.stderr
        assert not (out / "manifest.json").exists()  # refused before anything was written
    r = invoke("features", TINY, tmp_path / "imgs", "-l", "relu", "-o", out, "--workers", "0")
    assert r.exit_code == 0, r.output
    assert FeatureFolder.open(out).manifest["rows"] == 3


def test_two_concurrent_runs_one_folder_never_corrupt_it(tmp_path):
    """Two processes at once: one writes, the other is refused (exit 2); the folder holds
    each input once."""
    _images(tmp_path / "imgs", n=8)
    cmd = [sys.executable, "-m", "torchinspect", "features", TINY, str(tmp_path / "imgs"), "-l", "relu",
           "-o", str(tmp_path / "o"), "--batch", "1", "--workers", "0", "--no-progress"]
    procs = [subprocess.Popen(cmd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    errs = [p.communicate(timeout=120)[1] for p in procs]
    results = [(p.returncode, err) for p, err in zip(procs, errs, strict=True)]
    codes = sorted(code for code, _ in results)
    assert codes in ([0, 0], [0, 2]), results  # the second may start after the first ended
    if codes == [0, 2]:
        assert "being written by another `inspect features` run" in next(e for c, e in results if c == 2)
    m = FeatureFolder.open(tmp_path / "o").manifest
    ids = [e["id"] for e in m["inputs"]]
    assert m["rows"] == len(ids) == len(set(ids)) == 8
    assert sum(len(s["ids"]) for s in m["shards"]) == 8


def test_resume_refuses_other_weights_and_random_init_is_seeded(invoke, tmp_path):
    _images(tmp_path / "imgs", n=4)
    torch.save(_tiny(1).state_dict(), tmp_path / "w1.pt")
    torch.save(_tiny(2).state_dict(), tmp_path / "w2.pt")
    base = [TINY, tmp_path / "imgs", "-l", "relu", "--workers", "0", "--resize", "24", "--crop", "20"]
    r = invoke("features", *base, "--weights", tmp_path / "w1.pt", "-o", tmp_path / "a")
    assert r.exit_code == 0, r.output
    import hashlib

    man = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert man["weights"] == {"source": str(tmp_path / "w1.pt"),
                              "sha256": hashlib.sha256((tmp_path / "w1.pt").read_bytes()).hexdigest()}
    r = invoke("features", *base, "--weights", tmp_path / "w2.pt", "-o", tmp_path / "a")
    assert r.exit_code == 2
    assert "other settings (weights)" in r.stderr and "w1.pt" in r.stderr and "--restart" in r.stderr
    # random init: a fixed, recorded seed, so two builds in one process are the same model
    torch.manual_seed(123)  # the caller's RNG state does not matter
    r1 = invoke("features", *base, "-o", tmp_path / "r1", "--format", "json")
    torch.manual_seed(456)
    r2 = invoke("features", *base, "-o", tmp_path / "r2")
    assert r1.exit_code == r2.exit_code == 0, r1.output + r2.output
    w = json.loads((tmp_path / "r1" / "manifest.json").read_text())["weights"]
    assert w["source"] == "random-init" and w["seed"] == 0 and len(w["sha256"]) == 64
    assert json.loads(r1.stdout)["weights"] == w
    assert torch.equal(FeatureFolder.open(tmp_path / "r1").rows("relu"), FeatureFolder.open(tmp_path / "r2").rows("relu"))
    r = invoke("features", *base, "-o", tmp_path / "r1", "--weights", tmp_path / "w1.pt")
    assert r.exit_code == 2 and "random init (seed 0" in r.stderr


DIE_IN_SHARD = """
import os, sys
kill = os._exit  # the real one: torchinspect contains a model's os._exit, not this test's
sys.path[:0] = [{src!r}, {tests!r}]
import torch
from features_tiny import Tiny
from torchinspect.features import extract_features, store
real = store.write_shard
def die(*a, **k):
    kill(9)  # killed after the last part, before its shard and progress
store.write_shard = die
torch.manual_seed(0)
extract_features(Tiny(), [{folder!r}], output={out!r}, layers=["relu"], resize=24, crop=20,
                 batch_size=2, workers=0)
"""


def test_kill_before_the_shard_recovers_a_readable_folder(invoke, tmp_path):
    _images(tmp_path / "imgs", n=4)
    script = DIE_IN_SHARD.format(src=str(ROOT / "src"), tests=str(ROOT / "tests"),
                                 folder=str(tmp_path / "imgs"), out=str(tmp_path / "o"))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 9, proc.stderr
    parts = tmp_path / "o" / ".parts"
    assert len(list(parts.glob("part-*.safetensors"))) == 2  # both batches, no shard
    (parts / ".part-000-r000-000009.safetensors.k3j4h5g6.tmp").mkdir()  # a write cut short
    (parts / ".part-000-r000-000009.safetensors.k3j4h5g6.tmp" / "x").write_bytes(b"0" * 1000)
    net = _tiny()
    torch.save(net.state_dict(), tmp_path / "w.pt")
    r = extract_features(net, [str(tmp_path / "imgs")], output=tmp_path / "o", layers=["relu"],
                         resize=24, crop=20, batch_size=2, workers=0)
    assert (r.new_rows, r.skipped, r.rows, r.status) == (0, 4, 4, 0)
    assert not parts.exists()  # parts and the temp folder are gone
    full = extract_features(net, [str(tmp_path / "imgs")], output=tmp_path / "full", layers=["relu"],
                            resize=24, crop=20, batch_size=2, workers=0)
    torch.testing.assert_close(FeatureFolder.open(tmp_path / "o").rows("relu"),
                               FeatureFolder.open(full.output).rows("relu"))


def test_devices_fifos_and_huge_files_are_never_read(invoke, tmp_path):
    imgs = tmp_path / "imgs"
    _images(imgs, n=2)
    os.mkfifo(imgs / "pipe.jpg")
    (imgs / "zero.png").symlink_to("/dev/zero")
    big = imgs / "z_big.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (200, 200, 3), dtype=np.uint8)).save(big)
    import signal

    signal.alarm(60)  # the old code blocks on the FIFO forever
    try:
        r = invoke("features", TINY, imgs, "-l", "relu", "-o", tmp_path / "o", "--workers", "0",
                   "--max-image-size", "20KB", "--skip-unreadable")
    finally:
        signal.alarm(0)
    assert r.exit_code == 0, r.output
    text = " ".join(r.stdout.split())
    assert "pipe.jpg (not a regular file (a FIFO))" in text
    assert "zero.png (not a regular file (a device))" in text
    assert "z_big.png:" in text and "over the 20,000-byte limit" in text
    assert FeatureFolder.open(tmp_path / "o").manifest["rows"] == 2
    for bad, kind in ((imgs / "pipe.jpg", "a FIFO"), ("/dev/zero", "a device")):
        r = invoke("features", TINY, bad, "-l", "relu", "-o", tmp_path / "p")
        assert r.exit_code == 2 and f"not a regular file ({kind})" in r.stderr, r.output


def test_foreign_manifest_is_kept_and_files_follow_the_umask(invoke, tmp_path):
    _images(tmp_path / "imgs", n=2)
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "manifest.json").write_text("[1, 2, 3]")
    for extra in ([], ["--restart"]):
        r = invoke("features", TINY, tmp_path / "imgs", "-l", "relu", "-o", tmp_path / "o", *extra)
        assert r.exit_code == 2 and "not a torchinspect features manifest" in r.stderr
    assert (tmp_path / "o" / "manifest.json").read_text() == "[1, 2, 3]"
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == ["manifest.json"]  # no lock file left
    with pytest.raises(InspectError, match="not a torchinspect features manifest"):
        FeatureFolder.open(tmp_path / "o")
    old = os.umask(0o027)
    try:
        r = invoke("features", TINY, tmp_path / "imgs", "-l", "relu", "-o", tmp_path / "n",
                   "--save-format", "npy")
    finally:
        os.umask(old)
    assert r.exit_code == 0, r.output
    modes = {p.name: p.stat().st_mode & 0o777 for p in (tmp_path / "n").iterdir() if not p.name.startswith(".")}
    assert len(modes) == 2 and set(modes.values()) == {0o640}, modes


def test_full_disk_is_one_line_exit_2_and_the_folder_resumes(invoke, tmp_path, monkeypatch):
    import errno

    from torchinspect.features import store

    _images(tmp_path / "imgs", n=5)
    real = store.write_tensors

    def full(path, *a, **k):  # the disk fills up when the first shard is written
        if Path(path).name.startswith("features-"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(path, *a, **k)

    monkeypatch.setattr(store, "write_tensors", full)
    args = ["features", TINY, tmp_path / "imgs", "-l", "relu", "-o", tmp_path / "o", "--workers", "0",
            "--batch", "2", "--resize", "24", "--crop", "20"]
    r = invoke(*args)
    assert r.exit_code == 2, r.output
    assert "features-000-r000-00000.safetensors: cannot write (No space left on device)" in r.stderr
    assert "Traceback" not in r.output and "IndexError" not in r.output
    monkeypatch.setattr(store, "write_tensors", real)
    r = invoke(*args)
    assert r.exit_code == 0, r.output
    f = FeatureFolder.open(tmp_path / "o")
    assert f.manifest["rows"] == 5 and f.rows("relu").shape[0] == 5


def test_stale_temps_are_removed_and_restart_replaces_a_corrupt_manifest(invoke, tmp_path):
    _images(tmp_path / "imgs", n=2)
    args = ["features", TINY, tmp_path / "imgs", "-l", "relu", "-o", tmp_path / "o", "--workers", "0"]
    assert invoke(*args).exit_code == 0
    stale = tmp_path / "o" / ".features-001-r000-00000.safetensors.a1b2c3d4.tmp"
    stale.mkdir()
    (stale / "features-001-r000-00000.safetensors").write_bytes(b"0" * 4096)
    (tmp_path / "o" / ".manifest.json.zz99yy88.tmp").mkdir()
    (tmp_path / "o" / ".mine.tmp").write_text("not ours")  # another tool's name: kept
    (tmp_path / "o" / "manifest.json").write_text('{"format": "torchinspect-features", "rows"')
    r = invoke(*args)
    assert r.exit_code == 2 and "unreadable" in r.stderr and "--restart" in r.stderr
    r = invoke(*args, "--restart")
    assert r.exit_code == 0, r.output
    names = sorted(p.name for p in (tmp_path / "o").iterdir())
    assert ".mine.tmp" in names and not any(n.endswith(".tmp") and n != ".mine.tmp" for n in names)
    assert FeatureFolder.open(tmp_path / "o").manifest["rows"] == 2


# ------------------------------------------------------------------ vocabulary (issue 24)


def test_format_is_the_report_and_old_spellings_still_work(invoke, tmp_path):
    _images(tmp_path / "imgs", n=3)
    base = ["features", TINY, tmp_path / "imgs", "-l", "relu", "--workers", "0"]
    r = invoke(*base, "-o", tmp_path / "a", "--format", "json", "--save-format", "pt", "--batch", "2")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["file_format"] == "pt" and data["runs" if "runs" in data else "rows"] == 3
    assert json.loads((tmp_path / "a" / "manifest.json").read_text())["runs"][0]["batch"] == 2
    r = invoke(*base, "-o", tmp_path / "b", "--format", "npy", "--report", "json", "--batch-size", "2")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["file_format"] == "npy"
    for note in ("--format npy (the shard file type) is deprecated; use --save-format npy",
                 "--report is deprecated; use --format", "--batch-size is deprecated; use --batch"):
        assert note in r.stderr
    r = invoke(*base, "-o", tmp_path / "b", "--force")
    assert r.exit_code == 2 and "--restart" in r.stderr
    assert FeatureFolder.open(tmp_path / "b").manifest["rows"] == 3  # nothing deleted
    r = invoke(*base, "-o", tmp_path / "c", "--device", "meta")
    assert r.exit_code == 2 and "--device meta" in r.stderr and not (tmp_path / "c").exists()
    r = invoke(*base, "-o", tmp_path / "c", "--format", "yaml")
    assert r.exit_code == 2 and "--save-format" in r.stderr


def test_noop_resume_exits_0_with_honest_numbers_and_skip_unreadable(invoke, tmp_path):
    imgs = tmp_path / "imgs"
    _images(imgs, n=3)
    (imgs / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0" + b"not a jpeg" * 20)
    (imgs / "notes.txt").write_text("x")
    args = ["features", TINY, imgs, "-l", "relu", "-o", tmp_path / "o", "--workers", "0"]
    r = invoke(*args)
    assert r.exit_code == 1 and "--skip-unreadable" in r.stderr
    assert f"1 file(s) in the input folders are not inputs (ignored): {imgs / 'notes.txt'}" in r.stdout
    r = invoke(*args, "--format", "json")  # the unreadable file is tried again, still unreadable
    assert r.exit_code == 1
    data = json.loads(r.stdout)
    assert (data["rows"], data["new_rows"], data["skipped"], data["new_failed"]) == (3, 0, 3, 1)
    assert data["rows_per_s"] is None
    r = invoke(*args, "--skip-unreadable")
    assert r.exit_code == 0, r.output
    assert "Skipped (--skip-unreadable) (1)" in r.stdout and "- (nothing added)" in r.stdout
    assert FeatureFolder.open(tmp_path / "o").manifest["runs"][-1]["skip_unreadable"] is True
    Image.fromarray(np.zeros((30, 40, 3), dtype=np.uint8)).save(imgs / "broken.jpg", format="JPEG")
    r = invoke(*args)  # fixed: read on the next try, and no longer listed as unreadable
    assert r.exit_code == 0, r.output
    assert "Rows/s" in r.stdout and "Added by this run" in r.stdout
    import torchinspect

    f = torchinspect.FeatureFolder.open(tmp_path / "o")
    assert [Path(i).name for i in f.ids()] == ["broken.jpg", "img00.png", "img01.png", "img02.png"]
    assert f.manifest["failed"] == [] and len(f.rows("relu")) == len(f.ids())


# ------------------------------------------------------------------ random weights said (issue 21)


def test_random_init_is_said_and_transforms_do_not_claim_weights(invoke, tmp_path):
    torch.save(torch.rand(2, 3, 64, 64), tmp_path / "x.pt")
    _images(tmp_path / "imgs", n=1)
    r = invoke("features", "resnet18", tmp_path / "imgs", "-l", "layer1", "--pool", "gap",
               "-o", tmp_path / "o", "--workers", "0")
    assert r.exit_code == 0, r.output
    text = " ".join(r.stdout.split())
    assert re.search(r"Weights random init \(seed 0, sha256 [0-9a-f]{12}\): no weights loaded", text)
    assert "(transforms of resnet18's published weights)" in text and "(published weights of" not in text
    r = invoke("features", "resnet18", tmp_path / "imgs", "-l", "layer1", "--pool", "gap",
               "-o", tmp_path / "o", "--format", "json")
    data = json.loads(r.stdout)
    assert any("random init" in n for n in data["notes"]) and data["weights"]["source"] == "random-init"


def test_a_default_batch_too_big_for_memory_runs_in_smaller_forwards(tmp_path, monkeypatch):
    from torchinspect.features import batch_fit as memory

    _images(tmp_path / "imgs", n=5)
    net = _tiny()
    kw = dict(layers=["relu"], resize=24, crop=20, workers=0)
    full = extract_features(net, [str(tmp_path / "imgs")], output=tmp_path / "a", **kw)
    assert not any("--batch" in n for n in full.notes)  # plenty of memory here
    forwards = []
    net.conv.register_forward_hook(lambda m, a, o: forwards.append(len(a[0])))
    # conv input 3x20x20 + output 8x20x20 (fp32) is the largest leaf: 17,600 B a row
    per_row = 4 * (3 * 20 * 20 + 8 * 20 * 20) + 4 * 8 * 20 * 20 + 4 * 3 * 20 * 20
    monkeypatch.setattr(memory.devices, "available_bytes", lambda dev: 4 * per_row)  # 2 rows fit
    small = extract_features(net, [str(tmp_path / "imgs")], output=tmp_path / "b", **kw)
    assert forwards == [1, 2, 2, 1]  # the measuring row, then forwards of 2 rows for the batch of 5
    note = next(n for n in small.notes if "--batch 64" in n)
    assert f"({per_row / 1000:.2f} KB per row)" in note and "forwards of 2 rows" in note
    torch.testing.assert_close(FeatureFolder.open(small.output).rows("relu"),
                               FeatureFolder.open(full.output).rows("relu"))
    forwards.clear()
    given = extract_features(net, [str(tmp_path / "imgs")], output=tmp_path / "c", batch_size=5, **kw)
    assert forwards == [1, 5] and any("kept as given (--batch 2 would fit)" in n for n in given.notes)


@pytest.mark.slow
def test_torchrun_ranks_stop_together_when_the_folder_is_locked(tmp_path):
    """Rank 0 takes the lock for every rank; when it cannot, rank 1 does not wait forever at
    a barrier: both stop with the holder's message."""
    _images(tmp_path / "imgs", n=4)
    out = tmp_path / "o"
    out.mkdir()
    with _lock_holder(out) as holder:
        two = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                              "--nproc-per-node", "2", "-m", "torchinspect", "features", TINY,
                              str(tmp_path / "imgs"), "-l", "relu", "-o", str(out), "--workers", "0",
                              "--no-progress"], env={**_env(), "OMP_NUM_THREADS": "1"},
                             capture_output=True, text=True, timeout=240)
    assert two.returncode != 0
    assert f"being written by another `inspect features` run (pid {holder.pid}" in two.stderr
    assert "rank 0 stopped: " in two.stderr  # rank 1's own message
    assert not (out / "manifest.json").exists()
