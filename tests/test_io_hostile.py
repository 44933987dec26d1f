"""Hostile and careless input (issue 20, items 1, 4 and 6; issue 19.12): every case is one line on
stderr naming the file and the real problem, exit code 2, no raw numpy/torch warning, no hang."""

import io
import json
import os
import subprocess
import sys
import tracemalloc
import warnings
from pathlib import Path

import numpy as np
import pytest

import calibrate_cli as calib
from calibrate_cli.cli import cli
from calibrate_cli.errors import InputError
from cli_helpers import one_line_error  # noqa: E402

# a numpy/torch warning would reach the user raw, before the error line: make it fail the test
pytestmark = pytest.mark.filterwarnings("error")


def run(runner, *args, env=None):
    return runner.invoke(cli, [str(a) for a in args], env=env)


@pytest.fixture()
def files(tmp_path):
    rng = np.random.default_rng(5)
    labels = rng.integers(0, 10, 200)
    logits = rng.normal(size=(200, 10))
    logits[np.arange(200), labels] += 1.0
    np.save(tmp_path / "x.npy", logits)
    np.save(tmp_path / "y.npy", labels)
    return tmp_path, logits, labels


# ------------------------------------------------------------------------------------ files
def test_a_npy_header_claiming_more_than_the_file_holds_is_named(runner, files):
    folder, _, _ = files
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f8", "fortran_order": False, "shape": (10**12, 10)})
    (folder / "huge.npy").write_bytes(buf.getvalue() + b"\0" * 72)
    # before: "out of memory; try a smaller input" without the file
    one_line_error(run(runner, "eval", folder / "huge.npy", folder / "y.npy"), "huge.npy", "header", "(1000000000000, 10)")


def test_a_npz_member_whose_header_lies_is_named(runner, files):
    import zipfile

    folder, _, _ = files
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f8", "fortran_order": False, "shape": (10**11,)})
    with zipfile.ZipFile(folder / "lie.npz", "w") as archive:
        archive.writestr("a.npy", buf.getvalue() + b"\0" * 16)
    one_line_error(run(runner, "eval", folder / "lie.npz", folder / "y.npy"), "lie.npz", "'a'", "header")


def test_an_empty_file_name_is_not_a_directory(runner, files):
    folder, _, _ = files
    one_line_error(run(runner, "eval", "", folder / "y.npy"), "empty file name", absent=("directory",))


def test_npz_key_typos_name_the_archive_and_its_keys(runner, files):
    folder, logits, _ = files
    np.savez(folder / "ok.npz", logits=logits)
    one_line_error(run(runner, "eval", f"{folder}/ok.npz:", folder / "y.npy"), "no key after ':'", "logits")
    one_line_error(run(runner, "eval", f"{folder}/ok.npz::logits", folder / "y.npy"), "no array named ':logits'", "logits")


def test_a_fifo_is_refused_without_hanging(files):
    folder, _, _ = files
    os.mkfifo(folder / "fifo.npy")
    code = "from calibrate_cli.cli import main; main()"
    proc = subprocess.run(
        [sys.executable, "-c", code, "eval", str(folder / "fifo.npy"), str(folder / "y.npy")],
        capture_output=True, text=True, timeout=60,  # before: blocked forever opening the FIFO
    )
    assert proc.returncode == 2, proc.stderr
    assert "fifo.npy" in proc.stderr and "not a regular file" in proc.stderr


# ------------------------------------------------------------------------------------ labels
def test_a_huge_float_label_is_reported_with_its_value(runner, files):
    folder, _, labels = files
    y = labels.astype(float)
    y[2] = 1e20
    np.save(folder / "big.npy", y)
    # before: a numpy RuntimeWarning, then "label -9223372036854775808 at row 2"
    one_line_error(run(runner, "eval", folder / "x.npy", folder / "big.npy"), "big.npy", "label 1e+20 at row 2", "not a class index")


