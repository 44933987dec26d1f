"""Hostile input to ``calib eval``: random bytes, random .npy headers and
random CSV text. Whatever the input: exit 0 or 2, on 2 exactly one stderr line ``Error: ...``, never
a traceback, and no file left behind (neither the -o report of a failed run nor a temporary). Then the
kinds that used to give a silent wrong number: refused in one line, or the right number."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from calibrate_cli.cli import cli

NPY_MAGIC = b"\x93NUMPY"

random_bytes = st.binary(max_size=300).map(lambda b: ("npy", b))

random_npy_header = st.builds(
    lambda version, descr, fortran, shape, pad, body: (
        "npy",
        _npy(version, "{'descr': %s, 'fortran_order': %s, 'shape': %s, }" % (descr, fortran, shape), pad, body),
    ),
    st.sampled_from([(1, 0), (2, 0), (3, 0), (0, 9)]),
    st.sampled_from(["'<f8'", "'<f4'", "'<i8'", "'|b1'", "'<c16'", "'O'", "'<U3'", "'>f8'", "'<f2'", "[('a', '<f8')]", "'x'", "1"]),
    st.sampled_from(["False", "True", "0", "'no'"]),
    st.one_of(
        st.tuples(st.integers(-2, 10)).map(lambda t: f"({t[0]},)"),
        st.tuples(st.integers(-2, 12), st.integers(-2, 5)).map(lambda t: f"({t[0]}, {t[1]})"),
        st.sampled_from(["()", "(10**13,)", "(3, 3, 3)", "[4, 3]", "'x'", "(4, 3"]),
    ),
    st.integers(0, 40),
    st.binary(max_size=200),
)

csv_cell = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-3, 12).map(str),
    st.sampled_from(["", " ", "a", "nan", "1e999", "-inf", "0x10", "1,5", '"', "é", "\x00"]),
)
random_csv = st.lists(st.lists(csv_cell, min_size=1, max_size=5), min_size=0, max_size=12).map(
    lambda rows: ("csv", "\n".join(",".join(row) for row in rows).encode("utf-8", "surrogatepass"))
)
random_text = st.text(max_size=200).map(lambda t: ("csv", t.encode("utf-8", "surrogatepass")))


def _npy(version, header: str, pad: int, body: bytes) -> bytes:
    text = (header + " " * pad + "\n").encode("latin-1")
    major = version[0]
    size = len(text).to_bytes(2 if major == 1 else 4, "little")
    return NPY_MAGIC + bytes(version) + size + text + body


@settings(max_examples=int(os.environ.get("CALIB_FUZZ_EXAMPLES", "100")), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=st.one_of(random_bytes, random_npy_header, random_csv, random_text), with_labels=st.booleans())
def test_eval_on_hostile_input_exits_0_or_2_with_one_line(runner, case, with_labels):
    kind, payload = case
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        scores = folder / f"scores.{kind}"
        scores.write_bytes(payload)
        labels = folder / "labels.npy"
        np.save(labels, np.zeros(4, dtype=np.int64))
        out = folder / "report.json"
        args = [str(scores)] + ([str(labels)] if with_labels else ["--label-col", "0"])
        before = set(os.listdir(folder))
        result = runner.invoke(cli, ["eval", *args, "-o", str(out)])
        assert result.exit_code in (0, 2), (result.exit_code, result.stderr, result.exc_info)
        assert "Traceback" not in result.stderr and "internal error" not in result.stderr, result.stderr
        after = set(os.listdir(folder))
        if result.exit_code == 2:
            err = result.stderr.strip()
            assert err.count("\n") == 0 and err.startswith("Error: "), err
            assert after == before, after - before
        else:
            assert after == before | {"report.json"}, after - before


# ------------------------------------------------- issue 32: hostile calibration files (--calibrator)
json_scalar = st.one_of(
    st.floats(allow_nan=False).map(repr), st.integers(-10, 10).map(str),
    st.sampled_from(["1e308", "-1e308", "1e-308", "5e-324", "0", "null", "true", '"x"', "1" * 5000, "1." + "1" * 5000]),
)
json_document = st.one_of(
    st.builds(  # a saved calibration with one parameter replaced
        lambda method, value: {
            "temperature": '{"method": "temperature", "k": 3, "temperature": %s}' % value,
            "ensemble_ts": '{"method": "ensemble_ts", "k": 3, "ensemble_ts": {"temperature": %s, "weights": [0.5, 0.5, 0]}}' % value,
            "vector": '{"method": "vector", "k": 3, "vector": {"w": [%s, 1, 1], "b": [0, 0, 0]}}' % value,
            "dirichlet": '{"method": "dirichlet", "k": 3, "dirichlet": {"W": [[%s, 0, 0], [0, 1, 0], [0, 0, 1]], "b": [0, 0, 0], "lambda": 0, "mu": 0}}' % value,
        }[method],
        st.sampled_from(["temperature", "ensemble_ts", "vector", "dirichlet"]), json_scalar,
    ),
    st.integers(1, 200_000).map(lambda depth: "[" * depth + "]" * depth),  # nested past the recursion limit
    st.text(max_size=100),
)


@settings(max_examples=int(os.environ.get("CALIB_FUZZ_EXAMPLES", "100")) // 2, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(document=json_document, huge=st.booleans())
def test_eval_with_a_hostile_calibration_file_exits_0_or_2_with_one_line(runner, document, huge):
    import warnings

    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        rng = np.random.default_rng(0)
        np.save(folder / "x.npy", rng.normal(size=(30, 3)) * (1e300 if huge else 2.0))
        np.save(folder / "y.npy", rng.integers(0, 3, 30))
        (folder / "c.json").write_text(document, encoding="utf-8", errors="surrogatepass")
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a raw numpy warning would reach the user
            result = runner.invoke(cli, ["eval", str(folder / "x.npy"), str(folder / "y.npy"), "--calibrator",
                                         str(folder / "c.json"), "-f", "json"])
        assert result.exit_code in (0, 2), (result.exit_code, result.stderr, result.exc_info)
        assert "Traceback" not in result.stderr and "internal error" not in result.stderr, result.stderr
        if result.exit_code == 2:
            err = result.stderr.strip()
            assert err.count("\n") == 0 and err.startswith("Error: "), err


# ------------------------------------------------- inputs that used to give a silent wrong number (issue 32)


def _model(rng, n, k):
    labels = rng.integers(0, k, n)
    logits = rng.normal(size=(n, k)) * 2
    logits[np.arange(n), labels] += 1.5
    return logits, labels


def _one_line_refusal(result, *words):
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    err = result.stderr.strip()
    assert err.count("\n") == 0 and err.startswith("Error: "), err
    for word in words:
        assert word in err, (word, err)


def _probabilities_as_logits(runner, folder, rng, n, k):
    logits, labels = _model(rng, n, k)
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    np.save(folder / "p.npy", p / p.sum(axis=1, keepdims=True))
    np.save(folder / "y.npy", labels)
    _one_line_refusal(runner.invoke(cli, ["eval", str(folder / "p.npy"), str(folder / "y.npy")]),
                      "p.npy", "look like probabilities")


def _dwarfing_logits(runner, folder, rng, n, k):
    logits, labels = _model(rng, n, k)
    logits[:, rng.integers(0, k)] = float(rng.choice([3e17, 1e300, 1e308]))
    np.save(folder / "z.npy", logits)
    np.save(folder / "y.npy", labels)
    result = runner.invoke(cli, ["eval", str(folder / "z.npy"), str(folder / "y.npy"), "-f", "json"])
    assert result.exit_code == 0, result.stderr
    ranks = [(row > row[y]).sum() + ((row == row[y]) & (np.arange(k) < y)).sum() for row, y in zip(logits, labels)]
    assert json.loads(result.stdout)["metrics"]["top5_accuracy"] == np.mean(np.array(ranks) < 5)


def _index_column(runner, folder, rng, n, k):
    logits, labels = _model(rng, n, k)
    name = str(rng.choice(["id", "index", "ID", "row"]))
    header = ",".join([name] + [f"logit_{j}" for j in range(k)] + ["label"])
    lines = [",".join([str(i)] + [repr(float(v)) for v in row] + [str(y)]) for i, (row, y) in enumerate(zip(logits, labels))]
    (folder / "preds.csv").write_text(header + "\n" + "\n".join(lines) + "\n")
    _one_line_refusal(runner.invoke(cli, ["eval", str(folder / "preds.csv"), "--labels", "label"]), "preds.csv", name)


def _numbered_shards(runner, folder, rng, n, k):
    logits, labels = _model(rng, n, k)
    (folder / "x").mkdir()
    (folder / "y").mkdir()
    parts = np.array_split(np.arange(n), 11)
    for i, rows in enumerate(parts, start=1):
        np.save(folder / "x" / f"x_{i}.npy", logits[rows])
        np.save(folder / "y" / f"y_{i:02d}.npy", labels[rows])
    np.save(folder / "all.npy", logits)
    np.save(folder / "all_y.npy", labels)
    sharded = runner.invoke(cli, ["eval", str(folder / "x"), str(folder / "y"), "-f", "json"])
    whole = runner.invoke(cli, ["eval", str(folder / "all.npy"), str(folder / "all_y.npy"), "-f", "json"])
    assert sharded.exit_code == 0 and whole.exit_code == 0, sharded.stderr + whole.stderr
    assert json.loads(sharded.stdout)["metrics"]["accuracy"] == json.loads(whole.stdout)["metrics"]["accuracy"]


def _missing_zarr_chunk(runner, folder, rng, n, k):
    zarr = pytest.importorskip("zarr")
    logits, labels = _model(rng, n, k)
    root = zarr.open_group(str(folder / "run.zarr"), mode="w")
    root.create_array("logits", data=logits, chunks=(8, k))
    root.create_array("labels", data=labels, chunks=(16,))
    chunks = sorted(p for p in (folder / "run.zarr" / "logits").rglob("*") if p.is_file() and p.name != "zarr.json")
    chunks[int(rng.integers(0, len(chunks)))].unlink()
    _one_line_refusal(runner.invoke(cli, ["eval", f"{folder / 'run.zarr'}:logits", f"{folder / 'run.zarr'}:labels"]),
                      "run.zarr")


SILENT_BEFORE = [_probabilities_as_logits, _dwarfing_logits, _index_column, _numbered_shards, _missing_zarr_chunk]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(SILENT_BEFORE), n=st.integers(24, 120), k=st.integers(6, 12), seed=st.integers(0, 2**32 - 1))
def test_inputs_that_were_silently_wrong_are_refused_or_right(runner, kind, n, k, seed):
    """Probabilities taken for logits, dwarfing logits, index columns, numbered shards and Zarr chunks
    that are gone: each is refused in one line naming the file, or gives the right number."""
    with tempfile.TemporaryDirectory() as folder:
        kind(runner, Path(folder), np.random.default_rng(seed), n, k)
