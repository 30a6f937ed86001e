"""Inputs of ``inspect features``: the sorted input list, preprocessing, decoding.

* :func:`collect_inputs` turns INPUTS (image files, folders searched recursively in sorted
  order, ``.pt``/``.npy``/``.safetensors`` tensor files) into one ordered list of
  :class:`InputItem` — a row each. A tensor file with one more dimension than a sample
  gives one row per entry (``file.pt#3``).
* :class:`Preprocess` is what an image goes through: resize of the shorter side, center
  crop, scaling to [0, 1] and mean/std normalization — by default the model's published
  weights' transforms (torchvision's ``weights.transforms()``, read offline).
* :class:`RowDataset` reads one item in a DataLoader worker: CPU-decoded, resized and
  cropped uint8 images, raw JPEG bytes for GPU decoding, or tensor rows. A file that cannot
  be read becomes an error entry (reported, never a crash, never a partial row).
"""

from __future__ import annotations

import os
import stat
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from torchinspect.errors import InspectError, first_line
from torchinspect.io.formats import FORMATS, CheckpointFormat, detect_format
from torchinspect.io.safetensors import read_safetensors_header
from torchinspect.io.torch_load import torch_load

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm",
                  ".pgm", ".pbm", ".jfif")
# tensor files: torch.save and safetensors files as the format registry names them, and .npy
TENSOR_SUFFIXES = (*FORMATS[CheckpointFormat.torch_zip].suffixes,
                   *FORMATS[CheckpointFormat.safetensors].suffixes, ".npy")
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


@dataclass(frozen=True)
class InputItem:
    """One row: ``id`` is unique and stable across runs (used to resume)."""

    id: str
    path: str | None
    kind: str  # "image", "tensor", "random"
    key: str | None = None  # safetensors tensor name
    index: int | None = None  # entry of a batched tensor file


def _is_under(path: Path, folder: str | None) -> bool:
    """``path`` (resolved) is ``folder`` (already resolved) or inside it."""
    if folder is None:
        return False
    real = os.path.realpath(path)
    return real == folder or real.startswith(folder.rstrip(os.sep) + os.sep)