def test_a_huge_unsigned_label_is_not_wrapped(runner, files):
    folder, _, labels = files
    y = labels.astype(np.uint64)
    y[5] = 2**63
    np.save(folder / "u.npy", y)
    one_line_error(run(runner, "eval", folder / "x.npy", folder / "u.npy"), "label 9223372036854775808 at row 5")


# ------------------------------------------------------------------------------- temperatures
def test_a_temperature_too_small_is_refused_itself(runner, files):
    folder, _, _ = files
    line = one_line_error(
        run(runner, "eval", folder / "x.npy", folder / "y.npy", "--temperature", "1e-320"),
        "T = 1e-320", "overflow", "smallest usable T",
    )
    assert "contain Inf" not in line  # before: "x.npy: scores contain Inf (first at row 0)"


def test_temperature_on_logits_near_the_float_limit(runner, files):
    folder, logits, _ = files
    np.save(folder / "big.npy", logits / np.abs(logits).max() * 5e307)
    # before: 8 RuntimeWarnings and a NaN objective picked at T = 0.1, exit 0
    one_line_error(run(runner, "temperature", folder / "big.npy", folder / "y.npy"), "big.npy", "T = 0.1", "overflow")
    one_line_error(run(runner, "temperature", folder / "big.npy", folder / "y.npy", "--search", "nll"), "big.npy", "NLL")
    result = run(runner, "eval", folder / "big.npy", folder / "y.npy", "-f", "json")
    assert result.exit_code == 0 and result.stderr == ""  # before: "overflow encountered in reduce", NLL inf
    big, y = np.load(folder / "big.npy"), np.load(folder / "y.npy")
    per_sample = [  # −log softmax(x)_y = (max x − x_y) + log Σ exp(x − max x), one row at a time
        (max(row) - row[t]) + np.log(sum(np.exp(v - max(row)) for v in row)) for row, t in zip(big.tolist(), y)
    ]
    assert json.loads(result.stdout)["metrics"]["nll"] == pytest.approx(sum(v / 200 for v in per_sample), rel=1e-12)


def test_a_grid_beyond_the_float_range_names_the_option(runner, files):
    folder, _, _ = files
    one_line_error(
        run(runner, "temperature", folder / "x.npy", folder / "y.npy", "--grid", "1:1e400:1e399"), "--grid", "1e400"
    )


# -------------------------------------------------------------------------------- compat mode
@pytest.mark.parametrize("scale", [1e38, 1e300])
def test_compat_refuses_scores_float32_cannot_hold(runner, files, scale):
    folder, logits, _ = files
    np.save(folder / "big.npy", logits * scale)  # |logits| up to ~4: beyond 3.4e38 for both scales
    # before: accuracy wrong, ECE/NLL NaN, exit 0
    one_line_error(
        run(runner, "eval", folder / "big.npy", folder / "y.npy", "--compat", "focal-calibration"), "big.npy", "float32"
    )
    one_line_error(
        run(runner, "temperature", folder / "big.npy", folder / "y.npy", "--compat", "focal-calibration"),
        "big.npy", "float32",
    )


def test_compat_grid_refuses_temperatures_that_overflow_float32(runner, files):
    folder, logits, _ = files
    np.save(folder / "b.npy", logits / np.abs(logits).max() * 1e38)  # fits float32 at T = 1, not at T = 0.1
    # before: the accuracy "changed with T" (float32 overflow at small T), exit 0
    one_line_error(
        run(runner, "temperature", folder / "b.npy", folder / "y.npy", "--compat", "focal-calibration"),
        "T = 0.1", "float32", "smallest usable T",
    )
    assert run(runner, "eval", folder / "b.npy", folder / "y.npy", "--compat", "focal-calibration").exit_code == 0


