"""The chunk thread pool: order, bounded in-flight work, errors, and the CALIB_THREADS setting."""

import threading
import time

import numpy as np
import pytest

from calibrate_cli.errors import InputError
from calibrate_cli.engine.parallel import MAX_DEFAULT_THREADS, cpu_threads, map_chunks, run_together


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_results_come_back_in_chunk_order(threads):
    def slow_first(i):
        time.sleep(0.02 if i == 0 else 0.0)  # the first chunk finishes last
        return i * i

    assert list(map_chunks(slow_first, range(12), threads)) == [i * i for i in range(12)]


def test_at_most_threads_plus_one_chunks_in_flight():
    started, lock, most = [0], threading.Lock(), [0]
    done = []

    def work(i):
        with lock:
            started[0] += 1
            most[0] = max(most[0], started[0] - len(done))
        time.sleep(0.005)
        return i

    for i in map_chunks(work, range(30), 2):
        done.append(i)
    assert done == list(range(30)) and most[0] <= 3


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_a_chunk_starts_only_after_the_caller_took_the_one_threads_plus_one_before(threads):
    """The order summarize relies on when only the equal-width bins are asked for to reuse threads + 1 buffers in turn: chunk
    i + threads + 1 starts after the caller has taken chunk i's result and asked for the next."""
    events, lock = [], threading.Lock()

    def fn(i):
        with lock:
            events.append(("start", i))
        time.sleep(0.001 * (i % 3))  # chunks finish out of order
        return i

    for i in map_chunks(fn, range(20), threads):
        with lock:
            events.append(("took", i))
        time.sleep(0.002)  # the caller is slow: the workers would run ahead if they could
    for i in range(20 - threads - 1):
        assert events.index(("took", i)) < events.index(("start", i + threads + 1))


def test_an_error_in_a_chunk_reaches_the_caller():
    def work(i):
        if i == 3:
            raise ValueError("chunk 3")
        return i

    with pytest.raises(ValueError, match="chunk 3"):
        list(map_chunks(work, range(8), 2))


def test_calib_threads_environment(monkeypatch):
    monkeypatch.setenv("CALIB_THREADS", "3")
    assert cpu_threads() == 3
    monkeypatch.delenv("CALIB_THREADS")
    assert 1 <= cpu_threads() <= MAX_DEFAULT_THREADS
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv("CALIB_THREADS", bad)
        with pytest.raises(InputError, match="CALIB_THREADS"):
            cpu_threads()


def test_bad_calib_threads_is_a_one_line_cli_error(monkeypatch, runner, tmp_path):
    from calibrate_cli.cli import cli

    np.save(tmp_path / "s.npy", np.array([[2.0, 0.0], [0.0, 1.0]]))
    np.save(tmp_path / "y.npy", np.array([0, 1]))
    monkeypatch.setenv("CALIB_THREADS", "lots")
    result = runner.invoke(cli, ["eval", str(tmp_path / "s.npy"), str(tmp_path / "y.npy")])
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "CALIB_THREADS" in lines[0]


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_run_together_returns_each_result_in_order(threads):
    def slow(value, delay):
        return lambda: (time.sleep(delay), value)[1]

    tasks = [slow("a", 0.03), slow("b", 0.0), slow("c", 0.01)]
    assert run_together(*tasks, threads=threads) == ["a", "b", "c"]
    assert run_together(threads=threads) == []


def test_run_together_runs_the_tasks_at_once_on_two_threads():
    both = threading.Barrier(2, timeout=5)  # each task waits for the other: only at once do both pass
    assert run_together(lambda: both.wait() * 0 + 1, lambda: both.wait() * 0 + 2, threads=2) == [1, 2]


@pytest.mark.parametrize("failing", [0, 1])
def test_run_together_raises_a_tasks_error_after_every_task_ended(failing):
    ended = []

    def fail():
        raise ValueError("task failed")

    def work():
        time.sleep(0.02)
        ended.append(True)
        return 1

    tasks = [work, work]
    tasks[failing] = fail
    with pytest.raises(ValueError, match="task failed"):
        run_together(*tasks, threads=2)
    assert ended == [True]
