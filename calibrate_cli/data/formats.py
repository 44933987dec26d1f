"""What an input format is, and the helpers its loaders share.

:class:`InputFormat` is one entry of :data:`calibrate_cli.data.io.INPUT_FORMATS`: a loader, and the
capabilities of formats whose columns are chosen by name (``read_columns``, ``iter_blocks``,
``read_labels``, returning :class:`ScoresFile` / :class:`ScoreBlocks`). The families:

- :mod:`.csvfile`: CSV (the full reader; :mod:`.csvfast` is its C-speed path);
- :mod:`.tables`: Parquet, Arrow IPC and Feather (pyarrow, extra ``[arrow]``): columns chosen by
  name, read by row group / record batch;
- :mod:`.arrays`: safetensors (``[safetensors]``), HDF5 (h5py, ``[hdf5]``) and Zarr (``[zarr]``):
  one array addressed by key, read chunk by chunk.

Each loader returns numpy arrays, never unpickles, and turns every problem into one
:class:`~calibrate_cli.errors.InputError` line that starts with the file's name. A missing optional
library is one line naming the install command (:func:`require`).
"""

from __future__ import annotations

import errno
import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from ..errors import InputError

#: bytes of output filled per read step (rows are read in blocks of about this size)
BLOCK_BYTES = 16 << 20


def require(module: str, label: str, what: str, extra: str):
    """Import ``module`` or raise the one-line InputError that says how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise InputError(
            f"{label}: reading {what} needs the {module.split('.')[0]} library: pip install 'calibrate-cli[{extra}]'"
        ) from None


def one_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type's name when the message is empty)."""
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def rows_per_block(row_bytes: int) -> int:
    """Rows per read step: about :data:`BLOCK_BYTES` of output, at least one row."""
    return max(1, BLOCK_BYTES // max(int(row_bytes), 1))


#: errno → what it means when opening or reading an input fails with it: the machine's limits, not
#: the file's content (never "truncated or corrupt")
_RESOURCE_ERRNOS = {
    errno.ENOMEM: "out of memory",
    errno.EMFILE: "too many open files in this process (ulimit -n)",
    errno.ENFILE: "too many open files on this system",
}


def resource_problem(exc: BaseException) -> str | None:
    """What an OSError with an errno of :data:`_RESOURCE_ERRNOS` means (None for any other error)."""
    return _RESOURCE_ERRNOS.get(getattr(exc, "errno", None)) if isinstance(exc, OSError) else None


def os_reason(exc: OSError) -> str:
    """An OSError's reason without the path it repeats (``File name too long``, ``Permission denied``)."""
    return resource_problem(exc) or exc.strerror or one_line(exc)


def names_text(keys: Sequence[str], limit: int = 12) -> str:
    """``a, b, c`` (the first ``limit`` names, then how many more), or ``none``."""
    keys = list(keys)
    if not keys:
        return "none"
    shown = ", ".join(keys[:limit])
    return shown + (f", … ({len(keys) - limit} more)" if len(keys) > limit else "")


def pick_key(keys: list[str], key: str | None, label: str, path: Path, what: str = "arrays") -> str:
    """The member ``key`` of a file holding ``keys`` (the only one when no key is given); one line otherwise."""
    if key is None:
        if len(keys) == 1:
            return keys[0]
        if not keys:
            raise InputError(f"{label}: holds no {what}")
        raise InputError(f"{label}: holds several {what} ({names_text(keys)}); name one as {path}:KEY")
    if key == "":
        raise InputError(f"{label}: no key after ':' (found: {names_text(keys)}); name one as {path}:KEY")
    if key not in keys:
        raise InputError(f"{label}: no array named {key!r} (found: {names_text(keys)})")
    return key


# ------------------------------------------------------------------------- the format protocol
@dataclass(frozen=True)
class ScoresFile:
    """What :func:`~calibrate_cli.data.io.read_scores` found: the scores, the labels column (or None),
    and the classes' names when the score columns have names (CSV with a header, tables; used to read
    class-name labels). ``score_columns``: the columns the scores were read from, for the report: their
    names, or their 0-based indices in a CSV file without a header (None for files without columns)."""

    scores: np.ndarray
    labels: np.ndarray | None = None
    class_names: tuple[str, ...] | None = None
    score_columns: tuple[str, ...] | tuple[int, ...] | None = None


class NotStreamed(Exception):
    """A streamed read (:func:`~calibrate_cli.data.io.stream_scores`) found what only the whole-file
    reader handles: read it whole."""


class ScoreBlocks:
    """The (scores, labels) blocks of a streamed read, in row order; ``score_columns`` as in
    :class:`ScoresFile` (the columns the scores are read from, for the report)."""

    def __init__(self, blocks, score_columns=None):
        self._blocks = iter(blocks)
        self.score_columns = score_columns

    def __iter__(self):
        return self

    def __next__(self):
        return next(self._blocks)


#: ``load(path, key, label)``: the file's one array (``key``: what follows ``file.ext:``, or None)
Load = Callable[[Path, "str | None", str], np.ndarray]


@dataclass(frozen=True)
class InputFormat:
    """One file type calib reads arrays from: ``load(path, key, label) -> np.ndarray``.

    ``keyed``: the file holds several arrays, addressed as ``file.ext:KEY`` (``key`` None when not
    given). ``load`` must never unpickle and must raise InputError (one line naming ``label``) for
    every problem with the file. Adding a format is one loader and one entry in
    :data:`~calibrate_cli.data.io.INPUT_FORMATS` (docs/contributing.md, "Adding an input format").

    Formats whose columns are chosen by name (CSV, Parquet, Arrow, Feather) also give:

    - ``read_columns(path, key, label, *, score_cols, label_col, header, expected_rows)`` →
      :class:`ScoresFile`: the score columns and, with ``label_col``, the labels column;
    - ``iter_blocks(path, key, label, *, score_cols, label_col, header)`` → (N, whether N is certain,
      :class:`ScoreBlocks`), or None when the file must be read whole;
    - ``read_labels(path, key, label, *, header, classes, expected_rows)`` → the labels, where class
      names map to ``classes`` (otherwise ``load`` reads labels as any array).
    """

    load: Load
    keyed: bool = False
    #: keys are paths inside the file and may hold '/' (HDF5, Zarr)
    nested_keys: bool = False
    #: the "file" is a directory (a Zarr store)
    directory: bool = False
    read_columns: Callable[..., ScoresFile] | None = None
    iter_blocks: Callable[..., "tuple | None"] | None = None
    read_labels: Callable[..., np.ndarray] | None = None
