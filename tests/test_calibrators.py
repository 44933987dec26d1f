"""The calibrator family (calibrate_cli.calibrators): interface, registry, saving and loading."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import naive_reference as naive

from calibrate_cli import InputError, evaluate
from calibrate_cli.calibrators import (
    CALIBRATORS,
    SEARCHES,
    Calibrator,
    PlattScaling,
    TemperatureScaling,
    VectorScaling,
    fit,
    from_dict,
    load_calibrator,
)
from calibrate_cli.calibrators.temperature_fit import fit_temperature


def synthetic(n=400, k=4, seed=0, scale=3.0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, n)
    logits = rng.normal(0, 1, (n, k))
    logits[np.arange(n), labels] += 1.5
    return scale * logits, labels


def naive_softmax(z):
    """Row softmax by a plain loop in float64 (no calib code)."""
    out = np.empty_like(z, dtype=np.float64)
    for i, row in enumerate(z):
        m = max(row)
        e = [math.exp(v - m) for v in row]
        out[i] = [v / sum(e) for v in e]
    return out


def binary(n=500, seed=4):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, n)
    return 3 * (labels - 0.5) + rng.normal(0, 1.5, n), labels


# ---------------------------------------------------------------------------------------------
# The registry


def test_the_registry_names_every_method_and_search():
    assert set(CALIBRATORS) == {"temperature", "platt", "vector", "histogram", "histogram_mass", "isotonic", "bbq", "beta",
                                "matrix", "dirichlet", "ensemble_ts", "top_label"}
    assert SEARCHES == ("grid", "nll", "platt", "vector")
    for name, cls in CALIBRATORS.items():
        assert issubclass(cls, Calibrator) and cls.name == name


def test_fit_by_name_equals_fit_temperature():
    logits, labels = synthetic()
    by_name = fit("vector", logits, labels)
    report = fit_temperature(logits, labels, search="vector")
    assert by_name.get_params() == {"w": report.parameters["w"], "b": report.parameters["b"]}
    assert fit("temperature", logits, labels, search="nll").temperature == fit_temperature(logits, labels, search="nll").temperature
    with pytest.raises(InputError, match="Expected `method` to be one of"):
        fit("bbq-not-a-method", logits, labels)


def test_a_fit_reports_how_it_went():
    logits, labels = synthetic()
    cal = TemperatureScaling(search="grid", objective="nll").fit(logits, labels)
    info = cal.fit_info_
    assert info.objective == "nll" and (info.n, info.k) == (400, 4)
    assert info.at_identity == pytest.approx(evaluate(logits, labels).metrics["nll"], abs=1e-12)
    assert info.value <= info.at_identity and len(info.curve) == 100


# ---------------------------------------------------------------------------------------------
# Transforms, checked against hand calculations


def test_transforms_by_hand():
    z = np.array([[2.0, -1.0, 0.5], [0.0, 3.0, 1.0]])
    assert np.array_equal(TemperatureScaling(2.0).transform(z), z / 2.0)
    vec = VectorScaling([1.0, 2.0, 0.5], [0.1, 0.0, -0.1])
    assert np.allclose(vec.transform(z), [[2.1, -2.0, 0.15], [0.1, 6.0, 0.4]], atol=1e-15)
    platt = PlattScaling(2.0, -1.0)
    s = np.array([0.5, 1.0, -2.0])
    assert np.allclose(platt.transform(s), [0.0, 1.0, -5.0])  # a·s + b
    two = np.stack([np.zeros(3), s], axis=1)  # the same problem as (N, 2) logits
    assert np.allclose(platt.predict_proba(two)[:, 1], 1 / (1 + np.exp(-(2 * s - 1))), atol=1e-15)
    assert np.allclose(vec.predict_proba(z), naive_softmax(vec.transform(z)), atol=1e-15)


def test_apply_keeps_the_kind():
    logits, labels = synthetic(n=50, k=3)
    probs = naive_softmax(logits)
    cal = fit("vector", probs, labels, input_kind="probs")
    from_probs = cal.apply(probs, "probs")  # through log p (w ⊙ z is not shift-invariant: log p, not z)
    w, b = np.array(cal.get_params()["w"]), np.array(cal.get_params()["b"])
    assert np.allclose(from_probs, naive_softmax(w * np.log(probs) + b), atol=1e-12)
    assert np.array_equal(cal.predict_proba(probs), cal.apply(probs))  # by default, the fitted kind
    assert np.allclose(from_probs.sum(axis=1), 1.0)
    # fitted on logits, w ⊙ z + b is another map of log p: refused, not a silent wrong number
    with pytest.raises(InputError, match="fitted on logits"):
        fit("vector", logits, labels).apply(probs, "probs")
    # the identity returns the very same scores (T = 1: no copy, no renormalisation)
    assert TemperatureScaling(1.0).apply(probs, "probs") is probs
    with pytest.raises(InputError, match="scores"):
        cal.apply(np.full((2, 3), np.nan))


def test_unfitted_and_wrong_k_are_clear_errors():
    with pytest.raises(InputError, match="not fitted yet"):
        VectorScaling().transform(np.zeros((2, 3)))
    with pytest.raises(InputError, match="not fitted yet"):
        PlattScaling().to_dict()
    logits, labels = synthetic(k=4)
    with pytest.raises(InputError, match="fitted on K = 4"):
        fit("temperature", logits, labels, search="nll").transform(logits[:, :3])


# ---------------------------------------------------------------------------------------------
# Saving and loading: JSON, never pickle


@pytest.mark.parametrize("method, options", [("temperature", {"search": "nll"}), ("vector", {}), ("platt", {})])
def test_to_dict_round_trips_through_json(method, options):
    if method == "platt":
        logits, labels = binary()
    else:
        logits, labels = synthetic()
    cal = fit(method, logits, labels, **options)
    saved = json.loads(json.dumps(cal.to_dict()))
    assert saved["method"] == method and saved["k"] == (2 if method == "platt" else 4)
    back = load_calibrator(saved)
    assert type(back) is type(cal) and back.k == cal.k
    assert np.array_equal(back.transform(logits), cal.transform(logits))


def test_the_json_of_calib_temperature_is_a_saved_calibrator():
    logits, labels = synthetic()
    for search in ("grid", "nll", "vector"):
        report = fit_temperature(logits, labels, search=search)
        document = {"temperature": report.temperature, "search": search, "calibration": report.to_dict()}
        cal = load_calibrator(json.loads(json.dumps(document)))
        assert np.array_equal(cal.transform(logits), report.transform(logits))
        assert from_dict(report.to_dict()).label == report.label


def test_old_files_with_only_a_temperature():
    cal = load_calibrator({"temperature": 1.5})
    assert cal.temperature == 1.5 and cal.k is None  # any K
    assert np.array_equal(cal.transform(np.ones((2, 7))), np.ones((2, 7)) / 1.5)
    assert load_calibrator(2).temperature == 2.0 and load_calibrator("0.5").temperature == 0.5


@pytest.mark.parametrize(
    "document, message",
    [
        ({"temperature": True}, "temperature must be a number, got true"),
        ({"temperature": "2"}, 'temperature must be a number, got "2"'),
        ({"temperature": float("inf")}, "temperature must be finite and > 0"),
        ({"temperature": 0}, "temperature must be finite and > 0"),
        ({"temperature": 1.0, "k": 1}, '"k" must be a number of classes'),
        ({"method": "platt", "platt": {"a": 1.0}}, "platt b must be a number, got null"),
        ({"method": "platt", "k": 3, "platt": {"a": 1.0, "b": 0.0}}, "binary problems"),
        ({"method": "vector", "vector": {"w": [1, "x"], "b": [0, 0]}}, 'vector w[1] must be a number, got "x"'),
        ({"method": "vector", "k": 3, "vector": {"w": [1, 1], "b": [0, 0]}}, '"k" is 3'),
        ({"search": "histogram"}, "unknown search 'histogram'"),
    ],
)
def test_bad_saved_parameters(document, message):
    with pytest.raises(InputError, match=None) as caught:
        load_calibrator(document)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_bool_is_not_a_temperature():
    for value in (True, False):
        with pytest.raises(InputError, match="must be a number"):
            load_calibrator(value)
        with pytest.raises(InputError, match="must be a number"):
            TemperatureScaling(value)


def test_a_saved_platt_fit_loads_as_platt_without_a_temperature(tmp_path):
    logits, labels = binary()
    path = tmp_path / "p.json"
    path.write_text(json.dumps(fit("platt", logits, labels).to_dict()))
    assert load_calibrator(str(path)).temperature is None
    assert load_calibrator(str(path)).label.startswith("Platt (a = ")


def test_parameter_rows_and_identity():
    assert TemperatureScaling(0.5).parameter_rows() == [("temperature", 0.5)]
    assert PlattScaling(2.0, -1.0).parameter_rows() == [("platt_a", 2.0), ("platt_b", -1.0)]
    assert VectorScaling([1, 2], [3, 4]).parameter_rows() == [
        ("vector_w_0", 1.0), ("vector_w_1", 2.0), ("vector_b_0", 3.0), ("vector_b_1", 4.0)
    ]
    z = np.array([[1.0, -2.0, 0.25]])
    for cls in (TemperatureScaling, PlattScaling, VectorScaling):
        identity = cls.identity(2 if cls is PlattScaling else 3)
        zz = z[:, :2] if cls is PlattScaling else z
        assert np.allclose(naive_softmax(identity.transform(zz)), naive_softmax(zz), atol=1e-15)


# ---------------------------------------------------------------------------------------------
# docs/contributing.md: adding a calibrator is one module and one line in the registry

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "calibrate_cli"


def _walkthrough_module() -> str:
    section = (ROOT / "docs" / "contributing.md").read_text().split("## Adding a calibrator", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 1
    return blocks[0]


_END_TO_END = r"""
import json, sys
import numpy as np
from click.testing import CliRunner
from calibrate_cli.cli import cli
import calibrate_cli as calib

