"""Record ACE values from the authors' code (Nixon et al. 2019, ``uncertainty_metrics==0.0.81``) once,
for tests/test_classwise_metrics.py, which checks calib's ACE against them without that package.

uncertainty-metrics 0.0.81's wheel has metadata that pip >= 24.1 rejects, so it cannot be a test
dependency. To record again, in a throwaway virtualenv:

    python -m venv /tmp/um && /tmp/um/bin/pip install 'pip<24.1'
    /tmp/um/bin/pip install uncertainty-metrics==0.0.81 numpy scipy matplotlib scikit-learn
    /tmp/um/bin/python scripts/record_ace_values.py > tests/data/ace_authors_values.json

The probabilities are coarse (tenths plus 0.05, renormalised: runs of ties straddle the edge ranks) and
stored as the integer tenths, so the test rebuilds the very arrays the authors' code saw."""

import json
import sys

import numpy as np
import uncertainty_metrics.numpy as um
from importlib.metadata import version

CASES = [(7, 3, 15), (1000, 10, 15), (200, 2, 30), (100, 3, 200)]


def main():
    records = []
    for n, k, n_bins in CASES:
        rng = np.random.default_rng(n + k)
        tenths = np.rint(rng.dirichlet(np.full(k, 0.7), size=n) * 10).astype(int)
        labels = rng.integers(0, k, n)
        probs = tenths / 10 + 0.05
        probs /= probs.sum(axis=1, keepdims=True)
        records.append({"n_bins": n_bins, "tenths": tenths.tolist(), "labels": labels.tolist(),
                        "ace": float(um.ace(labels, probs, num_bins=n_bins))})
    source = f"uncertainty_metrics=={version('uncertainty-metrics')}: uncertainty_metrics.numpy.ace(labels, probs, num_bins)"
    json.dump({"source": source, "numpy": np.__version__, "cases": records}, sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
