"""The judge's wire: typed messages and a data-only codec between the grader and a kernel.

Every message between the trusted judge (the instructor's grader) and the kernel it grades
is one of the dataclasses below, sent as one frame: a 4-byte big-endian length, then UTF-8
JSON. Values inside messages are **data only** (:mod:`raydata_course.judging.values`, whose
names this module re-exports): ``None``, booleans, numbers, strings, lists, tuples, dicts,
NumPy arrays and scalars of plain dtypes, and the inert records :class:`TableData`,
:class:`FrameData`, :class:`TensorData`, :class:`DatasetData` and :class:`TypeInfo`. Decoding
never imports, calls or unpickles anything named by the sender, so a hostile kernel can send
the judge wrong data but never an object with behaviour.

The judge's side also sends references to objects that live in the kernel
(:class:`KernelRef`) and Arrow tables (:class:`ArrowTable`, an Arrow IPC stream); only the
kernel decodes those.

Examples:
    >>> import numpy as np
    >>> frame = encode_message(Value(3, {"counts": [1, 2], "x": np.arange(3, dtype=np.int32)}))
    >>> msg = decode_message(frame[4:])
    >>> msg.id, msg.value["counts"], msg.value["x"].dtype.name
    (3, [1, 2], 'int32')
    >>> decode_message(b'{"msg": "Exec", "code": "import os"}')
    Traceback (most recent call last):
    ...
    raydata_course.judging.values.WireError: unknown message type 'Exec'
"""

from __future__ import annotations

import json
import socket
import struct
from dataclasses import dataclass, field
from typing import Any

from raydata_course.judging.values import (
    MAX_TEXT_CHARS,
    PLAIN_DTYPES,
    ArrowTable,
    DatasetData,
    FrameData,
    KernelRef,
    TableData,
    TensorData,
    TypeInfo,
    WireError,
    decode_value,
    encode_value,
    map_leaves,
    text_field,
)

__all__ = [
    "MAX_FRAME_BYTES",
    "MAX_TEXT_CHARS",
    "PLAIN_DTYPES",
    "WireError",
    "KernelRef",
    "ArrowTable",
    "TypeInfo",
    "TableData",
    "FrameData",
    "TensorData",
    "DatasetData",
    "Hello",
    "Call",
    "Fetch",
    "Done",
    "Kept",
    "Value",
    "Raised",
    "encode_value",
    "decode_value",
    "map_leaves",
    "encode_message",
    "decode_message",
    "send_message",
    "recv_message",
]

#: The largest frame either side accepts, in bytes; a larger one ends the session.
MAX_FRAME_BYTES = 64 * 1024 * 1024


# ------------------------------------------------------------------------------ messages


@dataclass(frozen=True)
class Hello:
    """Kernel to judge, first: the one-time ``nonce`` the grader gave this cell's session."""

    nonce: str


@dataclass(frozen=True)
class Call:
    """Judge to kernel: call ``target(*args, **kwargs)`` and keep the result as handle ``id``."""

    id: int
    target: KernelRef
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Fetch:
    """Judge to kernel: send ``target`` back as data (``how``: ``"data"``, ``"dataset"``, ``"type"``)."""

    id: int
    target: KernelRef
    how: str = "data"


@dataclass(frozen=True)
class Done:
    """Judge to kernel, last: the session is over (``passed`` and the student-facing message)."""

    passed: bool
    message: str = ""


@dataclass(frozen=True)
class Kept:
    """Kernel to judge: request ``id``'s result is kept in the kernel; ``type`` says what it is."""

    id: int
    type: TypeInfo


@dataclass(frozen=True)
class Value:
    """Kernel to judge: request ``id``'s object, as data."""

    id: int
    value: Any


@dataclass(frozen=True)
class Raised:
    """Kernel to judge: request ``id`` raised.

    Attributes:
        id: the request.
        type_name: the exception's class name, e.g. ``"ValueError"``.
        message: ``str(exc)``, cut to :data:`MAX_TEXT_CHARS`.
        mro: the exception class's MRO names (``"ValueError"``, ``"Exception"``, ...).
    """

    id: int
    type_name: str
    message: str
    mro: tuple[str, ...] = ()


_MESSAGES = {cls.__name__: cls for cls in (Hello, Call, Fetch, Done, Kept, Value, Raised)}


