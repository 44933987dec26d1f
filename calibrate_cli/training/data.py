"""Datasets for ``calib train``: read from local files (never downloaded) into arrays.

Sources (``--data``):

* ``digits``: scikit-learn's bundled handwritten digits (1797 real 8x8 images, 10 classes), the demo
  and CI set. A fixed split (seed 0, not ``--seed``) keeps 25% of the images as the test set.
* ``imagefolder:DIR``: ``DIR/train/<class>/*`` and ``DIR/test/<class>/*`` (images Pillow reads, all of
  one size; classes are the sorted folder names of ``train/``), the layout of the CIFAR-10 JPEG copy.
* ``npz:FILE``: arrays ``x_train``, ``y_train``, ``x_test``, ``y_test`` (read with
  ``allow_pickle=False``); x is (N, C, H, W), (N, H, W, C) with C in {1, 3}, (N, H, W) or (N, D)
  features; uint8 pixels are divided by 255.
* ``cifar10:DIR``: the official CIFAR-10 *binary* version (``data_batch_1.bin`` … ``data_batch_5.bin``,
  ``test_batch.bin``: records of 1 label byte and 3072 pixel bytes, parsed with numpy). The *python*
  version of the batches is a set of pickles, which calib never unpickles (a pickle can run any
  code): it is refused with a one-line message.

The validation set is a seeded random subset of the training set (:func:`split_validation`, the
paper: 5000 of CIFAR-10's 50000). Inputs are normalised per channel with the mean and standard
deviation of the remaining training images. Every problem with a file is one
:class:`~calibrate_cli.errors.InputError` naming it.
"""

from __future__ import annotations

import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import InputError

DATA_KINDS = ("digits", "imagefolder", "npz", "cifar10")
CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
_CIFAR_RECORD = 1 + 3 * 32 * 32
#: the most classes calib train builds a model for (the output layer and the per-class statistics
#: grow with K; ImageNet-21k has 21,841)
MAX_CLASSES = 100_000


@dataclass(frozen=True)
class Dataset:
    """Train / validation / test arrays, normalised: x float32 (N, C, H, W) (or (N, D) features),
    y int64 (N,). ``mean``/``std`` (per channel, from the training images) were applied;
    ``pad_value`` is what a zero pixel became (random-crop padding, as the reference pads before
    normalising)."""

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    classes: tuple[str, ...]
    mean: np.ndarray
    std: np.ndarray

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    @property
    def sample_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])

    @property
    def is_image(self) -> bool:
        return self.x_train.ndim == 4

    @property
    def pad_value(self) -> np.ndarray:
        return (-self.mean / self.std).astype(np.float32)


def parse_source(spec: str) -> tuple[str, str | None]:
    """``"digits"`` → ("digits", None); ``"npz:FILE"`` → ("npz", "FILE"); unknown kinds are an error."""
    kind, sep, where = str(spec).partition(":")
    if kind not in DATA_KINDS:
        raise InputError(f"unknown data source {spec!r}; one of: digits, imagefolder:DIR, npz:FILE, cifar10:DIR")
    if kind == "digits":
        if sep:
            raise InputError(f"data source {spec!r}: digits takes no path")
        return kind, None
    if not where:
        raise InputError(f"data source {spec!r} needs a path ({kind}:PATH)")
    return kind, where


