"""`calib eval` on shards: quoted globs or directories, paired in sorted order, evaluated as the
concatenation. Shards and one file (and Dask's workers and this process) are two paths: their JSON
reports agree within the numeric contract of tests/libm.py (see tests/test_shards.py), every float
within METRIC_REL; counts, flags, settings and undefined (null) values are equal."""

import json
import subprocess
import sys

import numpy as np
import pytest
from libm import assert_agree

from calibrate_cli.cli import cli
from cli_helpers import one_line_error  # noqa: E402


@pytest.fixture()
def shards(tmp_path):
    rng = np.random.default_rng(11)
    n, k = 900, 8
    labels = rng.integers(0, k, n)
    logits = rng.normal(scale=2.0, size=(n, k)).astype(np.float32)
    logits[np.arange(n), labels] += 1.5
    (tmp_path / "preds").mkdir()
    (tmp_path / "labels").mkdir()
    for i, (a, b) in enumerate([(0, 200), (200, 250), (250, 600), (600, 900)]):
        np.save(tmp_path / "preds" / f"x_{i:02d}.npy", logits[a:b])
        np.save(tmp_path / "labels" / f"y_{i:02d}.npy", labels[a:b])
    np.save(tmp_path / "all_logits.npy", logits)
    np.save(tmp_path / "all_labels.npy", labels)
    return tmp_path


def run(runner, *args):
    return runner.invoke(cli, ["eval", *(str(a) for a in args)])


def as_json(result):
    assert result.exit_code == 0, (result.output, result.stderr)
    return json.loads(result.stdout)


def assert_same(sharded: dict, whole: dict):
    assert sharded["n"] == whole["n"] == 900
    # two paths: the metrics, bin tables (counts equal) and per-class ECEs within the contract
    assert_agree(sharded["metrics"], whole["metrics"], where="metrics")
    assert_agree(sharded["bins"], whole["bins"], where="bins")
    assert_agree(sharded["classwise_ece_per_class"], whole["classwise_ece_per_class"], where="classwise_ece_per_class")


def whole_json(runner, d, *extra):
    return as_json(run(runner, d / "all_logits.npy", d / "all_labels.npy", "--format", "json", *extra))


def test_globs_equal_one_file(runner, shards):
    d = shards
    got = as_json(run(runner, d / "preds" / "x_*.npy", d / "labels" / "y_*.npy", "--format", "json"))
    assert_same(got, whole_json(runner, d))
    assert got["inputs"]["scores"] == str(d / "preds" / "x_*.npy")


def test_directories_equal_one_file(runner, shards):
    d = shards
    (d / "preds" / "notes.txt").write_text("not a shard")
    got = as_json(run(runner, d / "preds", d / "labels", "--format", "json", "--n-bins", "10"))
    assert_same(got, whole_json(runner, d, "--n-bins", "10"))


def test_bootstrap_on_shards_equals_one_file(runner, shards):
    d = shards
    extra = ("--bootstrap", "30", "--seed", "1")
    got = as_json(run(runner, d / "preds", d / "labels", "--format", "json", *extra))
    whole = whole_json(runner, d, *extra)
    # the same draws over values of two paths: the ends within the contract, the rest equal
    assert_agree(got["intervals"]["ece"], whole["intervals"]["ece"], where="ece")
    assert_agree(got["intervals"]["adaece"], whole["intervals"]["adaece"], where="adaece")


def test_temperature_applies_to_every_shard(runner, shards):
    d = shards
    got = as_json(run(runner, d / "preds", d / "labels", "--format", "json", "--temperature", "1.7"))
    assert_same(got, whole_json(runner, d, "--temperature", "1.7"))


def test_shard_counts_must_match(runner, shards):
    d = shards
    (d / "labels" / "y_03.npy").unlink()
    result = run(runner, d / "preds" / "x_*.npy", d / "labels" / "y_*.npy")
    one_line_error(result, "(a pattern matching 4 file(s))", "(a pattern matching 3 file(s))", "as many shards")