# ---------------------------------------------------------------------------------- resources
@pytest.mark.parametrize("bins", ["1000000", "99999999999999999999999"])
def test_absurd_bin_counts_are_refused(runner, files, bins):
    folder, _, _ = files
    result = run(runner, "eval", folder / "x.npy", folder / "y.npy", "--n-bins", bins)
    assert result.exit_code == 2 and "--n-bins" in result.stderr and "1000" in result.stderr
    with pytest.raises(InputError, match="at most 1000"):
        calib.evaluate(np.zeros((2, 2)), np.array([0, 1]), n_bins=10**6)


def test_classwise_statistics_of_many_classes_stay_proportional_to_the_input():
    from naive_reference import classwise_ece

    rng = np.random.default_rng(2)
    logits = rng.normal(size=(1, 100_000))  # 0.8 MB; dense (K, M) statistics: 100 000 × 100 × 3 × 8 B = 240 MB
    tracemalloc.start()
    report = calib.evaluate(logits, np.array([17]), n_bins=100, metrics=["classwise_ece"])  # asked: K > 1024
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 60e6, peak  # before: ~0.5 GB
    expected = classwise_ece(_softmax(logits), [17], 100)
    assert report.metrics["classwise_ece"] == pytest.approx(expected, rel=1e-12)


def _softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_sparse_and_dense_classwise_statistics_agree():
    from calibrate_cli.data.predictions import as_predictions
    from calibrate_cli.engine.summary import summarize

    rng = np.random.default_rng(4)
    logits, labels = rng.normal(size=(3, 5000)) * 3, np.array([0, 7, 4999])
    sparse = summarize(as_predictions(logits, labels), n_bins=1000).classwise  # K·M = 5e6 ≫ N·K
    assert type(sparse).__name__ == "SparseBinStats"
    dense = sparse.to_dense()
    np.testing.assert_allclose(sparse.calibration_error(), dense.calibration_error(), rtol=1e-13, atol=0)
    assert dense.count.sum() == 3 * 5000 and dense.count.shape == (5000, 1000)


@pytest.mark.parametrize("value, fragment", [("1000", "at most 64"), ("1" + "0" * 23, "at most 64"), ("٣", "ASCII")])
def test_calib_threads_is_bounded_and_ascii(runner, files, value, fragment):
    folder, _, _ = files
    result = run(runner, "eval", folder / "x.npy", folder / "y.npy", env={"CALIB_THREADS": value})
    one_line_error(result, "CALIB_THREADS", fragment)  # before: 1000 threads (3 GB), 10^23, Arabic-Indic 3 accepted


# ----------------------------------------------------------------------------------------- torch
def test_bf16_probabilities_get_the_tolerance_of_their_dtype(runner, tmp_path):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(9)
    probs32 = torch.softmax(torch.from_numpy(rng.normal(size=(300, 10)) * 2).float(), dim=1)
    bf16 = probs32.to(torch.bfloat16)
    sums = bf16.float().sum(dim=1).double().numpy()
    assert np.abs(sums - 1).max() > 1e-3  # the case of the issue: "sums to 0.998991"
    torch.save(bf16, tmp_path / "p.pt")
    np.save(tmp_path / "y.npy", rng.integers(0, 10, 300))
    result = run(runner, "eval", tmp_path / "p.pt", tmp_path / "y.npy", "--probs")
    assert result.exit_code == 0, result.output
    # float32 rows off by as much are still refused
    off = probs32.numpy().astype(np.float64)
    off[0] *= 1.004
    np.save(tmp_path / "off.npy", off.astype(np.float32))
    one_line_error(run(runner, "eval", tmp_path / "off.npy", tmp_path / "y.npy", "--probs"), "sum to 1")


