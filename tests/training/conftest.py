"""The training tests run torch on one thread (CALIB_THREADS=1): on a busy 2-core machine two
spinning OpenMP threads make a small model's epoch 10-20 times slower."""

import pytest


@pytest.fixture(autouse=True)
def one_thread(monkeypatch):
    monkeypatch.setenv("CALIB_THREADS", "1")
