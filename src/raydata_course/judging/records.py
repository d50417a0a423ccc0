"""The records a judged kernel and the judge exchange: plain, frozen data with no behaviour.

:mod:`raydata_course.judging.values` encodes and decodes them (and re-exports them); a
record holds only what the codec let through: strings, numbers, tuples and NumPy arrays of
plain dtypes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["KernelRef", "ArrowTable", "TypeInfo", "TableData", "FrameData", "TensorData", "DatasetData"]


@dataclass(frozen=True)
class KernelRef:
    """An object in the kernel: a global of the notebook, an importable name, or an earlier result.

    Attributes:
        root: ``"student"`` (a name in the notebook's namespace), ``"import"`` (a module,
            ``"ray.data"``) or ``"handle"`` (the result of an earlier :class:`Call`).
        name: the global's name, the module's dotted name, or the handle number as text.
        attrs: attribute names looked up on the root, in order.
    """

    root: str
    name: str
    attrs: tuple[str, ...] = ()


@dataclass(frozen=True)
class ArrowTable:
    """A ``pyarrow.Table`` sent by the judge to the kernel, as an Arrow IPC stream."""

    ipc: bytes


@dataclass(frozen=True)
class TypeInfo:
    """What the kernel says an object is: its class and base classes, and a short ``repr``.

    Attributes:
        module: the class's module, e.g. ``"ray.data.dataset"``.
        qualname: the class's qualified name, e.g. ``"MaterializedDataset"``.
        mro: ``module.qualname`` of the class and every base class, most derived first.
        text: ``repr(obj)``, cut to :data:`raydata_course.judging.values.MAX_TEXT_CHARS` (the kernel
            computes it).
    """

    module: str
    qualname: str
    mro: tuple[str, ...] = ()
    text: str = ""

    @property
    def name(self) -> str:
        """``module.qualname``."""
        return f"{self.module}.{self.qualname}"

    def is_a(self, name: str) -> bool:
        """True when ``name`` (``module.qualname``, or a bare class name) is in the MRO."""
        return any(entry == name or entry.rsplit(".", 1)[-1] == name for entry in self.mro)


class _Columns:
    """What tables and frames share: named columns of equal length."""

    names: tuple[str, ...]
    columns: tuple[Any, ...]

    @property
    def num_rows(self) -> int:
        """Rows in the table."""
        return len(self.columns[0]) if self.columns else 0

    def column(self, name: str):
        """The column called ``name`` (a NumPy array or a list).

        Raises:
            KeyError: if there is no such column.
        """
        if name not in self.names:
            raise KeyError(name)
        return self.columns[self.names.index(name)]

    def rows(self) -> list[dict]:
        """The rows as dicts of Python values (``to_pylist``)."""
        cols = [c.tolist() if isinstance(c, np.ndarray) else list(c) for c in self.columns]
        return [dict(zip(self.names, values)) for values in zip(*cols)]


@dataclass(frozen=True)
class TableData(_Columns):
    """An Arrow table as data: column names, Arrow type names, and the columns.

    Attributes:
        names: column names.
        types: ``str(field.type)`` per column, e.g. ``"double"``, ``"string"``.
        columns: one NumPy array per column (primitive types), or a list of Python values.
    """

    names: tuple[str, ...]
    types: tuple[str, ...]
    columns: tuple[Any, ...]

    def type_of(self, name: str) -> str:
        """The Arrow type name of column ``name``.

        Raises:
            KeyError: if there is no such column.
        """
        if name not in self.names:
            raise KeyError(name)
        return self.types[self.names.index(name)]


@dataclass(frozen=True)
class FrameData(_Columns):
    """A pandas DataFrame as data: column names, dtype names and one array (or list) per column."""

    names: tuple[str, ...]
    dtypes: tuple[str, ...]
    columns: tuple[Any, ...]


@dataclass(frozen=True)
class TensorData:
    """A torch tensor as data: dtype name (``"float32"``), shape, device type and values.

    ``values`` is a NumPy array, or None for a tensor without data (device ``"meta"``).
    """

    dtype: str
    shape: tuple[int, ...]
    device: str
    values: Any = None


@dataclass(frozen=True)
class DatasetData:
    """A Ray ``Dataset`` as data: its type, and its blocks as tables when they were fetched.

    Attributes:
        type: the dataset's :class:`TypeInfo` (``MaterializedDataset`` or ``Dataset``).
        blocks: one :class:`TableData` per block, in the dataset's block order.
        num_blocks: what ``num_blocks()`` returned (None for a lazy dataset, which raises).
    """

    type: TypeInfo
    blocks: tuple[TableData, ...] = ()
    num_blocks: int | None = None

    @property
    def block_num_rows(self) -> list[int]:
        """Rows per block, in block order."""
        return [b.num_rows for b in self.blocks]

    def column(self, name: str) -> list:
        """Every value of column ``name``, block after block, as Python values."""
        out: list = []
        for block in self.blocks:
            col = block.column(name)
            out.extend(col.tolist() if isinstance(col, np.ndarray) else col)
        return out
