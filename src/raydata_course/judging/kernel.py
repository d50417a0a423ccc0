"""The kernel's side of a judged cell: answer the judge's calls, send results back as data.

When the grader reaches a grade cell, it runs one line of its own in the kernel::

    import raydata_course.judging.kernel as _judge; _judge.serve("/judge/judge.sock", "<nonce>")

:func:`serve` connects to the judge (a process outside the kernel's sandbox), says hello with
the one-time nonce, and then does what the judge asks, one request at a time: call a function
of the notebook (or of an importable module) on inputs the judge chose, keep the result, and
send results back as data (:mod:`raydata_course.judging.wire`). The judge decides pass or fail
from that data, outside the kernel, with checks and expected values that never enter it.

Nothing here is secret, and nothing here can raise a grade: a kernel that answers the
judge's calls with made-up data has to make up the right data, which is answering.
"""

from __future__ import annotations

import dataclasses
import importlib
import socket
import sys
import time
from pathlib import Path, PurePath
from typing import Any

import numpy as np

from raydata_course._util import cause_chain
from raydata_course.judging.wire import (
    MAX_TEXT_CHARS,
    ArrowTable,
    Call,
    DatasetData,
    Done,
    Fetch,
    FrameData,
    Hello,
    Kept,
    KernelRef,
    Raised,
    TableData,
    TensorData,
    TypeInfo,
    Value,
    WireError,
    map_leaves,
    recv_message,
    send_message,
)

__all__ = ["serve", "to_data", "type_info"]

#: Deepest nesting of lists, tuples and dicts :func:`to_data` converts.
MAX_DEPTH = 12


def error_text(exc: BaseException) -> str:
    """What an exception says, with the error the student's own code raised first.

    A UDF that raises inside Ray Data reaches the caller as ``RayTaskError(UserCodeException)``;
    the UDF's exception is at the end of its ``cause`` / ``__cause__`` chain, and its text can
    sit after a long traceback that :data:`MAX_TEXT_CHARS` would cut. So that error comes
    first, then the whole text.

    Examples:
        >>> try:
        ...     try:
        ...         raise ValueError("columns differ")
        ...     except ValueError as inner:
        ...         raise RuntimeError("a long Ray traceback ...") from inner
        ... except RuntimeError as exc:
        ...     print(error_text(exc))
        ValueError: columns differ
        <BLANKLINE>
        a long Ray traceback ...
    """
    root = cause_chain(exc)[-1]
    text = str(exc)
    return text if root is exc else f"{type(root).__name__}: {root}\n\n{text}"


def _short(text: str) -> str:
    return text if len(text) <= MAX_TEXT_CHARS else text[:MAX_TEXT_CHARS - 1] + "…"


def type_info(obj: Any) -> TypeInfo:
    """The :class:`~raydata_course.judging.wire.TypeInfo` of ``obj``: its class, MRO and a short repr."""
    cls = type(obj)
    try:
        text = repr(obj)
    except Exception as exc:  # a student's __repr__ may raise
        text = f"<repr failed: {type(exc).__name__}>"
    mro = tuple(f"{c.__module__}.{c.__qualname__}" for c in cls.__mro__)
    return TypeInfo(cls.__module__, cls.__qualname__, mro, _short(text))


def _column(col) -> Any:
    """One Arrow column as a NumPy array (primitive types without nulls) or a list of values."""
    import pyarrow as pa

    kind = col.type
    if col.null_count == 0 and (pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)):
        return np.asarray(col.to_numpy())
    return [to_data(v) for v in col.to_pylist()]


def _table(table) -> TableData:
    return TableData(tuple(table.column_names), tuple(str(f.type) for f in table.schema),
                     tuple(_column(table.column(i)) for i in range(table.num_columns)))


