"""What an oracle holds while it judges a cell: the kernel, seen from outside, as a proxy.

An oracle (``autograder/oracles/<assignment>.py``) is a function of a :class:`Kernel`. It names
objects in the graded kernel (:meth:`Kernel.student`, :meth:`Kernel.module`), calls them on
inputs it builds, and fetches results **as data** (:mod:`raydata_course.judging.wire`)::

    ds = k.module("ray.data").from_arrow([table_a, table_b])   # runs in the kernel; kept there
    counts = k.call("block_row_counts", ds)                     # the student's answer, as data
    assert counts == [3, 5], "On a dataset of ..., the counts are wrong."

Each call is one request to the kernel and one reply. A reply is decoded into plain data
only; the oracle's own code and its expected values stay in this process. When the student's
code raises, the call raises :class:`KernelRaised`; when the kernel stops answering (killed,
interrupted at the per-cell limit, past the deadline), :class:`KernelGone`.
"""

from __future__ import annotations

import io
import socket
import time
from dataclasses import replace
from typing import Any

from raydata_course.judging.wire import (
    ArrowTable,
    Call,
    Fetch,
    Kept,
    KernelRef,
    Raised,
    TypeInfo,
    Value,
    WireError,
    map_leaves,
    recv_message,
    send_message,
)

__all__ = ["Kernel", "Remote", "KernelRaised", "KernelGone"]


class KernelRaised(Exception):
    """The student's code raised in the kernel.

    Attributes:
        type_name: the exception's class name (``"ValueError"``).
        message: its text (the student's, or their libraries'), cut by the kernel.
        mro: its class's MRO names.
    """

    def __init__(self, type_name: str, message: str, mro: tuple[str, ...] = ()):
        super().__init__(f"{type_name}: {message}")
        self.type_name, self.message, self.mro = type_name, message, mro

    def is_a(self, name: str) -> bool:
        """True when the kernel's exception is a ``name`` (``"ValueError"``), by its MRO."""
        return name == self.type_name or name in self.mro


class KernelGone(Exception):
    """The kernel stopped answering: closed the connection, died, or ran past the deadline."""


class Remote:
    """An object in the kernel, named by a path (:class:`~raydata_course.judging.wire.KernelRef`).

    Attribute access builds a longer path without asking the kernel; calling it asks the
    kernel to call the object and keep the result (another ``Remote``); :meth:`get` fetches
    it as data. Use :meth:`attr` for an attribute whose name is one of this class's own.
    """

    __slots__ = ("_kernel", "_ref", "_type")

    def __init__(self, kernel: "Kernel", ref: KernelRef, type_info: TypeInfo | None = None):
        self._kernel, self._ref, self._type = kernel, ref, type_info

    def __getattr__(self, name: str) -> "Remote":
        if name.startswith("__"):
            raise AttributeError(name)
        return self.attr(name)

    def attr(self, name: str) -> "Remote":
        """The object's attribute ``name``, as a ``Remote`` (not fetched)."""
        return Remote(self._kernel, replace(self._ref, attrs=self._ref.attrs + (name,)))

    def __call__(self, *args: Any, **kwargs: Any) -> "Remote":
        return self._kernel.remote_call(self, *args, **kwargs)

    def get(self, how: str = "data") -> Any:
        """The object as data (``how``: ``"data"``, ``"type"``, ``"dataset"``)."""
        return self._kernel.fetch(self, how)

    @property
    def type(self) -> TypeInfo:
        """What the kernel said the object is (asked once)."""
        if self._type is None:
            self._type = self.get("type")
        return self._type

    def __repr__(self) -> str:
        path = ".".join((self._ref.name, *self._ref.attrs))
        return f"Remote({self._ref.root}:{path})"


def _arg_leaf(value: Any) -> Any:
    """One argument as it goes on the wire: a kernel object by reference, an Arrow table as IPC."""
    if isinstance(value, Remote):
        return value._ref
    if type(value).__module__.startswith("pyarrow") and type(value).__name__ == "Table":
        return _arrow_ipc(value)
    return value


def _arrow_ipc(table) -> ArrowTable:
    import pyarrow as pa

    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return ArrowTable(sink.getvalue())


