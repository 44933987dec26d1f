"""Loaders of the optional file formats, registered in :data:`calibrate_cli.data.io.INPUT_FORMATS`.

- :mod:`.tables`: Parquet, Arrow IPC and Feather (pyarrow, extra ``[arrow]``): columns chosen by
  name, read by row group / record batch;
- :mod:`.arrays`: safetensors (``[safetensors]``), HDF5 (h5py, ``[hdf5]``) and Zarr (``[zarr]``):
  one array addressed by key, read chunk by chunk;
- :mod:`.csvfast`: the C-speed path of the CSV reader (numpy's C parser, streamed in blocks of rows).

Each loader returns numpy arrays, never unpickles, and turns every problem into one
:class:`~calibrate_cli.errors.InputError` line that starts with the file's name. A missing optional
library is one line naming the install command (:func:`require`).
"""

from __future__ import annotations

import importlib

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
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def rows_per_block(row_bytes: int) -> int:
    """Rows per read step: about :data:`BLOCK_BYTES` of output, at least one row."""
    return max(1, BLOCK_BYTES // max(int(row_bytes), 1))
