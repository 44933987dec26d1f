"""safetensors, HDF5 and Zarr inputs (issue 21): the metrics of the .npy of the same values (files
written with each format's own library, chunked), every command, and one-line errors (exit 2) for
truncated files, missing keys, non-numeric dtypes and codecs that would unpickle."""

from __future__ import annotations

import json

import numpy as np
import pytest

from calibrate_cli.cli import cli
from cli_helpers import one_line_error  # noqa: E402


@pytest.fixture()
def data(tmp_path):
    rng = np.random.default_rng(5)
    labels = rng.integers(0, 4, 70)
    logits = rng.normal(size=(70, 4)).astype(np.float32)
    logits[np.arange(70), labels] += 1.0
    np.save(tmp_path / "z.npy", logits)
    np.save(tmp_path / "y.npy", labels)
    return logits, labels


def run(runner, *args):
    return runner.invoke(cli, [str(a) for a in args])


def metrics(result) -> dict:
    assert result.exit_code == 0, result.output + result.stderr
    return json.loads(result.stdout)["metrics"]


def npy_metrics(runner, tmp_path) -> dict:
    return metrics(run(runner, "eval", tmp_path / "z.npy", tmp_path / "y.npy", "-f", "json"))


def write_safetensors(tmp_path, data):
    st = pytest.importorskip("safetensors.numpy")
    logits, labels = data
    path = tmp_path / "run.safetensors"
    st.save_file({"logits": logits, "labels": labels}, str(path))
    return path


def write_h5(tmp_path, data):
    h5py = pytest.importorskip("h5py")
    logits, labels = data
    path = tmp_path / "run.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("eval/logits", data=logits, chunks=(8, 4), compression="gzip")
        f.create_dataset("eval/labels", data=labels, chunks=(16,))
    return path


def write_zarr(tmp_path, data):
    zarr = pytest.importorskip("zarr")
    logits, labels = data
    path = tmp_path / "run.zarr"
    root = zarr.open_group(str(path), mode="w")
    root.create_array("logits", data=logits, chunks=(8, 4))
    root.create_array("eval/labels", data=labels, chunks=(16,))
    return path


SOURCES = {
    "safetensors": (write_safetensors, ":logits", ":labels"),
    "h5": (write_h5, ":/eval/logits", ":eval/labels"),
    "zarr": (write_zarr, ":logits", ":eval/labels"),
}


@pytest.mark.parametrize("fmt", SOURCES)
def test_each_format_gives_the_npy_metrics(runner, tmp_path, data, fmt):
    write, scores_key, labels_key = SOURCES[fmt]
    path = write(tmp_path, data)
    got = metrics(run(runner, "eval", f"{path}{scores_key}", f"{path}{labels_key}", "-f", "json"))
    assert got == npy_metrics(runner, tmp_path)


@pytest.mark.parametrize("fmt", SOURCES)
@pytest.mark.parametrize("command", ["temperature", "fit", "compare"])
def test_every_command_reads_the_format(runner, tmp_path, data, fmt, command):
    write, scores_key, labels_key = SOURCES[fmt]
    path = write(tmp_path, data)
    z, y = tmp_path / "z.npy", tmp_path / "y.npy"
    args = [f"{path}{scores_key}", f"{path}{labels_key}"] + ([z, y] if command == "compare" else [])
    got = run(runner, command, *args, "-f", "json")
    want = run(runner, command, z, y, *([z, y] if command == "compare" else []), "-f", "json")
    assert got.exit_code == 0, got.stderr
    keep = lambda doc: json.dumps({k: v for k, v in json.loads(doc).items() if k not in ("inputs", "models")}, sort_keys=True)
    assert keep(got.stdout) == keep(want.stdout)


@pytest.mark.parametrize("fmt", SOURCES)
def test_a_missing_key_lists_the_keys(runner, tmp_path, data, fmt):
    path = SOURCES[fmt][0](tmp_path, data)
    one_line_error(run(runner, "eval", f"{path}:nope", tmp_path / "y.npy"), path.name, "no array named", "logits")
    one_line_error(run(runner, "eval", path, tmp_path / "y.npy"), path.name, "several", ":KEY")


