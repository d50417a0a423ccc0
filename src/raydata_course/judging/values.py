"""The data a judged kernel and the judge exchange: inert records, and a codec for them.

A value on the judge's wire (:mod:`raydata_course.judging.wire`) is JSON with tagged leaves:
``None``, booleans, numbers, strings, lists, tuples, dicts, bytes, NumPy arrays and scalars of
plain dtypes (:data:`PLAIN_DTYPES`; string and object arrays item by item), and the records
of :mod:`raydata_course.judging.records` (re-exported here). :func:`decode_value` never
imports, calls or unpickles anything named by the sender: a
hostile kernel can send the judge wrong data, never an object with behaviour. Only the kernel
accepts :class:`ArrowTable` (an Arrow IPC stream the judge sends).

Examples:
    >>> import numpy as np
    >>> decode_value(encode_value({"x": np.arange(3, dtype=np.int32), "t": (1, "a")}))["x"].dtype.name
    'int32'
    >>> decode_value({"$": "nd", "dtype": "|O", "shape": [1], "b64": ""})
    Traceback (most recent call last):
    ...
    raydata_course.judging.values.WireError: dtype '|O' is not allowed on the judge's wire
"""

from __future__ import annotations

import base64
from typing import Any, Callable

import numpy as np

from raydata_course.judging.records import (
    ArrowTable,
    DatasetData,
    FrameData,
    KernelRef,
    TableData,
    TensorData,
    TypeInfo,
)

__all__ = [
    "PLAIN_DTYPES",
    "MAX_TEXT_CHARS",
    "WireError",
    "KernelRef",
    "ArrowTable",
    "TypeInfo",
    "TableData",
    "FrameData",
    "TensorData",
    "DatasetData",
    "encode_value",
    "decode_value",
    "text_field",
    "map_leaves",
]

#: Dtypes an array or scalar may have on the wire (no object, void or datetime dtypes).
PLAIN_DTYPES = frozenset(
    ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32",
     "float64", "complex64", "complex128"])
#: Longest text kept from a kernel's exception message or ``repr``, in characters.
MAX_TEXT_CHARS = 2_000
#: The most a decoded string array may take at NumPy's fixed width, in bytes.
MAX_STR_ARRAY_BYTES = 256 * 1024 * 1024


class WireError(ValueError):
    """A frame or value that is not what the protocol allows (wrong type, too large, malformed)."""


_RECORDS = {cls.__name__: cls for cls in (KernelRef, TypeInfo, TableData, FrameData, TensorData, DatasetData)}


# ------------------------------------------------------------------------------ codec


def _array(value: np.ndarray) -> dict:
    if value.dtype.name in PLAIN_DTYPES:
        data = np.ascontiguousarray(value)
        return {"$": "nd", "dtype": data.dtype.str, "shape": list(data.shape),
                "b64": base64.b64encode(data.tobytes()).decode("ascii")}
    kind = "str" if value.dtype.kind in "US" else "object"
    return {"$": "nd", "dtype": kind, "shape": list(value.shape), "items": [encode_value(v) for v in value.reshape(-1)]}


