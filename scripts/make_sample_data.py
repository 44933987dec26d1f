#!/usr/bin/env python
"""Regenerate calib's bundled sample data: logits of a real, over-confident classifier.

What it does
------------
* Dataset: scikit-learn's handwritten digits (``sklearn.datasets.load_digits``: 1797 real 8x8
  images, 10 classes; ships inside scikit-learn, nothing is downloaded). Pixels are scaled to [0, 1]
  (divided by 16).
* Split (stratified, seeded with ``--seed``): 20% train / 40% validation / 40% test
  (359 / 719 / 719 images with the default seed).
* Model: an over-parameterised MLP, ``MLPClassifier(hidden_layer_sizes=(256, 256), alpha=0,
  max_iter=1000, tol=0)`` (Adam, ReLU), trained for the full 1000 epochs with no weight decay and
  no early stopping, so it drives its training loss to ~0 and becomes over-confident on new data.
* Honest note on the split: with half of the data for training (50/25/25) this network is already
  fairly well calibrated on digits (ECE about 2%, accuracy about 97.5%). To get a clearly
  over-confident model, as the deep networks studied by Guo et al. 2017 / Mukhoti et al. 2020 are, it
  is trained on a smaller share (20%). No noise or other manipulation is applied to any split.
* Logits: computed by a manual forward pass from ``coefs_`` / ``intercepts_`` (ReLU hidden layers,
  linear output layer), in float64; the script checks that their softmax equals ``predict_proba``
  to 1e-6 (and again after the cast to float32) before saving.

Output (in ``--out``): ``val_logits.npy`` / ``test_logits.npy`` (float32, (N, 10)) and
``val_labels.npy`` / ``test_labels.npy`` (int64, (N,)), written with ``np.save``. One summary line
is printed (accuracy, mean confidence and top-label ECE with 15 equal-width bins per split).

Determinism: fixed seeds and a single BLAS thread during training; rerunning on the same machine
with the same library versions gives byte-identical files. Other CPUs / BLAS builds / scikit-learn
versions may differ in the last bits (or more, since training amplifies rounding differences).

Usage:  python scripts/make_sample_data.py --out sample_data --seed 0
Needs:  numpy, scikit-learn (``pip install scikit-learn``; extra ``sample`` of the project).
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

import numpy as np

N_BINS = 15


def _forward_logits(clf, X):
    """Pre-softmax output of a fitted MLPClassifier (ReLU hidden layers, identity output)."""
    if clf.activation != "relu" or clf.out_activation_ != "softmax":
        raise RuntimeError("expected a ReLU MLP with a softmax output")
    h = np.asarray(X, dtype=np.float64)
    for W, b in zip(clf.coefs_[:-1], clf.intercepts_[:-1]):
        h = np.maximum(h @ W + b, 0.0)
    return h @ clf.coefs_[-1] + clf.intercepts_[-1]


def _softmax(z):
    z = np.asarray(z, dtype=np.float64)
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _summary(logits, labels, n_bins=N_BINS):
    """accuracy, mean confidence, top-label ECE (equal-width bins (b/M, (b+1)/M]) in float64."""
    p = _softmax(logits)
    conf = p.max(axis=1)
    correct = (p.argmax(axis=1) == labels).astype(np.float64)
    edges = np.arange(n_bins + 1) / n_bins
    # bin b holds edges[b] < conf <= edges[b+1]; conf in (0, 1] always for a top label
    idx = np.clip(np.searchsorted(edges, conf, side="left") - 1, 0, n_bins - 1)
    ece = 0.0
    for b in range(n_bins):
        m = idx == b
        if m.any():
            ece += m.mean() * abs(correct[m].mean() - conf[m].mean())
    return correct.mean(), conf.mean(), ece


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="sample_data", help="output folder (default: sample_data)")
    ap.add_argument("--seed", type=int, default=0, help="seed for the split and the MLP (default: 0)")
    args = ap.parse_args(argv)

    try:
        from sklearn.datasets import load_digits
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.model_selection import train_test_split
        from sklearn.neural_network import MLPClassifier
        from threadpoolctl import threadpool_limits
    except ImportError as exc:  # pragma: no cover
        print("make_sample_data: needs scikit-learn (pip install scikit-learn): %s" % exc, file=sys.stderr)
        return 2

    X, y = load_digits(return_X_y=True)
    X = X.astype(np.float64) / 16.0
    y = y.astype(np.int64)

    X_train, X_rest, y_train, y_rest = train_test_split(
        X, y, train_size=0.2, stratify=y, random_state=args.seed)
    X_val, X_test, y_val, y_test = train_test_split(
        X_rest, y_rest, test_size=0.5, stratify=y_rest, random_state=args.seed)

    clf = MLPClassifier(hidden_layer_sizes=(256, 256), activation="relu", solver="adam",
                        alpha=0.0, max_iter=1000, tol=0.0, n_iter_no_change=1000,
                        random_state=args.seed)
    with threadpool_limits(limits=1), warnings.catch_warnings():
        # it runs all max_iter epochs on purpose (tol=0), which sklearn reports as "not converged"
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf.fit(X_train, y_train)

        results = {}
        for name, Xs, ys in (("val", X_val, y_val), ("test", X_test, y_test)):
            logits = _forward_logits(clf, Xs)
            proba = clf.predict_proba(Xs)
            err64 = np.abs(_softmax(logits) - proba).max()
            logits32 = logits.astype(np.float32)
            err32 = np.abs(_softmax(logits32) - proba).max()
            if not (err64 <= 1e-6 and err32 <= 1e-6):
                raise RuntimeError("softmax(logits) != predict_proba on %s: %.3g / %.3g"
                                   % (name, err64, err32))
            results[name] = (logits32, ys.astype(np.int64))

    os.makedirs(args.out, exist_ok=True)
    parts = []
    for name, (logits32, labels) in results.items():
        np.save(os.path.join(args.out, "%s_logits.npy" % name), logits32, allow_pickle=False)
        np.save(os.path.join(args.out, "%s_labels.npy" % name), labels, allow_pickle=False)
        acc, conf, ece = _summary(logits32, labels)
        parts.append("%s N=%d acc=%.4f conf=%.4f ECE=%.4f" % (name, len(labels), acc, conf, ece))
    print("digits MLP(256,256) seed=%d train N=%d | %s -> %s"
          % (args.seed, len(y_train), " | ".join(parts), args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
