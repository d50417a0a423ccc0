"""Small, real course datasets that build offline.

Everything here reads data that ships inside an installed package, so nothing is downloaded
at run time:

- the UCI Wine recognition data (178 wines, 13 chemical measurements, 3 cultivars; Forina et
  al., via the UCI Machine Learning Repository), as bundled in scikit-learn at
  ``sklearn/datasets/data/wine_data.csv``;
- the UCI optical recognition of handwritten digits test set (1,797 scans, 8x8 pixels with
  values 0-16; Alpaydin and Kaynak), as bundled in scikit-learn at
  ``sklearn/datasets/data/digits.csv.gz``.

Examples:
    >>> table = load_wine_table()
    >>> table.num_rows, table.column_names[:2], table.column_names[-1]
    (178, ['alcohol', 'malic_acid'], 'cultivar')
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["load_wine_table", "load_digits_table", "write_parquet_files"]


def _snake(name: str) -> str:
    return re.sub(r"[^0-9a-zA-Z]+", "_", name).strip("_").lower()


def load_wine_table() -> pa.Table:
    """Load the Wine recognition data as an Arrow table.

    Returns:
        A table of 178 rows: 13 ``float64`` measurement columns (snake-case names, e.g.
        ``alcohol``, ``color_intensity``, ``od280_od315_of_diluted_wines``) and ``cultivar``
        (``int64``, 0-2), in the file's row order.
    """
    from sklearn.datasets import load_wine

    bunch = load_wine()
    columns = {_snake(n): pa.array(bunch.data[:, i], pa.float64()) for i, n in enumerate(bunch.feature_names)}
    columns["cultivar"] = pa.array(bunch.target.astype(np.int64))
    return pa.table(columns)


def load_digits_table() -> pa.Table:
    """Load the handwritten digits data as an Arrow table.

    Returns:
        A table of 1,797 rows with ``pixels`` (a fixed-size list of 64 ``uint8`` grey values,
        0-16, row-major 8x8) and ``label`` (``int64``, 0-9).
    """
    from sklearn.datasets import load_digits

    bunch = load_digits()
    flat = bunch.data.astype(np.uint8)
    pixels = pa.FixedSizeListArray.from_arrays(pa.array(flat.reshape(-1)), 64)
    return pa.table({"pixels": pixels, "label": pa.array(bunch.target.astype(np.int64))})


def write_parquet_files(
    table: pa.Table, directory: str | os.PathLike, num_files: int, *, prefix: str = "part"
) -> list[Path]:
    """Write ``table`` as ``num_files`` Parquet files of contiguous, near-equal row ranges.

    File ``i`` is ``<directory>/<prefix>-<i:05d>.parquet``; row counts differ by at most one.

    Args:
        table: the rows to write.
        directory: target folder; created if missing.
        num_files: how many files to write, between 1 and ``table.num_rows``.
        prefix: file-name prefix.

    Returns:
        The paths written, in row order.

    Raises:
        ValueError: if ``num_files`` is not between 1 and the number of rows.
        FileExistsError: if the folder already holds ``.parquet`` files (reading the folder
            later would mix old and new rows; choose an empty folder or delete them).
    """
    if not 1 <= num_files <= max(table.num_rows, 1):
        raise ValueError(f"num_files must be between 1 and {table.num_rows} (the row count), got {num_files}.")
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    existing = sorted(folder.glob("*.parquet"))
    if existing:
        raise FileExistsError(
            f"{folder} already holds {len(existing)} Parquet file(s), e.g. {existing[0].name}; "
            f"reading the folder would mix them with the new ones. Use an empty folder."
        )
    bounds = np.linspace(0, table.num_rows, num_files + 1).round().astype(int)
    paths = []
    for i, (start, stop) in enumerate(zip(bounds[:-1], bounds[1:])):
        path = folder / f"{prefix}-{i:05d}.parquet"
        pq.write_table(table.slice(int(start), int(stop - start)), path)
        paths.append(path)
    return paths