def _frame(frame) -> FrameData:
    names, dtypes, columns = [], [], []
    for name in frame.columns:
        series = frame[name]
        names.append(str(name))
        dtypes.append(str(series.dtype))
        values = series.to_numpy()
        columns.append(values if values.dtype.kind in "biufc" else [to_data(v) for v in values.tolist()])
    return FrameData(tuple(names), tuple(dtypes), tuple(columns))


def _tensor(t) -> TensorData:
    dtype = str(t.dtype).replace("torch.", "")
    device = t.device.type
    values = None
    if device != "meta":
        values = t.detach().cpu().numpy()
    return TensorData(dtype, tuple(int(n) for n in t.shape), device, values)


def _dataset(ds) -> DatasetData:
    import ray
    from ray.data.dataset import MaterializedDataset

    info = type_info(ds)
    num_blocks = ds.num_blocks() if isinstance(ds, MaterializedDataset) else None
    tables = ray.get(ds.to_arrow_refs())
    return DatasetData(info, tuple(_table(t) for t in tables), num_blocks)


def to_data(obj: Any, how: str = "data", _depth: int = 0) -> Any:
    """``obj`` as wire data.

    Args:
        obj: any object of the kernel.
        how: ``"data"`` (numbers, text, containers, arrays, tables, frames and tensors as
            data; anything else as its :class:`TypeInfo`), ``"type"`` (its ``TypeInfo``) or
            ``"dataset"`` (a Ray ``Dataset``'s blocks; runs a lazy dataset).

    Raises:
        ValueError: for an unknown ``how``, or containers nested past :data:`MAX_DEPTH`.
    """
    if how == "type":
        return type_info(obj)
    if how == "dataset":
        return _dataset(obj)
    if how != "data":
        raise ValueError(f"unknown fetch kind {how!r}: use 'data', 'type' or 'dataset'")
    if _depth > MAX_DEPTH:
        raise ValueError(f"containers nested more than {MAX_DEPTH} deep")
    if obj is None or isinstance(obj, (bool, int, float, str, bytes)):
        return obj
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind == "O":
            out = np.empty(obj.shape, dtype=object)
            for index, item in np.ndenumerate(obj):
                out[index] = to_data(item, _depth=_depth + 1)
            return out
        return obj
    if isinstance(obj, np.generic):
        return obj
    if isinstance(obj, list):
        return [to_data(v, _depth=_depth + 1) for v in obj]
    if isinstance(obj, tuple):
        return tuple(to_data(v, _depth=_depth + 1) for v in obj)
    if isinstance(obj, dict):
        return {to_data(k, _depth=_depth + 1): to_data(v, _depth=_depth + 1) for k, v in obj.items()}
    if isinstance(obj, PurePath):
        return str(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_data(getattr(obj, f.name), _depth=_depth + 1) for f in dataclasses.fields(obj)}
    module = type(obj).__module__.split(".")[0]
    if module == "pyarrow":
        import pyarrow as pa

        if isinstance(obj, pa.Table):
            return _table(obj)
        if isinstance(obj, (pa.Array, pa.ChunkedArray)):
            return _column(obj if isinstance(obj, pa.ChunkedArray) else pa.chunked_array([obj]))
    if module == "pandas":
        import pandas as pd

        if isinstance(obj, pd.DataFrame):
            return _frame(obj)
        if isinstance(obj, pd.Series):
            values = obj.to_numpy()
            return values if values.dtype.kind in "biufc" else [to_data(v, _depth=_depth + 1) for v in values.tolist()]
    if module == "torch" and "torch" in sys.modules and isinstance(obj, sys.modules["torch"].Tensor):
        return _tensor(obj)
    return type_info(obj)