f = sys.argv[1]
runner = CliRunner()
def run(*args):
    r = runner.invoke(cli, [str(a) for a in args])
    return {"code": r.exit_code, "out": r.stdout, "err": r.stderr}
fitted = run("temperature", f"{f}/val.npy", f"{f}/val_y.npy", "--search", "histogram", "--n-bins", "10",
             "--test", f"{f}/test.npy", f"{f}/test_y.npy", "-o", f"{f}/h.json")
loaded = calib.load_calibrator(f"{f}/h.json")
print(json.dumps({
    "fitted": fitted,
    "help": run("temperature", "--help"),
    "eval": run("eval", f"{f}/test.npy", f"{f}/test_y.npy", "--calibrator", f"{f}/h.json", "--n-bins", "10", "-f", "json"),
    "plot": run("plot", f"{f}/test.npy", f"{f}/test_y.npy", "--calibrator", f"{f}/h.json", "-o", f"{f}/h.svg"),
    "csv": run("temperature", f"{f}/val.npy", f"{f}/val_y.npy", "--search", "histogram", "-f", "csv"),
    "bad": run("temperature", f"{f}/val.npy", f"{f}/val_y.npy", "--search", "histogram", "--objective", "nll"),
    "loaded": [loaded.name, loaded.k],
    "by_name": calib.calibrators.fit("histogram", np.load(f"{f}/val.npy"), np.load(f"{f}/val_y.npy"), n_bins=10).to_dict(),
}))
"""


def _naive_histogram(logits, labels, n_bins):
    """θ_kb by plain loops: the share of class k among the samples whose p_k is in bin b."""
    probs = naive.softmax_rows(logits)
    k = len(probs[0])
    values = []
    for c in range(k):
        count, hits = [0] * n_bins, [0] * n_bins
        for row, y in zip(probs, labels):
            b = naive.equal_width_bin(row[c], n_bins)
            count[b] += 1
            hits[b] += int(y == c)
        values.append([hits[b] / count[b] if count[b] else (b + 0.5) / n_bins for b in range(n_bins)])
    return values


def test_adding_the_walkthrough_calibrator_is_the_whole_change(tmp_path):
    copy = tmp_path / "pkg" / "calibrate_cli"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "calibrators" / "histogram.py").write_text(_walkthrough_module())
    registry = copy / "calibrators" / "registry.py"
    source = registry.read_text()
    shipped = ("from .histogram import EqualMassHistogramBinning, HistogramBinning\n",
               "        HistogramBinning,\n", "        EqualMassHistogramBinning,\n")
    for line in shipped:  # the package ships a fuller histogram binning: take it out, then add the walkthrough's
        assert source.count(line) == 1
        source = source.replace(line, "")
    old = "(TemperatureScaling, PlattScaling, VectorScaling)"
    assert source.count(old) == 1 and source.count("from .platt import PlattScaling\n") == 1
    source = source.replace(old, "(TemperatureScaling, PlattScaling, VectorScaling, HistogramBinning)")
    registry.write_text(source.replace("from .platt import", "from .histogram import HistogramBinning\nfrom .platt import"))
    rng = np.random.default_rng(3)
    labels = rng.integers(0, 4, 1200)
    logits = rng.normal(size=(1200, 4)) * 3
    logits[np.arange(1200), labels] += 2
    for name, array in {"val": logits[:800], "val_y": labels[:800], "test": logits[800:], "test_y": labels[800:]}.items():
        np.save(tmp_path / f"{name}.npy", array)
    proc = subprocess.run(
        [sys.executable, "-c", _END_TO_END, str(tmp_path)], capture_output=True, text=True, cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path / "pkg"), "PATH": "/usr/bin:/bin", "COLUMNS": "200"},
    )
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    assert r["fitted"]["code"] == 0, r["fitted"]["err"]
    saved = json.loads((tmp_path / "h.json").read_text())
    expected = _naive_histogram(logits[:800], labels[:800], 10)
    assert np.allclose(saved["calibration"]["histogram"]["values"], expected, atol=1e-15)
    assert "histogram: histogram binning" in r["help"]["out"]
    assert r["eval"]["code"] == 0 and json.loads(r["eval"]["out"])["metrics"] == saved["test"]["after"]
    assert r["plot"]["code"] == 0 and (tmp_path / "h.svg").exists()
    assert "histogram_values_3_14," in r["csv"]["out"]
    assert r["bad"]["code"] == 2 and "the histogram search minimises the ECE" in r["bad"]["err"]
    assert "use --search grid, or drop --objective" in r["bad"]["err"]  # the CLI's hint
    assert r["loaded"] == ["histogram", 4]
    assert r["by_name"]["histogram"] == saved["calibration"]["histogram"]


def test_apply_as_read_is_temperature_scaling_of_logits_only():
    """Only temperature scaling has a view computed as read: None for the other maps, for probabilities
    and for another K than the fitted one (apply then converts, or names the problem); a T at which
    the logits overflow is refused with apply's error."""
    from calibrate_cli.calibrators import TemperatureScaling, VectorScaling
    from calibrate_cli.errors import InputError
    from calibrate_cli.data.predictions import as_predictions

    rng = np.random.default_rng(2)
    x, y = rng.normal(size=(200, 3)) * 2, rng.integers(0, 3, 200)
    logits = as_predictions(x, y, "logits")
    scaler = TemperatureScaling(2.0)
    view = scaler.apply_as_read(logits)
    assert np.array_equal(np.asarray(view.scores), x / 2.0)  # the same division per value, by hand
    probs = as_predictions(np.full((4, 3), 1 / 3), np.zeros(4, dtype=int), "probs")
    assert scaler.apply_as_read(probs) is None
    fitted = TemperatureScaling(search="nll").fit(x, y)
    assert fitted.apply_as_read(as_predictions(rng.normal(size=(5, 4)), np.zeros(5, dtype=int), "logits")) is None
    assert VectorScaling().fit(x, y).apply_as_read(logits) is None
    with pytest.raises(InputError, match="overflow"):
        TemperatureScaling(1e-310).apply_as_read(as_predictions(np.full((2, 2), 1e10), np.zeros(2, dtype=int), "logits"))