class Kernel:
    """The graded kernel, for one cell's oracle: requests go out, data comes back.

    Args:
        conn: the kernel's connection to the judge (a connected Unix socket).
        deadline: ``time.monotonic()`` after which a request fails with :class:`KernelGone`.
        outside: the kernel's sandbox as the host sees it (:class:`raydata_grader.outside.SandboxView`),
            or None where the kernel runs without one.
    """

    def __init__(self, conn: socket.socket, deadline: float, outside=None):
        self._conn, self._deadline, self._next_id = conn, deadline, 0
        #: Requests sent (for the judge's log).
        self.requests = 0
        #: The sandbox, seen from the host (None without a sandbox).
        self.outside = outside
        #: Set by a check that had to take from the kernel a fact it would have observed
        #: (no sandbox to observe): the verdict then rests on a reported fact.
        self.took_reported = False

    def observable(self) -> bool:
        """True when the judge can observe the sandbox from the host; otherwise the check
        falls back to what the kernel reports, and the verdict counts as resting on it."""
        if self.outside is not None and self.outside.inside_pid() is not None:
            return True
        self.took_reported = True
        return False

    def timed_call(self, target: "Remote | str", *args: Any, **kwargs: Any) -> tuple["Remote", float]:
        """``remote_call``, timed here with the judge's own clock: (result kept in the kernel, seconds).

        The time is the whole request, the student's code and the message's way in and out
        (a few milliseconds), measured outside the kernel.
        """
        start = time.perf_counter()
        result = self.remote_call(target, *args, **kwargs)
        return result, time.perf_counter() - start

    def is_instance(self, target: "Remote | str", class_path: str) -> bool:
        """Whether the kernel's object is an instance of the class at ``class_path``
        (``"ray.data.dataset.MaterializedDataset"``): the class itself, imported in the kernel,
        is looked for in the object's type's MRO (by identity: a class that only takes the name
        is not it). A reported fact (:func:`raydata_course.judging.helpers.is_instance`)."""
        module, _, name = class_path.rpartition(".")
        remote = target if isinstance(target, Remote) else self.student(target)
        return bool(self.call(self.helper("is_instance"), remote, module, name))

    # -- naming objects in the kernel
    def student(self, name: str) -> Remote:
        """A global of the graded notebook (the student's function, or a visible test's variable)."""
        return Remote(self, KernelRef("student", name))

    def module(self, dotted: str) -> Remote:
        """An importable module of the kernel's environment, e.g. ``"ray.data"``."""
        return Remote(self, KernelRef("import", dotted))

    def helper(self, name: str) -> Remote:
        """One of the kernel-side helpers, :mod:`raydata_course.judging.helpers`."""
        return self.module("raydata_course.judging.helpers").attr(name)

    # -- requests
    def remote_call(self, target: Remote | str, *args: Any, **kwargs: Any) -> Remote:
        """Call ``target`` (a :class:`Remote`, or a notebook global's name) in the kernel; keep the result there."""
        ref = self._ref(target)
        self._next_id += 1
        request = Call(self._next_id, ref, tuple(self._arg(a) for a in args), {k: self._arg(v) for k, v in kwargs.items()})
        reply = self._ask(request)
        if not isinstance(reply, Kept):
            raise WireError(f"the kernel answered a call with {type(reply).__name__}")
        return Remote(self, KernelRef("handle", str(request.id)), reply.type)

    def fetch(self, target: Remote | str, how: str = "data") -> Any:
        """``target`` as data (see :func:`raydata_course.judging.kernel.to_data`)."""
        self._next_id += 1
        reply = self._ask(Fetch(self._next_id, self._ref(target), how))
        if not isinstance(reply, Value):
            raise WireError(f"the kernel answered a fetch with {type(reply).__name__}")
        return reply.value

    def call(self, target: Remote | str, *args: Any, **kwargs: Any) -> Any:
        """``target(*args, **kwargs)`` in the kernel, its result fetched as data."""
        return self.remote_call(target, *args, **kwargs).get()

    def value(self, name: str, how: str = "data") -> Any:
        """The notebook global ``name`` as data (a visible test's result, say)."""
        return self.fetch(self.student(name), how)

    # -- plumbing
    def _ref(self, target: Remote | str) -> KernelRef:
        if isinstance(target, Remote):
            return target._ref
        if isinstance(target, str):
            return KernelRef("student", target)
        raise TypeError(f"a kernel call needs a Remote or a global's name, got {type(target).__name__}")

    def _arg(self, value: Any) -> Any:
        return map_leaves(value, _arg_leaf)

    def _ask(self, request):
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            raise KernelGone("the per-cell time limit passed before the hidden test finished")
        try:
            self._conn.settimeout(remaining)
            send_message(self._conn, request)
            reply = recv_message(self._conn)
        except (socket.timeout, TimeoutError):
            raise KernelGone("the kernel did not answer before the per-cell time limit") from None
        except (ConnectionError, OSError) as exc:
            raise KernelGone(f"the kernel closed the connection ({type(exc).__name__})") from None
        finally:
            self.requests += 1
        if getattr(reply, "id", None) != request.id:
            raise WireError(f"the kernel answered request {getattr(reply, 'id', None)} to request {request.id}")
        if isinstance(reply, Raised):
            raise KernelRaised(reply.type_name, reply.message, reply.mro)
        return reply
