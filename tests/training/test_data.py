"""Data sources of calib train: digits, image folders, .npz, CIFAR-10 binary batches; the seeded
validation split; one InputError naming the file for every broken input."""

import numpy as np
import pytest
from PIL import Image

from calibrate_cli.errors import InputError
from calibrate_cli.training.data import load_dataset, parse_source, split_validation


def test_split_is_seeded_disjoint_and_sized():
    train, val = split_validation(50_000, 5000, seed=1)
    assert len(val) == 5000 and len(train) == 45_000
    assert len(np.union1d(train, val)) == 50_000
    again = split_validation(50_000, 5000, seed=1)
    assert np.array_equal(again[1], val)
    assert not np.array_equal(split_validation(50_000, 5000, seed=2)[1], val)
    assert len(split_validation(100, 0.25, seed=0)[1]) == 25


@pytest.mark.parametrize("size", [0, -1, 100, 2.5])
def test_split_refuses_bad_sizes(size):
    with pytest.raises(InputError):
        split_validation(100, size, seed=0)


def test_unknown_source_and_missing_path():
    with pytest.raises(InputError, match="unknown data source 'mnist'"):
        parse_source("mnist")
    with pytest.raises(InputError, match="needs a path"):
        parse_source("npz:")


def test_digits_shapes_and_normalisation():
    pytest.importorskip("sklearn")
    d = load_dataset("digits", val_size=0.1, seed=0)
    assert d.x_train.shape[1:] == (1, 8, 8) and d.num_classes == 10
    assert len(d.y_train) + len(d.y_val) + len(d.y_test) == 1797
    assert len(d.y_test) == 1797 // 4
    # normalised with the training images' own mean and std
    assert abs(float(d.x_train.mean())) < 1e-5 and abs(float(d.x_train.std()) - 1) < 1e-4
    # the test set does not depend on the seed; the validation set does
    other = load_dataset("digits", val_size=0.1, seed=1)
    assert np.array_equal(other.y_test, d.y_test)
    assert not np.array_equal(other.y_val, d.y_val)


def _folder(root, sizes=None, classes=("cat", "dog")):
    rng = np.random.default_rng(0)
    for split, n in (("train", 3), ("test", 2)):
        for c in classes:
            (root / split / c).mkdir(parents=True)
            for i in range(n):
                arr = rng.integers(0, 256, (6, 5, 3), dtype=np.uint8)
                Image.fromarray(arr).save(root / split / c / f"{i}.png")
    return root


def test_imagefolder_reads_classes_in_sorted_order(tmp_path):
    root = _folder(tmp_path / "d")
    d = load_dataset(f"imagefolder:{root}", val_size=1, seed=0)
    assert d.classes == ("cat", "dog")
    assert d.x_train.shape == (5, 3, 6, 5) and d.x_test.shape == (4, 3, 6, 5)
    assert sorted(np.concatenate([d.y_train, d.y_val]).tolist()) == [0, 0, 0, 1, 1, 1]
    # pixel values come back (unnormalised) as the PNG holds them
    raw = np.asarray(Image.open(root / "test" / "dog" / "1.png"), dtype=np.float32).transpose(2, 0, 1) / 255
    back = d.x_test[3] * d.std[:, None, None] + d.mean[:, None, None]
    np.testing.assert_allclose(back, raw, atol=1e-5)


def test_imagefolder_broken_file_is_named(tmp_path):
    root = _folder(tmp_path / "d")
    (root / "train" / "dog" / "bad.png").write_bytes(b"not a png")
    with pytest.raises(InputError, match=r"bad\.png: not an image"):
        load_dataset(f"imagefolder:{root}")


def test_imagefolder_size_mismatch_and_missing_split(tmp_path):
    root = _folder(tmp_path / "d")
    Image.fromarray(np.zeros((7, 7, 3), dtype=np.uint8)).save(root / "test" / "cat" / "big.png")
    with pytest.raises(InputError, match=r"big\.png: a 7x7 image; the others are 5x6"):
        load_dataset(f"imagefolder:{root}")
    with pytest.raises(InputError, match="no such folder"):
        load_dataset(f"imagefolder:{tmp_path / 'nowhere'}")
    (tmp_path / "e" / "train" / "a").mkdir(parents=True)
    with pytest.raises(InputError, match=r"e/train/a: no images"):
        load_dataset(f"imagefolder:{tmp_path / 'e'}")


def test_npz_layouts(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (20, 4, 4, 3), dtype=np.uint8)  # NHWC
    y = np.arange(20) % 3
    np.savez(tmp_path / "a.npz", x_train=x, y_train=y, x_test=x[:6], y_test=y[:6])
    d = load_dataset(f"npz:{tmp_path / 'a.npz'}", val_size=4)
    assert d.x_train.shape == (16, 3, 4, 4) and d.num_classes == 3
    np.savez(tmp_path / "f.npz", x_train=rng.normal(size=(20, 7)), y_train=y, x_test=rng.normal(size=(5, 7)), y_test=y[:5])
    assert load_dataset(f"npz:{tmp_path / 'f.npz'}").x_test.shape == (5, 7)


def test_npz_problems_are_one_line_naming_the_file(tmp_path):
    np.savez(tmp_path / "m.npz", x_train=np.zeros((4, 2)), y_train=np.zeros(4))
    with pytest.raises(InputError, match=r"m\.npz: no array 'x_test'"):
        load_dataset(f"npz:{tmp_path / 'm.npz'}")
    np.savez(tmp_path / "o.npz", x_train=np.array([{}, {}], dtype=object), y_train=[0, 1], x_test=np.zeros((1, 2)), y_test=[0])
    with pytest.raises(InputError, match=r"o\.npz"):  # object arrays need pickle: refused
        load_dataset(f"npz:{tmp_path / 'o.npz'}")
    (tmp_path / "junk.npz").write_bytes(b"junk")
    with pytest.raises(InputError, match=r"junk\.npz: not a readable \.npz"):
        load_dataset(f"npz:{tmp_path / 'junk.npz'}")


def _cifar_records(n, rng):
    rec = np.empty((n, 3073), dtype=np.uint8)
    rec[:, 0] = rng.integers(0, 10, n)
    rec[:, 1:] = rng.integers(0, 256, (n, 3072))
    return rec


def test_cifar10_binary_batches(tmp_path):
    rng = np.random.default_rng(0)
    records = {}
    for name in [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]:
        records[name] = _cifar_records(4, rng)
        records[name].tofile(tmp_path / name)
    d = load_dataset(f"cifar10:{tmp_path}", val_size=2)
    assert d.x_test.shape == (4, 3, 32, 32) and d.classes[0] == "airplane"
    assert np.array_equal(d.y_test, records["test_batch.bin"][:, 0])
    # pixel (c, h, w) of record 2 is byte 1 + 1024 c + 32 h + w
    back = d.x_test[2] * d.std[:, None, None] + d.mean[:, None, None]
    assert abs(back[1, 3, 5] * 255 - records["test_batch.bin"][2, 1 + 1024 + 32 * 3 + 5]) < 1e-3
    (tmp_path / "test_batch.bin").write_bytes(b"x" * 100)
    with pytest.raises(InputError, match=r"test_batch\.bin: 100 bytes"):
        load_dataset(f"cifar10:{tmp_path}")


def test_cifar10_python_pickles_are_refused(tmp_path):
    (tmp_path / "data_batch_1").write_bytes(b"\x80\x02}q\x00.")  # a pickle: never opened
    with pytest.raises(InputError, match="pickle files, which calib never unpickles"):
        load_dataset(f"cifar10:{tmp_path}")
