"""Out-of-distribution logits of the sample model, for `calib ood` demos and docs.

Retrains the sample model exactly as ``scripts/make_sample_data.py`` (same split, seed and
MLP; the script checks that it reproduces ``sample_data/test_logits.npy`` bit for bit, so these
logits come from the very model of the sample data) and feeds it images it never saw:

- ``ood_rotated_logits.npy``: the 719 test digits rotated by 90° (a shift in what the images show:
  the pixels are the digits' own, the shapes are not digits any more);
- ``ood_noise_logits.npy``: 719 images of uniform noise in [0, 1] (seeded).

float32, (719, 10), written with ``np.save``. Then, for example::

    calib ood sample_data/test_logits.npy sample_data/ood_rotated_logits.npy

Needs scikit-learn (``pip install '.[sample]'``).
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

import numpy as np


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="sample_data", help="folder of the sample data (default: sample_data)")
    ap.add_argument("--seed", type=int, default=0, help="seed of make_sample_data.py (default: 0)")
    args = ap.parse_args(argv)
    try:
        from sklearn.datasets import load_digits
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.model_selection import train_test_split
        from sklearn.neural_network import MLPClassifier
        from threadpoolctl import threadpool_limits
    except ImportError as exc:  # pragma: no cover
        print(f"make_ood_sample: needs scikit-learn (pip install scikit-learn): {exc}", file=sys.stderr)
        return 2
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from make_sample_data import _forward_logits

    X, y = load_digits(return_X_y=True)
    X = X.astype(np.float64) / 16.0
    X_train, X_rest, y_train, y_rest = train_test_split(X, y, train_size=0.2, stratify=y, random_state=args.seed)
    _, X_test, _, _ = train_test_split(X_rest, y_rest, test_size=0.5, stratify=y_rest, random_state=args.seed)
    clf = MLPClassifier(hidden_layer_sizes=(256, 256), activation="relu", solver="adam", alpha=0.0, max_iter=1000,
                        tol=0.0, n_iter_no_change=1000, random_state=args.seed)
    with threadpool_limits(limits=1), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf.fit(X_train, y_train)
        test = _forward_logits(clf, X_test).astype(np.float32)
        saved = np.load(os.path.join(args.out, "test_logits.npy"), allow_pickle=False)
        if not np.array_equal(test, saved):
            print("make_ood_sample: the retrained model does not reproduce test_logits.npy "
                  f"(max difference {np.abs(test - saved).max():.3g}); other library versions?", file=sys.stderr)
            return 1
        rotated = np.rot90(X_test.reshape(-1, 8, 8), k=1, axes=(1, 2)).reshape(-1, 64)
        noise = np.random.default_rng(args.seed).uniform(0.0, 1.0, X_test.shape)
        for name, images in (("rotated", rotated), ("noise", noise)):
            path = os.path.join(args.out, f"ood_{name}_logits.npy")
            np.save(path, _forward_logits(clf, images).astype(np.float32), allow_pickle=False)
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
