"""The reference implementations of the training losses, transcribed for the tests.

Each function re-states, operation for operation, what the authors' published code computes, so
tests/test_losses.py can compare calibrate_cli.training.losses with *their* semantics (thresholds, dtypes,
reductions, normalisations) on the same batch. Written from reading the sources named in each module
(not copied); the upstream licences (MIT) are reproduced in each module as they ask for derived work.
"""