def load_dataset(spec: str, *, val_size: float = 0.1, seed: int = 0) -> Dataset:
    """Read the data source ``spec`` (see the module's docstring), split off the validation set
    (:func:`split_validation`) and normalise."""
    kind, where = parse_source(spec)
    if kind == "digits":
        x_tr, y_tr, x_te, y_te, classes = _digits()
    elif kind == "imagefolder":
        x_tr, y_tr, x_te, y_te, classes = _imagefolder(Path(where))
    elif kind == "npz":
        x_tr, y_tr, x_te, y_te, classes = _npz(Path(where))
    else:
        x_tr, y_tr, x_te, y_te, classes = _cifar10(Path(where))
    train_idx, val_idx = split_validation(len(y_tr), val_size, seed, name=spec)
    x_val, y_val = x_tr[val_idx], y_tr[val_idx]
    x_tr, y_tr = x_tr[train_idx], y_tr[train_idx]
    axes = (0, 2, 3) if x_tr.ndim == 4 else (0,)
    mean = x_tr.mean(axis=axes, dtype=np.float64)
    std = x_tr.std(axis=axes, dtype=np.float64)
    if x_tr.ndim == 2:  # features: one scale for all (constant pixels of digits must not divide by 0)
        mean = np.full(1, x_tr.mean(dtype=np.float64))
        std = np.full(1, x_tr.std(dtype=np.float64))
    std = np.where(std > 1e-12, std, 1.0)
    shape = (1, -1, 1, 1) if x_tr.ndim == 4 else (1, -1)

    def norm(x):
        return ((x - mean.reshape(shape)) / std.reshape(shape)).astype(np.float32)

    return Dataset(
        name=spec, x_train=norm(x_tr), y_train=y_tr.astype(np.int64), x_val=norm(x_val), y_val=y_val.astype(np.int64),
        x_test=norm(x_te), y_test=y_te.astype(np.int64), classes=tuple(classes),
        mean=mean.astype(np.float32), std=std.astype(np.float32),
    )


def split_validation(n: int, val_size: float, seed: int, *, name: str = "the data") -> tuple[np.ndarray, np.ndarray]:
    """(train indices, validation indices) of ``n`` training samples: a random subset of
    ``val_size`` samples (an integer count ≥ 1, or a fraction in (0, 1)) drawn with ``seed``; both
    index arrays sorted."""
    if val_size <= 0:
        raise InputError(f"the validation size must be positive (got {val_size:g})")
    n_val = int(round(val_size * n)) if val_size < 1 else int(val_size)
    if val_size >= 1 and val_size != int(val_size):
        raise InputError(f"the validation size must be a whole count or a fraction below 1 (got {val_size:g})")
    n_val = max(n_val, 1)
    if n_val >= n:
        raise InputError(f"{name}: a validation set of {n_val} leaves no training samples (of {n})")
    perm = np.random.default_rng(seed).permutation(n)
    return np.sort(perm[n_val:]), np.sort(perm[:n_val])


def _digits():
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise InputError("the digits data set needs scikit-learn (pip install scikit-learn)") from None
    bunch = load_digits()
    x = (bunch.images.astype(np.float32) / 16.0)[:, None, :, :]
    y = bunch.target.astype(np.int64)
    perm = np.random.default_rng(0).permutation(len(y))
    n_test = len(y) // 4
    test, train = np.sort(perm[:n_test]), np.sort(perm[n_test:])
    return x[train], y[train], x[test], y[test], [str(i) for i in range(10)]


def _check_folder(path: Path, what: str) -> None:
    if not path.exists():
        raise InputError(f"{path}: no such folder ({what})")
    if not path.is_dir():
        raise InputError(f"{path}: not a folder ({what})")


def _image_files(folder: Path) -> list[Path]:
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError as exc:
        raise InputError(f"{folder}: cannot list ({exc.strerror or exc})") from None
    return [Path(e.path) for e in entries if not e.name.startswith(".") and e.is_file()]


def _read_image(path: Path, mode: str | None):
    import warnings

    from PIL import Image, UnidentifiedImageError

    try:
        with warnings.catch_warnings():
            # Pillow warns above MAX_IMAGE_PIXELS (89 megapixels) and refuses above twice that: both
            # are one line naming the file (a training image that large is a mistake or a bomb)
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(path) as im:
                if mode is None:
                    mode = "L" if im.mode in ("1", "L", "I", "I;16", "F") else "RGB"
                arr = np.asarray(im.convert(mode), dtype=np.uint8)
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise InputError(
            f"{path}: an image of more than {Image.MAX_IMAGE_PIXELS / 1e6:.0f} megapixels, refused as a possible "
            "decompression bomb (Pillow's limit); training images are small (32x32 for CIFAR-10)"
        ) from None
    except MemoryError:
        raise InputError(f"{path}: out of memory decoding the image") from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
        raise InputError(f"{path}: not an image Pillow can read ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})") from None
    return (arr[None] if arr.ndim == 2 else arr.transpose(2, 0, 1)), mode