def test_glob_against_one_file_is_a_count_mismatch(runner, shards):
    d = shards
    result = run(runner, d / "preds" / "x_*.npy", d / "all_labels.npy")
    one_line_error(result, "(a pattern matching 4 file(s))", "all_labels.npy (one file)")
    result = run(runner, d / "preds", d / "all_labels.npy")
    one_line_error(result, "(a directory of 4 .npy file(s))", "as many shards")


def test_each_pair_must_have_the_same_n(runner, shards):
    d = shards
    np.save(d / "labels" / "y_02.npy", np.zeros(349, dtype=np.int64))
    result = run(runner, d / "preds", d / "labels")
    one_line_error(result, "shard 3 of 4", "y_02.npy: 349 labels", "x_02.npy has 350 rows")


def test_pattern_without_files(runner, shards):
    d = shards
    one_line_error(run(runner, d / "preds" / "z_*.npy", d / "labels"), "z_*.npy: no file matches")
    (d / "empty").mkdir()
    one_line_error(run(runner, d / "empty", d / "labels"), "without .npy files")


def test_scheduler_needs_dask_engine(runner, shards):
    d = shards
    result = run(runner, d / "preds", d / "labels", "--scheduler", "tcp://127.0.0.1:8786")
    assert result.exit_code == 2 and "--scheduler needs --engine dask" in result.stderr


def test_dask_engine_refuses_bootstrap(runner, shards):
    d = shards
    result = run(runner, d / "preds", d / "labels", "--engine", "dask", "--bootstrap", "100")
    assert result.exit_code == 2 and "drop --engine dask" in result.stderr