class _Session:
    """One judged cell: the notebook's namespace, and the results the judge asked to keep."""

    def __init__(self, namespace: dict):
        self.namespace = namespace
        self.handles: dict[int, Any] = {}

    def resolve(self, ref: KernelRef) -> Any:
        if ref.root == "student":
            if ref.name not in self.namespace:
                raise NameError(f"name {ref.name!r} is not defined in your notebook")
            obj = self.namespace[ref.name]
        elif ref.root == "import":
            obj = importlib.import_module(ref.name)
        elif ref.root == "handle":
            obj = self.handles[int(ref.name)]
        else:
            raise ValueError(f"unknown reference root {ref.root!r}")
        for attr in ref.attrs:
            obj = getattr(obj, attr)
        return obj

    def argument(self, value: Any) -> Any:
        return map_leaves(value, self._argument_leaf)

    def _argument_leaf(self, value: Any) -> Any:
        if isinstance(value, KernelRef):
            return self.resolve(value)
        if isinstance(value, ArrowTable):
            import pyarrow as pa

            return pa.ipc.open_stream(pa.py_buffer(value.ipc)).read_all()
        return value

    def answer(self, message) -> Any:
        try:
            if isinstance(message, Call):
                target = self.resolve(message.target)
                args = [self.argument(a) for a in message.args]
                kwargs = {k: self.argument(v) for k, v in message.kwargs.items()}
                result = target(*args, **kwargs)
                self.handles[message.id] = result
                return Kept(message.id, type_info(result))
            if isinstance(message, Fetch):
                return Value(message.id, to_data(self.resolve(message.target), message.how))
            raise ValueError(f"unexpected message {type(message).__name__}")
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # the student's code raised (SystemExit included)
            mro = tuple(c.__name__ for c in type(exc).__mro__)
            return Raised(getattr(message, "id", -1), type(exc).__name__, _short(error_text(exc)), mro)


def _namespace() -> dict:
    try:
        from IPython import get_ipython

        shell = get_ipython()
    except ImportError:
        shell = None
    if shell is not None:
        return shell.user_ns
    return vars(sys.modules["__main__"])


def _connect(path: str, timeout_s: float) -> socket.socket:
    """A blocking socket connected to the judge, trying again for ``timeout_s`` seconds.

    A Unix socket whose accept queue is full refuses a connection at once (``EAGAIN``) rather
    than waiting, so a queue filled by other connections to the judge must not cost the cell
    its verdict: the judge drains its queue while it waits for this cell.

    Raises:
        ConnectionError: if no connection was made within ``timeout_s`` seconds.
    """
    deadline = time.monotonic() + timeout_s
    pause_s = 0.01
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(max(0.1, deadline - time.monotonic()))
            sock.connect(path)
            sock.settimeout(None)
            return sock
        except (BlockingIOError, ConnectionRefusedError, socket.timeout) as exc:
            sock.close()
            if time.monotonic() + pause_s >= deadline:
                raise ConnectionError(f"the judge at {path} did not accept within {timeout_s:.0f} s ({exc})") from exc
            time.sleep(pause_s)
            pause_s = min(0.2, pause_s * 2)
        except BaseException:
            sock.close()
            raise


def serve(socket_path: str | Path, nonce: str, *, connect_timeout_s: float = 30.0,
          namespace: dict | None = None) -> bool:
    """Answer the judge for one grade cell; return whether the judge said it passed.

    Args:
        socket_path: the judge's Unix socket (the grader mounts it into the sandbox).
        nonce: the one-time token the grader put in this cell's line.
        connect_timeout_s: how long to wait for the judge to accept, in seconds.
        namespace: the globals the judge's calls name (default: the IPython kernel's user
            namespace, else ``__main__``'s).

    Raises:
        ConnectionError: if the judge cannot be reached or closes the connection early.
    """
    session = _Session(_namespace() if namespace is None else namespace)
    with _connect(str(socket_path), connect_timeout_s) as sock:
        send_message(sock, Hello(nonce))
        while True:
            message = recv_message(sock, allow_arrow=True)
            if isinstance(message, Done):
                return message.passed
            reply = session.answer(message)
            try:
                send_message(sock, reply)
            except WireError as exc:  # too large, or a value that cannot travel
                send_message(sock, Raised(reply.id, "WireError", _short(str(exc)), ("WireError", "Exception")))