def _imagefolder(root: Path):
    try:
        import PIL  # noqa: F401
    except ImportError:
        raise InputError("image folders need Pillow (pip install Pillow)") from None
    _check_folder(root, "expected DIR/train/<class>/* and DIR/test/<class>/*")
    splits = {}
    classes = None
    mode = None
    shape = None
    for split in ("train", "test"):
        folder = root / split
        _check_folder(folder, f"expected {root}/{split}/<class>/*")
        class_dirs = sorted(p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
        if not class_dirs:
            raise InputError(f"{folder}: no class folders (expected {folder}/<class>/*)")
        if classes is None:
            classes = class_dirs
        else:
            unknown = sorted(set(class_dirs) - set(classes))
            if unknown:
                raise InputError(f"{folder}: class folder {unknown[0]!r} is not among the training classes")
        images, labels = [], []
        for label, name in enumerate(classes):
            if name not in class_dirs:
                continue
            files = _image_files(folder / name)
            if split == "train" and not files:
                raise InputError(f"{folder / name}: no images")
            for file in files:
                arr, mode = _read_image(file, mode)
                if shape is None:
                    shape = arr.shape
                elif arr.shape != shape:
                    raise InputError(
                        f"{file}: a {arr.shape[2]}x{arr.shape[1]} image; the others are {shape[2]}x{shape[1]}"
                    )
                images.append(arr)
                labels.append(label)
        if not images:
            raise InputError(f"{folder}: no images")
        splits[split] = (np.stack(images).astype(np.float32) / 255.0, np.asarray(labels, dtype=np.int64))
    return (*splits["train"], *splits["test"], classes)


def _npz(path: Path):
    if not path.is_file():
        raise InputError(f"{path}: no such file" if not path.exists() else f"{path}: not a regular file")
    try:
        with np.load(path, allow_pickle=False) as z:
            if not hasattr(z, "files"):
                raise InputError(f"{path}: an .npy array, not an .npz archive of x_train, y_train, x_test, y_test")
            missing = [k for k in ("x_train", "y_train", "x_test", "y_test") if k not in z.files]
            if missing:
                raise InputError(f"{path}: no array {missing[0]!r} (has: {', '.join(z.files) or 'none'})")
            arrays = {k: z[k] for k in ("x_train", "y_train", "x_test", "y_test")}
    except InputError:
        raise
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise InputError(f"{path}: not a readable .npz archive ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})") from None
    x_tr, x_te = (_npz_x(arrays[k], path, k) for k in ("x_train", "x_test"))
    y_tr, y_te = (_npz_y(arrays[k], path, k) for k in ("y_train", "y_test"))
    for x, y, k in ((x_tr, y_tr, "train"), (x_te, y_te, "test")):
        if len(x) != len(y):
            raise InputError(f"{path}: x_{k} has {len(x)} samples but y_{k} has {len(y)}")
    if x_tr.shape[1:] != x_te.shape[1:]:
        raise InputError(f"{path}: x_train samples are {x_tr.shape[1:]} but x_test samples are {x_te.shape[1:]}")
    k = int(max(y_tr.max(), y_te.max())) + 1
    if k < 2:
        raise InputError(f"{path}: the labels hold a single class")
    if k > MAX_CLASSES:  # labels are class indices: label 2**40 would make a 2**40-class output layer
        key, y = ("y_train", y_tr) if y_tr.max() >= y_te.max() else ("y_test", y_te)
        row = int(np.argmax(y))
        raise InputError(
            f"{path}: {key} holds the label {int(y[row])} (row {row}), so K = {k} classes; calib train "
            f"handles at most {MAX_CLASSES} (labels are class indices 0 … K − 1)"
        )
    return x_tr, y_tr, x_te, y_te, [str(i) for i in range(k)]


def _npz_x(x: np.ndarray, path: Path, key: str) -> np.ndarray:
    if x.dtype.kind not in "uif" or x.ndim not in (2, 3, 4) or len(x) == 0:
        raise InputError(f"{path}: {key} must be a non-empty numeric array of 2 to 4 dimensions (got {x.dtype} {x.shape})")
    raw_uint8 = x.dtype == np.uint8
    x = x.astype(np.float32)
    if raw_uint8:
        x /= 255.0
    if not np.isfinite(x).all():
        raise InputError(f"{path}: {key} holds NaN or infinite values")
    if x.ndim == 3:
        x = x[:, None]
    elif x.ndim == 4 and x.shape[1] not in (1, 3) and x.shape[3] in (1, 3):
        x = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    return x


def _npz_y(y: np.ndarray, path: Path, key: str) -> np.ndarray:
    if y.ndim != 1 or y.dtype.kind not in "uif" or len(y) == 0:
        raise InputError(f"{path}: {key} must be a non-empty 1-D array of integer labels (got {y.dtype} {y.shape})")
    if y.dtype.kind == "f" and not (np.isfinite(y).all() and (y == np.round(y)).all()):
        raise InputError(f"{path}: {key} holds labels that are not whole numbers")
    if y.min() < 0:
        raise InputError(f"{path}: {key} holds a negative label ({int(y.min())})")
    return y.astype(np.int64)


def _cifar10(root: Path):
    _check_folder(root, "expected the CIFAR-10 binary batches data_batch_1.bin … test_batch.bin")
    if (root / "cifar-10-batches-bin").is_dir():
        root = root / "cifar-10-batches-bin"
    names = [f"data_batch_{i}.bin" for i in range(1, 6)]
    if not (root / names[0]).exists():
        python = root / "data_batch_1" if (root / "data_batch_1").exists() else root / "cifar-10-batches-py" / "data_batch_1"
        if python.exists():
            raise InputError(
                f"{python}: the python version of CIFAR-10 is pickle files, which calib never unpickles; "
                "use the binary version (cifar-10-binary.tar.gz), an image folder or an .npz file"
            )
        raise InputError(f"{root}: no data_batch_1.bin (expected the CIFAR-10 binary version)")
    train = [_cifar_batch(root / name) for name in names]
    x_te, y_te = _cifar_batch(root / "test_batch.bin")
    x_tr = np.concatenate([b[0] for b in train])
    y_tr = np.concatenate([b[1] for b in train])
    classes = list(CIFAR10_CLASSES)
    meta = root / "batches.meta.txt"
    if meta.is_file():
        listed = [line.strip() for line in meta.read_text(errors="replace").splitlines() if line.strip()]
        if len(listed) == 10:
            classes = listed
    return x_tr, y_tr, x_te, y_te, classes


def _cifar_batch(path: Path):
    if not path.is_file():
        raise InputError(f"{path}: no such file (expected in the CIFAR-10 binary version)")
    raw = np.fromfile(path, dtype=np.uint8)
    if raw.size == 0 or raw.size % _CIFAR_RECORD:
        raise InputError(f"{path}: {raw.size} bytes is not a whole number of CIFAR-10 records of {_CIFAR_RECORD} bytes")
    records = raw.reshape(-1, _CIFAR_RECORD)
    y = records[:, 0].astype(np.int64)
    if y.max() > 9:
        raise InputError(f"{path}: label {int(y.max())} out of CIFAR-10's 0..9")
    x = records[:, 1:].reshape(-1, 3, 32, 32).astype(np.float32) / 255.0
    return x, y
