"""Hostile input to ``calib eval`` (issue 20, "Done when"): random bytes, random .npy headers and
random CSV text. Whatever the input: exit 0 or 2, on 2 exactly one stderr line ``Error: ...``, never
a traceback, and no file left behind (neither the -o report of a failed run nor a temporary)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
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