def encode_value(value: Any) -> Any:
    """``value`` as JSON-ready data (see the module docstring for what may travel).

    Raises:
        WireError: for a value of any other type.
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if isinstance(value, float) and value != value:
            return {"$": "float", "v": "nan"}
        if isinstance(value, float) and value in (float("inf"), float("-inf")):
            return {"$": "float", "v": "inf" if value > 0 else "-inf"}
        return value
    if isinstance(value, np.ndarray):
        return _array(value)
    if isinstance(value, np.generic):
        if value.dtype.name not in PLAIN_DTYPES:
            return encode_value(value.item())
        return {"$": "np", "dtype": value.dtype.str, "b64": base64.b64encode(value.tobytes()).decode("ascii")}
    if isinstance(value, list):
        return [encode_value(v) for v in value]
    if isinstance(value, tuple):
        return {"$": "tuple", "items": [encode_value(v) for v in value]}
    if isinstance(value, dict):
        return {"$": "dict", "items": [[encode_value(k), encode_value(v)] for k, v in value.items()]}
    if isinstance(value, bytes):
        return {"$": "bytes", "b64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, ArrowTable):
        return {"$": "arrow", "b64": base64.b64encode(value.ipc).decode("ascii")}
    name = type(value).__name__
    if name in _RECORDS and type(value) is _RECORDS[name]:
        return {"$": "rec", "type": name, "fields": {k: encode_value(v) for k, v in value.__dict__.items()}}
    raise WireError(f"{type(value).__module__}.{type(value).__qualname__} cannot travel on the judge's wire")


def _b64(text: Any) -> bytes:
    if not isinstance(text, str):
        raise WireError("binary data must be base64 text")
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError) as exc:
        raise WireError(f"bad base64 data: {exc}") from None


def _dtype(text: Any) -> np.dtype:
    try:
        dtype = np.dtype(text) if isinstance(text, str) and len(text) <= 8 else None
    except TypeError:
        dtype = None
    if dtype is None or dtype.name not in PLAIN_DTYPES:
        raise WireError(f"dtype {text!r} is not allowed on the judge's wire")
    return dtype


def _shape(value: Any) -> tuple[int, ...]:
    if not isinstance(value, list) or len(value) > 8 or not all(isinstance(n, int) and 0 <= n for n in value):
        raise WireError(f"bad array shape {value!r}")
    return tuple(value)


def decode_value(data: Any, *, allow_arrow: bool = False) -> Any:
    """The value ``data`` (from :func:`encode_value`) stands for; only data types come back.

    Args:
        data: parsed JSON.
        allow_arrow: accept :class:`ArrowTable` (the kernel's side only; the judge never
            decodes Arrow data from a kernel).

    Raises:
        WireError: for anything the protocol does not allow.
    """
    if data is None or isinstance(data, (bool, str, int, float)):
        return data
    if isinstance(data, list):
        return [decode_value(v, allow_arrow=allow_arrow) for v in data]
    if not isinstance(data, dict):
        raise WireError(f"unexpected JSON value of type {type(data).__name__}")
    tag = data.get("$")
    if tag == "float":
        if data.get("v") not in ("nan", "inf", "-inf"):
            raise WireError("bad float")
        return float(data["v"])
    if tag == "nd":
        shape = _shape(data.get("shape"))
        size = int(np.prod(shape)) if shape else 1
        if data.get("dtype") in ("str", "object"):
            items = data.get("items")
            if not isinstance(items, list) or len(items) != size:
                raise WireError("array items do not match the shape")
            values = [decode_value(v, allow_arrow=allow_arrow) for v in items]
            if data["dtype"] == "str":
                if not all(isinstance(v, str) for v in values):
                    raise WireError("a string array holds something else")
                # NumPy stores every string at the longest one's width, 4 bytes a character.
                fixed_bytes = 4 * size * max(map(len, values), default=0)
                if fixed_bytes > MAX_STR_ARRAY_BYTES:
                    raise WireError(f"a string array of {size:,} items whose longest is {max(map(len, values)):,} "
                                    f"characters would take {fixed_bytes:,} bytes (at most {MAX_STR_ARRAY_BYTES:,})")
                return np.array(values, dtype=str).reshape(shape) if values else np.zeros(shape, dtype=str)
            out = np.empty(size, dtype=object)
            for i, v in enumerate(values):
                out[i] = v
            return out.reshape(shape)
        dtype = _dtype(data.get("dtype"))
        raw = _b64(data.get("b64"))
        if len(raw) != size * dtype.itemsize:
            raise WireError("array bytes do not match its shape and dtype")
        return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
    if tag == "np":
        dtype = _dtype(data.get("dtype"))
        raw = _b64(data.get("b64"))
        if len(raw) != dtype.itemsize:
            raise WireError("scalar bytes do not match its dtype")
        return np.frombuffer(raw, dtype=dtype)[0]
    if tag == "tuple":
        items = data.get("items")
        if not isinstance(items, list):
            raise WireError("bad tuple")
        return tuple(decode_value(v, allow_arrow=allow_arrow) for v in items)
    if tag == "dict":
        items = data.get("items")
        if not isinstance(items, list) or not all(isinstance(p, list) and len(p) == 2 for p in items):
            raise WireError("bad dict")
        out = {}
        for k, v in items:
            key = decode_value(k, allow_arrow=allow_arrow)
            if not isinstance(key, (str, int, float, bool, tuple, type(None))) and not isinstance(key, np.generic):
                raise WireError("a dict key must be a number, string or tuple")
            try:
                out[key] = decode_value(v, allow_arrow=allow_arrow)
            except TypeError:
                raise WireError("a dict key that cannot be hashed") from None
        return out
    if tag == "bytes":
        return _b64(data.get("b64"))
    if tag == "arrow":
        if not allow_arrow:
            raise WireError("Arrow data is accepted only by the kernel")
        return ArrowTable(_b64(data.get("b64")))
    if tag == "rec":
        cls = _RECORDS.get(data.get("type"))
        fields = data.get("fields")
        if cls is None or not isinstance(fields, dict):
            raise WireError(f"unknown record {data.get('type')!r}")
        values = {k: decode_value(v, allow_arrow=allow_arrow) for k, v in fields.items()}
        return _record(cls, values)
    raise WireError(f"unknown value tag {tag!r}")


def text_field(value: Any, what: str) -> str:
    """``value`` if it is text (cut to :data:`MAX_TEXT_CHARS`).

    Raises:
        WireError: if it is not text.
    """
    if not isinstance(value, str):
        raise WireError(f"{what} must be text")
    return value[:MAX_TEXT_CHARS]


def _record(cls, values: dict):
    try:
        if cls is KernelRef:
            attrs = values.get("attrs", ())
            if not isinstance(attrs, (tuple, list)) or not all(isinstance(a, str) for a in attrs):
                raise WireError("bad attribute path")
            return KernelRef(text_field(values["root"], "root"), text_field(values["name"], "name"), tuple(attrs))
        if cls is TypeInfo:
            mro = values.get("mro", ())
            if not isinstance(mro, (tuple, list)):
                raise WireError("bad MRO")
            return TypeInfo(text_field(values["module"], "module"), text_field(values["qualname"], "qualname"),
                            tuple(text_field(m, "MRO entry") for m in mro[:64]), text_field(values.get("text", ""), "text"))
        if cls in (TableData, FrameData):
            second = "types" if cls is TableData else "dtypes"
            names, kinds, columns = values["names"], values[second], values["columns"]
            if not (isinstance(names, tuple) and isinstance(kinds, tuple) and isinstance(columns, tuple)
                    and len(names) == len(kinds) == len(columns)):
                raise WireError("a table's names, types and columns must match")
            if not all(isinstance(c, (np.ndarray, list)) for c in columns):
                raise WireError("a table column must be an array or a list")
            if len({len(c) for c in columns}) > 1:
                raise WireError("a table's columns must have the same length")
            return cls(tuple(text_field(n, "column name") for n in names), tuple(text_field(t, "type") for t in kinds),
                       columns)
        if cls is TensorData:
            shape = values["shape"]
            if not isinstance(shape, tuple) or not all(isinstance(n, int) for n in shape):
                raise WireError("bad tensor shape")
            tensor_values = values.get("values")
            if tensor_values is not None and not isinstance(tensor_values, np.ndarray):
                raise WireError("tensor values must be an array")
            return TensorData(text_field(values["dtype"], "dtype"), shape, text_field(values["device"], "device"),
                              tensor_values)
        if cls is DatasetData:
            blocks = values.get("blocks", ())
            if not isinstance(values["type"], TypeInfo) or not isinstance(blocks, tuple) or not all(
                    isinstance(b, TableData) for b in blocks):
                raise WireError("bad dataset record")
            num_blocks = values.get("num_blocks")
            if num_blocks is not None and (not isinstance(num_blocks, int) or isinstance(num_blocks, bool)):
                raise WireError("bad num_blocks")
            return DatasetData(values["type"], blocks, num_blocks)
    except KeyError as exc:
        raise WireError(f"{cls.__name__} lacks field {exc}") from None
    raise WireError(f"unknown record {cls.__name__}")


def map_leaves(value: Any, leaf: Callable[[Any], Any]) -> Any:
    """``value`` with ``leaf`` applied to every item that is not a list, tuple or dict.

    Lists, tuples and dicts (their values; keys stay) are rebuilt with the same type. Both
    sides of a call's arguments use it: the judge to put references and Arrow tables on the
    wire, the kernel to turn them back into its objects.

    Examples:
        >>> map_leaves({"a": [1, (2, 3)]}, lambda x: x * 10)
        {'a': [10, (20, 30)]}
    """
    if isinstance(value, list):
        return [map_leaves(v, leaf) for v in value]
    if isinstance(value, tuple):
        return tuple(map_leaves(v, leaf) for v in value)
    if isinstance(value, dict):
        return {k: map_leaves(v, leaf) for k, v in value.items()}
    return leaf(value)