@pytest.mark.parametrize("fmt", SOURCES)
def test_a_truncated_file_is_named(runner, tmp_path, data, fmt):
    path = SOURCES[fmt][0](tmp_path, data)
    if fmt == "zarr":  # a store is a folder: cut its first chunk of logits
        chunk = next(p for p in (path / "logits").rglob("*") if p.is_file() and p.name != "zarr.json")
        chunk.write_bytes(chunk.read_bytes()[:5])
    else:
        raw = path.read_bytes()
        path.write_bytes(raw[: len(raw) * 2 // 3])
    key = SOURCES[fmt][1]
    one_line_error(run(runner, "eval", f"{path}{key}", tmp_path / "y.npy"), path.name)


@pytest.mark.parametrize("fmt", ["safetensors", "h5"])
def test_a_pickle_named_as_the_format_is_refused(runner, tmp_path, data, fmt):
    import pickle

    pytest.importorskip({"safetensors": "safetensors", "h5": "h5py"}[fmt])  # the reader that refuses it

    path = tmp_path / f"evil.{fmt}"
    path.write_bytes(pickle.dumps({"logits": np.zeros((3, 2))}))
    one_line_error(run(runner, "eval", f"{path}:logits", tmp_path / "y.npy"), "evil." + fmt, "not a")


def test_hdf5_text_ragged_and_records_are_refused(runner, tmp_path, data):
    h5py = pytest.importorskip("h5py")
    path = tmp_path / "bad.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("text", data=np.array([b"a", b"b"], dtype=h5py.string_dtype()))
        ragged = f.create_dataset("ragged", (2,), dtype=h5py.vlen_dtype(np.float64))
        ragged[0], ragged[1] = np.arange(3.0), np.arange(2.0)
        f.create_dataset("records", data=np.zeros(3, dtype=[("a", "f8"), ("b", "i4")]))
        f.create_dataset("complex", data=np.zeros((3, 2), dtype=np.complex128))
        f.create_group("group")
    y = tmp_path / "y.npy"
    one_line_error(run(runner, "eval", f"{path}:/text", y), "bad.h5", "'/text'", "text")
    one_line_error(run(runner, "eval", f"{path}:/ragged", y), "bad.h5", "ragged")
    one_line_error(run(runner, "eval", f"{path}:/records", y), "bad.h5", "records")
    one_line_error(run(runner, "eval", f"{path}:/complex", y), "bad.h5", "complex")
    one_line_error(run(runner, "eval", f"{path}:/group", y), "bad.h5", "group, not a dataset")


def test_a_zarr_pickle_codec_is_never_run(runner, tmp_path, data):
    """A Zarr v2 array whose compressor is numcodecs' Pickle would unpickle its chunk: refused
    before any chunk is read (the chunk here would create a file if it were unpickled)."""
    pytest.importorskip("zarr")
    store = tmp_path / "evil.zarr"
    store.mkdir()
    (store / ".zarray").write_text(json.dumps({
        "zarr_format": 2, "shape": [3], "chunks": [3], "dtype": "<f8", "compressor": {"id": "pickle"},
        "fill_value": 0.0, "filters": None, "order": "C",
    }))
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    import pickle

    (store / "0").write_bytes(pickle.dumps(Evil()))
    one_line_error(run(runner, "eval", store, tmp_path / "y.npy"), "evil.zarr", "pickle")
    assert not marker.exists()


@pytest.mark.filterwarnings("ignore")  # zarr: fixed-length strings have no v3 spec yet
def test_zarr_text_and_object_arrays_are_refused(runner, tmp_path, data):
    zarr = pytest.importorskip("zarr")
    store = tmp_path / "text.zarr"
    root = zarr.open_group(str(store), mode="w")
    root.create_array("names", data=np.array(["a", "b", "c"]))
    one_line_error(run(runner, "eval", f"{store}:names", tmp_path / "y.npy"), "text.zarr", "'names'", "text")


def test_safetensors_bf16_is_widened_exactly(runner, tmp_path, data):
    torch = pytest.importorskip("torch")
    st = pytest.importorskip("safetensors.torch")
    logits, labels = data
    t = torch.from_numpy(logits).to(torch.bfloat16)
    st.save_file({"logits": t}, str(tmp_path / "b.safetensors"))
    torch.save(t, tmp_path / "b.pt")
    got = metrics(run(runner, "eval", tmp_path / "b.safetensors", tmp_path / "y.npy", "-f", "json"))
    want = metrics(run(runner, "eval", tmp_path / "b.pt", tmp_path / "y.npy", "-f", "json"))
    assert got == want


@pytest.mark.parametrize("fmt,module,extra", [("safetensors", "safetensors", "safetensors"), ("h5", "h5py", "hdf5"),
                                              ("zarr", "zarr", "zarr")])
def test_a_missing_extra_names_the_install_command(runner, tmp_path, data, monkeypatch, fmt, module, extra):
    import sys

    path = SOURCES[fmt][0](tmp_path, data)
    for name in [m for m in sys.modules if m == module or m.startswith(module + ".")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, module, None)
    one_line_error(run(runner, "eval", f"{path}{SOURCES[fmt][1]}", tmp_path / "y.npy"), path.name,
                   f"pip install 'calibrate-cli[{extra}]'")