def test_missing_dask_is_one_line(runner, shards, monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed → ImportError
    d = shards
    result = run(runner, d / "preds", d / "labels", "--engine", "dask")
    one_line_error(result, "--engine dask needs dask[distributed]", "pip install")


def test_dask_engine_equals_local(runner, shards):
    pytest.importorskip("distributed")
    d = shards
    local = as_json(run(runner, d / "preds", d / "labels", "--format", "json"))
    got = as_json(run(runner, d / "preds" / "x_*.npy", d / "labels" / "y_*.npy", "--format", "json", "--engine", "dask"))
    # Dask's workers are other processes (other machines in a real cluster): within the contract
    assert_agree(got["metrics"], local["metrics"], where="metrics")
    assert_agree(got["bins"], local["bins"], where="bins")
    single = as_json(run(runner, d / "all_logits.npy", d / "all_labels.npy", "--format", "json", "--engine", "dask"))
    assert_agree(single["metrics"], whole_json(runner, d)["metrics"], where="metrics")
    bad = d / "labels" / "y_01.npy"
    np.save(bad, np.zeros(3, dtype=np.int64))
    one_line_error(run(runner, d / "preds", d / "labels", "--engine", "dask"), "shard 2 of 4", "y_01.npy")


def test_unreachable_scheduler_is_one_line(runner, shards, monkeypatch):
    pytest.importorskip("distributed")
    import calibrate_cli.engine.shards

    monkeypatch.setattr(calibrate_cli.engine.shards, "CONNECT_TIMEOUT_S", 1)
    d = shards
    result = run(runner, d / "preds", d / "labels", "--engine", "dask", "--scheduler", "tcp://127.0.0.1:9")
    one_line_error(result, "--scheduler tcp://127.0.0.1:9: cannot reach the Dask scheduler")


@pytest.mark.parametrize("address, words", [
    ("garbage", "not HOST:PORT"),                 # before: exit 3, "missing port number"
    ("tcp://127.0.0.1", "not HOST:PORT"),
    (":abc", "not HOST:PORT"),                   # before: exit 3, "invalid literal for int()"
    ("inproc://", "inside this very process"),   # before: exit 3, "not enough values to unpack"
    ("tls://127.0.0.1:1", "TLS certificates"),   # before: exit 3, TypeError (no ssl_context)
    ("ucx://127.0.0.1:1", "UCX"),                # before: exit 3, "Can't instantiate abstract class"
    ("file:///tmp/x", "unknown scheme 'file://'"),
    ("tcp://127.0.0.1:70000", "not HOST:PORT"),
])
def test_a_malformed_scheduler_address_is_one_line(runner, shards, address, words):
    pytest.importorskip("distributed")
    if address.startswith("ucx") and __import__("importlib").util.find_spec("distributed_ucxx"):
        pytest.skip("UCX support is installed")
    result = run(runner, shards / "preds", shards / "labels", "--engine", "dask", "--scheduler", address)
    one_line_error(result, f"--scheduler {address}:", words)


def _server(answer: bytes):
    """A local TCP server that accepts connections and sends ``answer`` (nothing: it never answers)."""
    import socket
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held = []

    def serve():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            held.append(conn)
            if answer:
                conn.sendall(answer)

    threading.Thread(target=serve, daemon=True).start()
    return server, held


@pytest.mark.parametrize("answer, words", [
    (b"", "no answer within 1 s"),                                            # before: still waiting after 500 s
    (np.random.default_rng(0).bytes(4096), "not as a Dask scheduler"),   # before: "out of memory"
])
def test_a_server_that_is_not_a_scheduler_is_one_line_within_the_timeout(runner, shards, answer, words):
    import time

    pytest.importorskip("distributed")
    server, held = _server(answer)
    address = f"tcp://127.0.0.1:{server.getsockname()[1]}"
    try:
        started = time.monotonic()
        result = run(runner, shards / "preds", shards / "labels", "--engine", "dask", "--scheduler", address,
                     "--scheduler-timeout", "1")
        elapsed = time.monotonic() - started
    finally:
        server.close()
        for conn in held:
            conn.close()
    one_line_error(result, f"--scheduler {address}: cannot reach the Dask scheduler", words)
    assert elapsed < 30, elapsed


def test_dask_shard_error_is_one_line_in_a_real_process(shards):
    """No worker log ("Compute Failed", tracebacks) on the real stderr: only calib's line."""
    pytest.importorskip("distributed")
    d = shards
    np.save(d / "labels" / "y_03.npy", np.zeros(5, dtype=np.int64))
    calib = [sys.executable, "-c", "import sys; sys.argv[0] = 'calib'; from calibrate_cli.cli import main; main()"]
    done = subprocess.run(
        [*calib, "eval", str(d / "preds"), str(d / "labels"), "--engine", "dask"], capture_output=True, text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "shard 4 of 4" in lines[0] and "y_03.npy: 5 labels" in lines[0], done.stderr


#: a wrapped dask_client that, like a worker close timing out on a loaded machine, leaves a future
#: whose exception nobody reads; it is finalised at interpreter exit, after calib's error line
LEAKY_CLUSTER = """
import asyncio, atexit, contextlib, sys
import calibrate_cli.engine.shards as shards
real = shards.dask_client
leaked = []
atexit.register(leaked.clear)

@contextlib.contextmanager
def leaky(*args, **kwargs):
    try:
        with real(*args, **kwargs) as client:
            yield client
    finally:
        leak()


def leak():
    loop = asyncio.new_event_loop()
    future = loop.create_future()
    future.set_exception(TimeoutError("Timeout"))
    leaked.append((loop, future))

shards.dask_client = leaky
sys.argv[0] = "calib"
from calibrate_cli.cli import main
main()
"""


def test_dask_leftovers_finalised_at_exit_stay_off_stderr(shards):
    """CI once printed "Future exception was never retrieved ... TimeoutError" after the error line."""
    pytest.importorskip("distributed")
    d = shards
    np.save(d / "labels" / "y_03.npy", np.zeros(5, dtype=np.int64))
    done = subprocess.run(
        [sys.executable, "-c", LEAKY_CLUSTER, "eval", str(d / "preds"), str(d / "labels"), "--engine", "dask"],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "y_03.npy: 5 labels" in lines[0], done.stderr