def test_nested_dict_pt_lists_and_addresses_the_nested_keys(runner, files):
    torch = pytest.importorskip("torch")
    folder, logits, labels = files
    torch.save({"out": {"logits": torch.from_numpy(logits), "labels": torch.from_numpy(labels)}}, folder / "n.pt")
    # before: "holds several arrays (none)"
    one_line_error(run(runner, "eval", folder / "n.pt", folder / "y.npy"), "out.logits", "out.labels", "n.pt:KEY")
    result = run(runner, "eval", f"{folder}/n.pt:out.logits", f"{folder}/n.pt:out.labels", "-f", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["metrics"]["ece"] == calib.evaluate(logits, labels).metrics["ece"]


class Payload:
    """Not a tensor: never unpickled."""


def test_pickled_pt_says_what_to_do_in_one_whole_sentence(runner, files):
    import pickle

    torch = pytest.importorskip("torch")
    folder, _, _ = files
    torch.save({"model": Payload()}, folder / "obj.pt")
    with open(folder / "raw.pt", "wb") as f:
        pickle.dump({"a": 1}, f, protocol=4)  # torch warns about the protocol before refusing
    for name in ("obj.pt", "raw.pt"):
        line = one_line_error(run(runner, "eval", folder / name, folder / "y.npy"), name, "never unpickles", "torch.save")
        assert "two options" not in line and line.rstrip().endswith(")")  # before: torch's text cut mid-sentence


def test_logits_near_the_float64_limit_print_no_raw_warning(runner, files):
    folder, logits, labels = files
    big = logits / np.abs(logits).max() * 1.7e308  # x − max x overflows to −inf for some entries
    np.save(folder / "edge.npy", big)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a RuntimeWarning would be printed raw by the CLI
        result = run(runner, "eval", folder / "edge.npy", folder / "y.npy", "-f", "json")
    assert result.exit_code == 0 and "RuntimeWarning" not in result.stderr, result.stderr
    assert json.loads(result.stdout)["metrics"]["accuracy"] == pytest.approx(
        np.mean(big.argmax(axis=1) == labels), abs=0
    )


def _zip_with_flag(tmp_path, name, *, encrypted=False, method=None):
    """An .npz whose member is marked encrypted, or uses a compression method zipfile cannot read."""
    import io
    import zipfile

    buf = io.BytesIO()
    np.save(buf, np.array([[2.0, 0.0], [0.0, 1.0], [1.0, 0.0]]))
    plain = tmp_path / "plain.npz"
    with zipfile.ZipFile(plain, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("x.npy", buf.getvalue())
    data = bytearray(plain.read_bytes())
    local, central = data.find(b"PK\x03\x04"), data.find(b"PK\x01\x02")
    if encrypted:
        data[local + 6] |= 1
        data[central + 8] |= 1
    if method is not None:
        data[local + 8 : local + 10] = method.to_bytes(2, "little")
        data[central + 10 : central + 12] = method.to_bytes(2, "little")
    path = tmp_path / name
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize("kind", ["encrypted", "aes"])
def test_unreadable_npz_members_are_input_errors_not_bugs(runner, tmp_path, kind):
    """20.3: an encrypted member or an unsupported compression method exited 3 ("internal error")."""
    path = _zip_with_flag(tmp_path, f"{kind}.npz", encrypted=kind == "encrypted", method=99 if kind == "aes" else None)
    np.save(tmp_path / "y.npy", np.array([0, 1, 0]))
    result = runner.invoke(cli, ["eval", str(path), str(tmp_path / "y.npy")])
    assert result.exit_code == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{kind}.npz" in lines[0] and "internal error" not in lines[0]


# ------------------------------------------------------------- issue 32: exit codes and messages
def test_a_calibration_json_nested_too_deep_or_with_a_huge_number_is_named(runner, files):
    folder, _, _ = files
    (folder / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (folder / "digits.json").write_text('{"temperature": ' + "1" * 5000 + "}")
    # before: exit 3, RecursionError / "Exceeds the limit (4300 digits)"
    one_line_error(run(runner, "eval", folder / "x.npy", folder / "y.npy", "--temperature", folder / "deep.json"),
                   "deep.json", "nested too deeply")
    one_line_error(run(runner, "eval", folder / "x.npy", folder / "y.npy", "--calibrator", folder / "digits.json"),
                   "digits.json", "5000 digits", absent=("set_int_max_str_digits",))


def test_zero_dimensional_labels_are_named(runner, files):
    folder, _, _ = files
    np.save(folder / "y0.npy", np.array(1))
    # before: exit 3, "TypeError: len() of unsized object"
    one_line_error(run(runner, "eval", folder / "x.npy", folder / "y0.npy"), "y0.npy", "got shape ()")


def test_an_input_name_over_255_bytes_is_named(runner, files):
    folder, _, _ = files
    one_line_error(run(runner, "eval", folder / "x.npy", folder / ("a" * 300 + ".npy")),
                   "aaaa", "File name too long")  # before: exit 3, OSError from Path.is_dir


def test_an_input_in_a_folder_the_user_cannot_search_is_named(tmp_path):
    """Root is not refused by permissions: as root, the run is another user's (setpriv), or skipped."""
    import shutil
    import tempfile

    as_other = []
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("runs as root (permissions do not bite) and setpriv is missing")
        as_other = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"]
    folder = Path(tempfile.mkdtemp(dir="/tmp"))  # searchable by the other user, unlike pytest's tmp_path
    try:
        os.chmod(folder, 0o755)
        np.save(folder / "x.npy", np.eye(3) * 2)
        (folder / "locked").mkdir()
        np.save(folder / "locked" / "y.npy", np.arange(3))
        os.chmod(folder / "locked", 0)
        code = "import sys; sys.argv[0] = 'calib'; from calibrate_cli.cli import main; main()"
        this_calib = {**os.environ, "PYTHONPATH": str(Path(calib.__file__).parents[1])}  # cwd is elsewhere
        if as_other:  # the other user may not reach this checkout or its Python (a 0700 folder above them)
            probe = subprocess.run([*as_other, sys.executable, "-c", "import calibrate_cli.cli"], cwd=folder,
                                   env=this_calib, capture_output=True, text=True, timeout=120)
            if probe.returncode != 0:
                pytest.skip(f"the other user cannot import calib here: {probe.stderr.strip()[-200:]}")
        done = subprocess.run([*as_other, sys.executable, "-c", code, "eval", "x.npy", "locked/y.npy"],
                              cwd=folder, env=this_calib, capture_output=True, text=True, timeout=120)
        assert done.returncode == 2, done.stderr  # before: 3, "internal error: PermissionError"
        assert done.stderr.strip() == "Error: locked/y.npy: cannot read (Permission denied)", done.stderr
    finally:
        os.chmod(folder / "locked", 0o700)
        shutil.rmtree(folder)


@pytest.mark.parametrize("code, words", [(12, "out of memory"), (24, "too many open files")])
def test_out_of_memory_and_too_many_files_are_not_called_corrupt(runner, files, monkeypatch, code, words):
    import errno

    folder, _, _ = files
    assert code in (errno.ENOMEM, errno.EMFILE)

    def failing(*args, **kwargs):
        raise OSError(code, os.strerror(code))  # mmap under ulimit -v; every descriptor in use

    monkeypatch.setattr("calibrate_cli.data.io.np.load", failing)
    # before: "x.npy: truncated or corrupt .npy file ([Errno 12] Cannot allocate memory)"
    one_line_error(run(runner, "eval", folder / "x.npy", folder / "y.npy"), "x.npy", words, absent=("corrupt",))


@pytest.mark.parametrize("scores", ["x.npy", "x.csv"])
def test_too_many_open_files_in_a_real_process_is_named(files, scores):
    folder, logits, _ = files
    np.savetxt(folder / "x.csv", logits, delimiter=",")  # read by a module imported only now: EMFILE there
    code = (
        "import os, resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))\n"
        "sys.argv[0] = 'calib'\n"
        "from calibrate_cli.cli import main\n"
        "import calibrate_cli.cli.eval, calibrate_cli.cli.render\n"
        "held = []\n"
        "try:\n"
        "    while True: held.append(os.open(os.devnull, os.O_RDONLY))\n"
        "except OSError: pass\n"
        "main()\n"
    )
    done = subprocess.run([sys.executable, "-c", code, "eval", str(folder / scores), str(folder / "y.npy")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr  # before: 3, "internal error: OSError: [Errno 24]"
    assert "too many open files" in done.stderr and done.stderr.count("\n") == 1, done.stderr
    if scores == "x.npy":
        assert "x.npy: cannot read (too many open files" in done.stderr


def test_absurd_resample_counts_are_refused_before_any_work(runner, files):
    folder, _, _ = files
    result = run(runner, "eval", folder / "x.npy", folder / "y.npy", "--bootstrap", "1000000000")
    assert result.exit_code == 2 and "at most 1000000" in result.stderr  # before: memory grew until it ran out
    with pytest.raises(InputError, match="at most 1000000"):
        calib.bootstrap(np.zeros((4, 2)), np.array([0, 1, 0, 1]), n_resamples=10**9)


@pytest.mark.parametrize("method", ["vector", "matrix", "dirichlet"])
def test_fits_on_logits_near_the_float_limit_fail_in_one_line(runner, files, method):
    folder, logits, _ = files
    np.save(folder / "big.npy", logits / np.abs(logits).max() * 1e308)
    # before: exit 3, "ValueError: array must not contain infs or NaNs" (scipy)
    one_line_error(run(runner, "fit", folder / "big.npy", folder / "y.npy", "--method", method),
                   "big.npy", f"the {method} fit failed", "not finite")


def test_fitting_every_method_on_huge_logits_prints_no_raw_warning(runner, files):
    folder, logits, _ = files
    np.save(folder / "big.npy", logits / np.abs(logits).max() * 1e308)
    # the NLL passes run in worker threads, where the fit's np.errstate did not hold: a RuntimeWarning
    # there is an exception under this module's filterwarnings("error"); before: exit 3 (or the raw warning)
    result = run(runner, "fit", folder / "big.npy", folder / "y.npy", "--method", "all")
    assert result.exit_code in (0, 2) and "RuntimeWarning" not in result.stderr, result.stderr
    assert "failed vector" in result.stderr and "internal error" not in result.stderr


def test_tampered_calibration_files_give_no_raw_warning(runner, files):
    folder, logits, labels = files
    fitted = calib.calibrators.fit("ensemble_ts", logits, labels).to_dict()
    fitted["ensemble_ts"]["temperature"] = 1e-308  # z / T overflows: softmax of inf − inf was NaN
    (folder / "ets.json").write_text(json.dumps(fitted))
    result = run(runner, "eval", folder / "x.npy", folder / "y.npy", "--calibrator", folder / "ets.json", "-f", "json")
    assert result.exit_code == 0, result.stderr  # before: 2 RuntimeWarnings, then "x.npy: scores contain NaN"
    dirichlet = calib.calibrators.fit("dirichlet", logits, labels).to_dict()
    dirichlet["dirichlet"]["W"][0][0] = 1e308
    (folder / "d.json").write_text(json.dumps(dirichlet))
    # before: "RuntimeWarning: overflow encountered in matmul", then "x.npy: scores contain Inf"
    one_line_error(run(runner, "eval", folder / "x.npy", folder / "y.npy", "--calibrator", folder / "d.json"),
                   "x.npy", "the dirichlet calibration gives scores that are not finite", absent=("contain Inf",))


def test_shards_with_different_k_are_named_by_their_files(runner, tmp_path):
    rng = np.random.default_rng(3)
    for i, k in ((1, 3), (2, 4)):
        np.save(tmp_path / f"x_{i}.npy", rng.normal(size=(20, k)))
        np.save(tmp_path / f"y_{i}.npy", rng.integers(0, 3, 20))
    # before: "shard 2 of 2: K = 4 classes, but shard 1 of 2 has K = 3"
    one_line_error(run(runner, "eval", f"{tmp_path}/x_*.npy", f"{tmp_path}/y_*.npy"),
                   "shard 2 of 2 (", "x_2.npy): K = 4", "x_1.npy) has K = 3")


def test_hdf5_soft_links_are_followed_inside_the_file(runner, files):
    h5py = pytest.importorskip("h5py")
    folder, logits, labels = files
    with h5py.File(folder / "s.h5", "w") as f:
        f["data/logits"], f["data/labels"] = logits, labels
        f["logits"] = h5py.SoftLink("/data/logits")
        f["group"] = h5py.SoftLink("/data")
        f["dangling"] = h5py.SoftLink("/nowhere")
        f["elsewhere"] = h5py.ExternalLink("other.h5", "/logits")
    expected = calib.evaluate(logits, labels).metrics["ece"]
    for scores, y in (("s.h5:/logits", "s.h5:/data/labels"), ("s.h5:logits", "s.h5:/group/labels")):
        result = run(runner, "eval", folder / scores, folder / y, "-f", "json")
        assert result.exit_code == 0, result.stderr  # before: "no array named '/logits'"
        assert json.loads(result.stdout)["metrics"]["ece"] == expected
    one_line_error(run(runner, "eval", folder / "s.h5:/dangling", folder / "y.npy"), "soft link to /nowhere")
    one_line_error(run(runner, "eval", folder / "s.h5:/elsewhere", folder / "y.npy"), "external link to other.h5:/logits")


def test_a_corrupt_zarr_chunk_is_one_line_in_a_real_process(tmp_path):
    zarr = pytest.importorskip("zarr")
    rng = np.random.default_rng(0)
    root = zarr.open_group(str(tmp_path / "run.zarr"), mode="w")
    root.create_array("logits", data=rng.normal(size=(20_000, 4)).astype("f4"), chunks=(16, 4))
    root.create_array("labels", data=rng.integers(0, 4, 20_000), chunks=(16,))
    (tmp_path / "run.zarr" / "logits" / "c" / "0" / "0").write_bytes(b"garbage")
    code = "import sys; sys.argv[0] = 'calib'; from calibrate_cli.cli import main; main()"
    done = subprocess.run([sys.executable, "-c", code, "eval", f"{tmp_path}/run.zarr:logits", f"{tmp_path}/run.zarr:labels"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    # before: the line, then "Task was destroyed but it is pending!" for the chunks still being read
    assert done.stderr.count("\n") == 1 and "run.zarr:logits: truncated or corrupt Zarr store" in done.stderr, done.stderr


#: a .npy large enough to be memory-mapped, truncated by "another process" once calib has mapped it
TRUNCATED_WHILE_MAPPED = """
import os, sys
sys.argv[0] = "calib"
import calibrate_cli.data.io as io
real = io._load_npy
def load_then_truncate(path, label):
    array = real(path, label)
    if str(path).endswith("big.npy"):
        os.truncate(path, 4096)
    return array
io._load_npy = load_then_truncate
from calibrate_cli.cli import main
main()
"""


def test_a_mapped_input_truncated_mid_read_is_one_line_not_sigbus(tmp_path):
    from calibrate_cli.data import pages
    from calibrate_cli.data.io import MMAP_THRESHOLD_BYTES

    if getattr(pages, "_sigbus", None) is None:
        pytest.skip("the C extension calibrate_cli.data._sigbus is not built (no C compiler): SIGBUS keeps its 135")
    n = MMAP_THRESHOLD_BYTES // 80 + 1000
    np.save(tmp_path / "big.npy", np.random.default_rng(0).normal(size=(n, 10)))
    np.save(tmp_path / "y.npy", np.zeros(n, dtype=np.int64))
    done = subprocess.run([sys.executable, "-c", TRUNCATED_WHILE_MAPPED, "eval", str(tmp_path / "big.npy"),
                           str(tmp_path / "y.npy")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, (done.returncode, done.stderr)  # before: -7 (SIGBUS; 135 in a shell), silent
    assert done.stderr.count("\n") == 1 and "big.npy: the file got shorter while calib read it" in done.stderr