def encode_message(message: Any) -> bytes:
    """One frame (length prefix and JSON) for ``message``.

    Raises:
        WireError: if ``message`` is not a protocol message or is over :data:`MAX_FRAME_BYTES`.
    """
    name = type(message).__name__
    if _MESSAGES.get(name) is not type(message):
        raise WireError(f"{name} is not a judge message")
    payload = {"msg": name, **{k: encode_value(v) for k, v in message.__dict__.items()}}
    body = json.dumps(payload, separators=(",", ":"), allow_nan=False).encode("utf-8")
    if len(body) > MAX_FRAME_BYTES:
        raise WireError(f"a {name} of {len(body):,} bytes is over the judge's {MAX_FRAME_BYTES:,}-byte limit")
    return struct.pack(">I", len(body)) + body


def decode_message(body: bytes, *, allow_arrow: bool = False) -> Any:
    """The message in one frame's JSON ``body`` (without its length prefix).

    Raises:
        WireError: for malformed JSON, an unknown message or field, or a disallowed value.
    """
    try:
        payload = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise WireError(f"a frame that is not JSON ({type(exc).__name__})") from None
    if not isinstance(payload, dict):
        raise WireError("a frame must hold a JSON object")
    name = payload.pop("msg", None)
    cls = _MESSAGES.get(name) if isinstance(name, str) else None
    if cls is None:
        raise WireError(f"unknown message type {name!r}")
    try:
        fields = {k: decode_value(v, allow_arrow=allow_arrow) for k, v in payload.items()}
    except RecursionError:
        raise WireError("a value nested too deeply") from None
    expected = set(cls.__dataclass_fields__)
    if set(fields) - expected:
        raise WireError(f"{name} has unknown fields {sorted(set(fields) - expected)}")
    return _checked(cls, fields)


def _checked(cls, fields: dict):
    def integer(key):
        value = fields.get(key)
        if not isinstance(value, int) or isinstance(value, bool):
            raise WireError(f"{cls.__name__}.{key} must be an integer")
        return value

    if cls is Hello:
        return Hello(text_field(fields.get("nonce"), "nonce"))
    if cls in (Call, Fetch):
        target = fields.get("target")
        if not isinstance(target, KernelRef):
            raise WireError(f"{cls.__name__}.target must be a KernelRef")
        if cls is Fetch:
            return Fetch(integer("id"), target, text_field(fields.get("how", "data"), "how"))
        args, kwargs = fields.get("args", ()), fields.get("kwargs", {})
        if not isinstance(args, tuple) or not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
            raise WireError("Call.args must be a tuple and Call.kwargs a dict with text keys")
        return Call(integer("id"), target, args, kwargs)
    if cls is Done:
        if not isinstance(fields.get("passed"), bool):
            raise WireError("Done.passed must be a boolean")
        return Done(fields["passed"], text_field(fields.get("message", ""), "message"))
    if cls is Kept:
        if not isinstance(fields.get("type"), TypeInfo):
            raise WireError("Kept.type must be a TypeInfo")
        return Kept(integer("id"), fields["type"])
    if cls is Value:
        return Value(integer("id"), fields.get("value"))
    mro = fields.get("mro", ())
    if not isinstance(mro, tuple):
        raise WireError("Raised.mro must be a tuple")
    return Raised(integer("id"), text_field(fields.get("type_name"), "type_name"), text_field(fields.get("message", ""), "message"),
                  tuple(text_field(m, "MRO entry") for m in mro[:64]))


def send_message(sock: socket.socket, message: Any) -> None:
    """Send ``message`` as one frame on ``sock``."""
    sock.sendall(encode_message(message))


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(min(n - got, 1 << 20))
        if not chunk:
            raise ConnectionError("the other side closed the connection")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def recv_message(sock: socket.socket, *, allow_arrow: bool = False, max_bytes: int = MAX_FRAME_BYTES) -> Any:
    """Receive one frame from ``sock`` and decode it.

    Raises:
        ConnectionError: if the other side closed the connection.
        socket.timeout: if the socket's timeout passed first.
        WireError: for a frame over ``max_bytes`` or one :func:`decode_message` refuses.
    """
    (length,) = struct.unpack(">I", _recv_exact(sock, 4))
    if length > max_bytes:
        raise WireError(f"a frame of {length:,} bytes is over the {max_bytes:,}-byte limit")
    return decode_message(_recv_exact(sock, length), allow_arrow=allow_arrow)