def not_regular(path: str | os.PathLike[str], mode: int | None = None) -> str | None:
    """Why ``path`` is not a regular file (``"not a regular file (a FIFO)"``), or None.
    Devices, FIFOs and sockets are never read: /dev/zero never ends, a FIFO blocks."""
    if mode is None:
        mode = os.stat(path).st_mode
    if stat.S_ISREG(mode):
        return None
    kind = ("a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "a device")
    return f"not a regular file ({kind})"


def read_file(path: str, max_bytes: int) -> bytes:
    """The bytes of a regular file of at most ``max_bytes``. Opened without blocking (a
    FIFO named ``*.jpg`` does not hang), checked on the open descriptor (no race with a
    rename), read no further than its size allows."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        st = os.fstat(fd)
        why = not_regular(path, st.st_mode)
        if why:
            raise ValueError(why)
        if st.st_size > max_bytes:
            raise ValueError(f"{st.st_size:,} bytes, over the {max_bytes:,}-byte limit for one "
                             "image file (--max-image-size)")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(max_bytes + 1)
        if len(data) > max_bytes:
            raise ValueError(f"grew over the limit of {max_bytes:,} bytes while read")
        return data
    finally:
        os.close(fd)


def collect_inputs(paths: list[str], *, sample_rank: int | None = None,
                   exclude: str | os.PathLike[str] | None = None) -> tuple[list[InputItem], list[str]]:
    """The ordered rows of ``paths``; returns (items, files of the folders that are not
    inputs: other suffixes, hidden files, devices/FIFOs/sockets).

    Folders are walked recursively; their image and tensor files are taken in sorted order
    of their relative path. ``exclude`` (the output folder) is never read. Cheap per file
    (string work and one ``stat`` per file: ~10 us per file). An input named on
    the command line that is not a regular file is an error.
    """
    excl = os.path.realpath(exclude) if exclude is not None else None
    suffixes = frozenset(IMAGE_SUFFIXES + TENSOR_SUFFIXES)
    items: list[InputItem] = []
    ignored: list[str] = []
    seen: set[str] = set()
    for raw in paths:
        p = Path(raw)
        if not p.exists():
            raise InspectError(f"input {raw}: no such file or folder",
                               hint="pass image files, folders of images, or .pt/.npy/.safetensors files")
        if p.is_dir():
            if _is_under(p, excl):
                continue  # the output folder itself
            found: list[tuple[str, str]] = []  # (relative posix path, path)
            top = str(p)
            for root, dirs, files in os.walk(top):
                # os.walk does not follow links to folders, so only folders can lead into
                # the output folder: prune them; their files need no check of their own
                dirs[:] = [d for d in dirs if not d.startswith(".")
                           and not _is_under(Path(root) / d, excl)]
                rel_root = os.path.relpath(root, top)
                rel_root = "" if rel_root == "." else rel_root.replace(os.sep, "/") + "/"
                for f in files:
                    full = os.path.join(root, f)
                    if f.startswith(".") or os.path.splitext(f)[1].lower() not in suffixes:
                        ignored.append(full)
                        continue
                    found.append((rel_root + f, full))
            found.sort()
            files_in = [(fp, False) for _, fp in found]
        else:
            why = not_regular(p)
            if why:
                raise InspectError(f"input {raw}: {why}",
                                   hint="pass image files, folders of images, or .pt/.npy/.safetensors files")
            files_in = [(str(p), True)]
        for fp, explicit in files_in:
            key = os.path.normpath(fp)
            if key in seen or (explicit and _is_under(Path(fp), excl)):
                continue
            seen.add(key)
            if not explicit and (why := _not_regular_quiet(fp)):
                ignored.append(f"{fp} ({why})")
                continue
            if os.path.splitext(key)[1].lower() in TENSOR_SUFFIXES:
                items.extend(tensor_items(key, sample_rank))
            else:
                items.append(InputItem(key.replace(os.sep, "/"), key, "image"))
    return items, ignored


def _not_regular_quiet(path: str) -> str | None:
    try:
        return not_regular(path)
    except OSError as exc:  # a dangling link
        return exc.strerror or type(exc).__name__


# ------------------------------------------------------------------ tensor files


def _tensor_shapes(path: str) -> dict[str | None, tuple[int, ...]]:
    """Shapes of the tensors in a tensor file, without reading the data where possible."""
    suffix = Path(path).suffix.lower()
    try:
        if suffix == ".npy":
            import numpy as np

            arr = np.load(path, mmap_mode="r", allow_pickle=False)
            return {None: tuple(arr.shape)}
        if suffix == ".safetensors":
            header = read_safetensors_header(path)
            return {k: e.shape for k, e in sorted(header.entries.items())}
        obj = _load_pt(path)
    except InspectError:
        raise
    except Exception as exc:
        raise InspectError(f"input {path}: cannot read the tensor file ({type(exc).__name__})",
                           hint="tensor inputs are .pt (a tensor, saved with torch.save), .npy "
                           "or .safetensors files") from None
    if isinstance(obj, torch.Tensor):
        return {None: tuple(obj.shape)}
    raise InspectError(f"input {path}: holds a {type(obj).__name__}, not a tensor",
                       hint="save one tensor per .pt file: torch.save(tensor, path)")


def tensor_items(path: str, sample_rank: int | None) -> list[InputItem]:
    """One row for a sample-shaped tensor, one per entry for a batch of samples."""
    items: list[InputItem] = []
    shown = Path(path).as_posix()
    for key, shape in _tensor_shapes(path).items():
        base = shown if key is None else f"{shown}:{key}"
        if sample_rank is not None and len(shape) == sample_rank + 1:
            items.extend(InputItem(f"{base}#{i}", path, "tensor", key, i) for i in range(shape[0]))
        else:
            items.append(InputItem(base, path, "tensor", key, None))
    return items


def load_tensor_row(item: InputItem) -> torch.Tensor:
    assert item.path is not None
    suffix = Path(item.path).suffix.lower()
    if suffix == ".npy":
        import numpy as np

        arr = np.load(item.path, mmap_mode="r", allow_pickle=False)
        t = torch.from_numpy(np.array(arr[item.index] if item.index is not None else arr))
    elif suffix == ".safetensors":
        from safetensors import safe_open

        with safe_open(item.path, framework="pt") as fh:
            t = fh.get_slice(item.key)[item.index] if item.index is not None else fh.get_tensor(item.key)
    else:
        obj = _load_pt(item.path)
        t = obj[item.index] if item.index is not None else obj
    return t.clone() if t.is_floating_point() else t.float()


# ------------------------------------------------------------------ preprocessing


@dataclass(frozen=True)
class Preprocess:
    """Image preprocessing; ``mode="none"`` feeds pixels scaled to [0, 1] as they are."""

    mode: str = "image"
    resize: int | None = None  # shorter side
    crop: tuple[int, int] | None = None  # (height, width), center crop
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    source: str = ""  # where the settings come from

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def geometry(self, img: torch.Tensor) -> torch.Tensor:
        """Resize and crop one uint8 (C, H, W) image (CPU or CUDA)."""
        from torchvision.transforms import functional as F  # the published transforms use it

        if self.mode == "none":
            return img
        if self.resize is not None:
            img = F.resize(img, [self.resize], antialias=True)
        if self.crop is not None:
            img = F.center_crop(img, list(self.crop))
        return img

    def normalize(self, batch: torch.Tensor) -> torch.Tensor:
        """uint8 (N, C, H, W) -> float32 in [0, 1], then (x - mean) / std."""
        x = batch.float().div_(255)
        if self.mode == "none" or self.mean is None or self.std is None:
            return x
        mean = torch.tensor(self.mean, device=x.device).view(1, -1, 1, 1)
        std = torch.tensor(self.std, device=x.device).view(1, -1, 1, 1)
        return x.sub_(mean).div_(std)


def published_transforms(model_name: str | None) -> Any:
    """The first published weights' transforms of a torchvision model, or None."""
    if not model_name:
        return None
    try:
        import torchvision.models as tvm

        weights = list(tvm.get_model_weights(model_name))
    except (ValueError, KeyError, AttributeError, ImportError):
        return None
    if not weights:
        return None
    try:
        return weights[0].transforms()
    except Exception:  # builders whose transforms need more than metadata
        return None


def make_preprocess(model_name: str | None, example_hw: tuple[int, int] | None, *,
                    mode: str = "image", resize: int | None = None, crop: int | None = None,
                    mean: tuple[float, ...] | None = None,
                    std: tuple[float, ...] | None = None) -> Preprocess:
    """Published transforms first, then the overrides; else the example input's size."""
    if mode not in ("image", "none"):
        raise InspectError(f"--preprocess {mode!r}: unknown mode", hint="use image (default) or none")
    if mode == "none":
        return Preprocess("none", source="--preprocess none: pixels scaled to [0, 1], no resize")
    t = published_transforms(model_name)
    r = c = None
    m = s = None
    source = []
    if t is not None and hasattr(t, "crop_size") and hasattr(t, "resize_size"):
        r, c = int(t.resize_size[0]), (int(t.crop_size[0]), int(t.crop_size[-1]))
        m, s = tuple(float(v) for v in t.mean), tuple(float(v) for v in t.std)
        source.append(f"transforms of {model_name}'s published weights")
    elif example_hw is not None:
        r, c = min(example_hw), example_hw
        m, s = IMAGENET_MEAN, IMAGENET_STD
        source.append("the model's example input size, ImageNet mean/std")
    else:
        m, s = IMAGENET_MEAN, IMAGENET_STD
        source.append("ImageNet mean/std, no resize (no example input size known)")
    if resize is not None:
        r = resize
    if crop is not None:
        c = (crop, crop)
    if mean is not None:
        m = mean
    if std is not None:
        s = std
    if any(v is not None for v in (resize, crop, mean, std)):
        source.append("overridden by options")
    for name, v in (("--mean", m), ("--std", s)):
        if v is not None and len(v) not in (1, 3):
            raise InspectError(f"{name} needs 1 or 3 values, got {len(v)}", hint=f"e.g. {name} 0.5,0.5,0.5")
    if s is not None and any(x == 0 for x in s):
        raise InspectError("--std values must be non-zero", hint="e.g. --std 0.229,0.224,0.225")
    return Preprocess("image", r, c, m, s, "; ".join(source))


# ------------------------------------------------------------------ decoding


def is_jpeg(data: bytes | memoryview) -> bool:
    return bytes(data[:3]) == b"\xff\xd8\xff"


def decode_cpu(data: bytes, path: str) -> torch.Tensor:
    """uint8 RGB (3, H, W): libjpeg/libpng through torchvision, PIL for everything else.

    Grayscale, palette, RGBA and CMYK images come out as RGB.
    """
    from torchvision.io import ImageReadMode, decode_image

    buf = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    try:
        img = decode_image(buf, mode=ImageReadMode.RGB)
        img = img[0] if img.ndim == 4 else img
        if img.dtype == torch.uint16:  # a 16-bit PNG: 0..65535 onto 0..255 like 8-bit ones
            img = (img.to(torch.float32) / 257.0).round_().to(torch.uint8)
        return img
    except (RuntimeError, ValueError):
        pass
    import io

    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as im:
            im.load()
            rgb = im.convert("RGB")
    except UnidentifiedImageError:
        raise ValueError("not a readable image (unknown or corrupt format)") from None
    except (OSError, ValueError, SyntaxError) as exc:
        raise ValueError(f"not a readable image ({first_line(exc)})") from None
    import numpy as np

    return torch.from_numpy(np.asarray(rgb).copy()).permute(2, 0, 1).contiguous()


class RowDataset(torch.utils.data.Dataset):
    """Item ``i`` -> ``(i, kind, value)``: kind "image" (uint8 CHW, resized and cropped),
    "jpeg" (raw bytes, for GPU decoding), "tensor" (a float row) or "error" (a message)."""

    def __init__(self, items: list[InputItem], prep: Preprocess, *, raw_jpeg: bool = False,
                 max_bytes: int = 256 * 2**20) -> None:
        self.items = items
        self.prep = prep
        self.raw_jpeg = raw_jpeg
        self.max_bytes = max_bytes

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> tuple[int, str, Any]:
        item = self.items[i]
        try:
            if item.kind == "tensor":
                return i, "tensor", load_tensor_row(item)
            assert item.path is not None
            data = read_file(item.path, self.max_bytes)
            if self.raw_jpeg and is_jpeg(data):
                return i, "jpeg", torch.frombuffer(bytearray(data), dtype=torch.uint8)
            return i, "image", self.prep.geometry(decode_cpu(data, item.path))
        except Exception as exc:  # reported and skipped, never a crash
            return i, "error", first_line(exc)


def collate_rows(batch: list[tuple[int, str, Any]]) -> dict[str, Any]:
    """Keep order; stack the CPU-decoded images when they share one size (pinned later);
    concatenate the JPEG bytes into ONE uint8 tensor (``jpeg_sizes`` splits it again), so a
    batch leaves the worker process as one shared-memory block, not one per file."""
    images = [v for _, k, v in batch if k == "image"]
    stacked = None
    if images and all(im.shape == images[0].shape for im in images):
        stacked = torch.stack(images)
    jpegs = [v for _, k, v in batch if k == "jpeg"]
    return {"index": [i for i, _, _ in batch], "kind": [k for _, k, _ in batch],
            "values": [None if (k == "image" and stacked is not None) or k == "jpeg" else v
                       for _, k, v in batch],
            "images": stacked,
            "jpeg_bytes": torch.cat(jpegs) if jpegs else None,
            "jpeg_sizes": [int(v.numel()) for v in jpegs]}


def split_jpegs(batch: dict[str, Any]) -> list[torch.Tensor]:
    """The per-file JPEG byte tensors of a collated batch (views, in batch order)."""
    blob = batch.get("jpeg_bytes")
    if blob is None:
        return []
    return list(torch.split(blob, batch["jpeg_sizes"]))


def _load_pt(path: str | os.PathLike[str]) -> Any:
    """A .pt tensor input through the one torch.load (weights_only, the zip checks and bomb
    limits of io/zipcheck.py), never torch.load on an unchecked file."""
    return torch_load(path, detect_format(path))
