"""The judge and its wire, without nbgrader or Ray: what may cross, and how a session ends.

A kernel's side (:func:`raydata_course.judging.kernel.serve`) runs in a thread of this
process against a :class:`raydata_grader.judge.Judge`, on a Unix socket in ``tmp_path``.
"""

from __future__ import annotations

import base64
import json
import socket
import struct
import threading
import time
from dataclasses import dataclass

import nbformat
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from raydata_course.judging import wire
from raydata_course.judging.kernel import serve, to_data
from raydata_grader import judge as judge_module
from raydata_grader.facts import observed, reported
from raydata_grader.judge import Judge, judges, load_checks, measured, notebook_reported
from raydata_grader.paths import ASSIGNMENTS, oracles_dir, release_notebook
from raydata_grader.remote import KernelRaised


# ------------------------------------------------------------------------------ the wire


def _roundtrip(value):
    frame = wire.encode_message(wire.Value(1, value))
    assert struct.unpack(">I", frame[:4])[0] == len(frame) - 4
    return wire.decode_message(frame[4:]).value


def test_data_values_travel_with_their_types():
    value = {"i": 3, "f": 2.5, "nan": float("nan"), "s": "x", "b": True, "n": None, "t": (1, "a"),
             "l": [1, [2]], "f32": np.arange(4, dtype=np.float32).reshape(2, 2), "u8": np.uint8(7),
             "strs": np.array(["a", "bc"]), "obj": np.array([np.arange(2), np.arange(3)], dtype=object),
             7: "int key", "raw": b"\x00\x01"}
    got = _roundtrip(value)
    assert got["i"] == 3 and got["s"] == "x" and got["t"] == (1, "a") and got[7] == "int key"
    assert np.isnan(got["nan"]) and got["raw"] == b"\x00\x01"
    assert got["f32"].dtype == np.float32 and got["f32"].shape == (2, 2) and got["f32"].flags.writeable
    assert isinstance(got["u8"], np.uint8) and got["u8"] == 7
    assert got["strs"].tolist() == ["a", "bc"] and [a.tolist() for a in got["obj"]] == [[0, 1], [0, 1, 2]]
    record = wire.TableData(("a",), ("int64",), (np.arange(3),))
    assert _roundtrip(record).column("a").tolist() == [0, 1, 2]


def _frame(payload) -> bytes:
    return json.dumps(payload).encode()


@pytest.mark.parametrize("payload,why", [
    ({"msg": "Exec", "code": "import os"}, "unknown message type"),
    ({"msg": "Value", "id": 1, "value": {"$": "nd", "dtype": "|O", "shape": [1], "b64": ""}}, "not allowed"),
    ({"msg": "Value", "id": 1, "value": {"$": "nd", "dtype": "<f8", "shape": [3], "b64": base64.b64encode(b"12").decode()}},
     "do not match"),
    ({"msg": "Value", "id": 1, "value": {"$": "nd", "dtype": "<f8", "shape": [1], "b64": "not base64!"}}, "base64"),
    ({"msg": "Value", "id": 1, "value": {"$": "rec", "type": "Popen", "fields": {}}}, "unknown record"),
    ({"msg": "Value", "id": 1, "value": {"$": "arrow", "b64": ""}}, "only by the kernel"),
    ({"msg": "Value", "id": 1, "value": {"$": "dict", "items": [[[1], 2]]}}, "dict key"),
    ({"msg": "Value", "id": "1", "value": 0}, "integer"),
    ({"msg": "Value", "id": 1, "value": 0, "extra": 1}, "unknown fields"),
    ({"msg": "Kept", "id": 1, "type": "not a record"}, "TypeInfo"),
    ([1, 2], "JSON object"),
])
def test_the_judge_refuses_what_the_protocol_does_not_allow(payload, why):
    with pytest.raises(wire.WireError, match=why):
        wire.decode_message(_frame(payload))


def test_deep_nesting_and_garbage_are_refused():
    deep = '{"msg": "Value", "id": 1, "value": ' + "[" * 100_000 + "]" * 100_000 + "}"
    with pytest.raises(wire.WireError):
        wire.decode_message(deep.encode())
    with pytest.raises(wire.WireError, match="not JSON"):
        wire.decode_message(b"\xff\xfe garbage")


def test_a_small_frame_cannot_decode_into_a_huge_string_array():
    """NumPy stores strings at the longest one's width: 600 items, one of a million characters,
    would be 2.4 GB decoded from a 1 MB frame."""
    from raydata_course.judging.values import decode_value

    with pytest.raises(wire.WireError, match="would take"):
        decode_value({"$": "nd", "shape": [600], "dtype": "str", "items": ["x" * 1_000_000] + [""] * 599})
    small = decode_value({"$": "nd", "shape": [2], "dtype": "str", "items": ["ab", "c"]})
    assert small.tolist() == ["ab", "c"] and small.dtype.kind == "U"


def test_an_oversized_frame_is_refused_before_it_is_read():
    a, b = socket.socketpair()
    try:
        a.sendall(struct.pack(">I", wire.MAX_FRAME_BYTES + 1))
        with pytest.raises(wire.WireError, match="over the"):
            wire.recv_message(b)
    finally:
        a.close()
        b.close()


def test_objects_with_behaviour_cannot_be_encoded():
    class Sneaky:
        def __eq__(self, other):
            return True

    with pytest.raises(wire.WireError, match="cannot travel"):
        wire.encode_message(wire.Value(1, Sneaky()))


def test_the_kernel_sends_data_not_objects():
    import torch

    @dataclass
    class Event:
        what: str
        n: int

    table = pa.table({"x": [1, 2], "s": ["a", None]})
    frame = pd.DataFrame({"x": [1.5, 2.5], "s": ["a", "b"]})
    data = to_data({"table": table, "frame": frame, "tensor": torch.zeros(2, 3), "meta": torch.zeros(2, device="meta"),
                    "event": Event("load", 2), "other": object()})
    assert data["table"].column("x").tolist() == [1, 2] and data["table"].column("s") == ["a", None]
    assert data["frame"].column("s") == ["a", "b"] and data["frame"].dtypes[0] == "float64"
    assert data["tensor"].dtype == "float32" and data["tensor"].shape == (2, 3) and data["tensor"].values.shape == (2, 3)
    assert data["meta"].device == "meta" and data["meta"].values is None
    assert data["event"] == {"what": "load", "n": 2}
    assert isinstance(data["other"], wire.TypeInfo) and data["other"].qualname == "object"
    _roundtrip(data)  # every part of it travels


# ------------------------------------------------------------------------------ sessions


def _judge(tmp_path, **checks):
    return Judge(checks, tmp_path / "judge.sock")


def _serve(judge, session, namespace):
    """Run the kernel's side and wait for it, as the executor waits for the grader's line."""
    thread, result = _serve_in_thread(judge, session, namespace)
    thread.join(60)
    return result


def _serve_in_thread(judge, session, namespace):
    result = {}

    def run():
        try:
            result["passed"] = serve(judge.socket_path, session.nonce, namespace=namespace)
        except Exception as exc:  # noqa: BLE001 - the test reads it
            result["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, result


@judges("a_hidden")
def _check_double(k):
    assert k.call("double", 21) == 42, "On another number, double is wrong."
    table = k.call(k.module("pyarrow").table, {"y": [1.5, 2.5]})
    assert table.type_of("y") == "double"


def test_a_session_runs_the_check_on_the_kernels_answers(tmp_path):
    judge = _judge(tmp_path, a_hidden=_check_double)
    for double, passed, message in ((lambda x: 2 * x, True, ""), (lambda x: x, False, "On another number, double is wrong.")):
        session = judge.open("a_hidden", 30)
        result = _serve(judge, session, {"double": double})
        verdict = judge.close(session)
        assert (verdict.passed, verdict.message) == (passed, message)
        assert result == {"passed": passed} and verdict.requests >= 2
    judge.shutdown()
    assert not judge.socket_path.exists()


@judges("a_hidden")
def _check_with_note(k):
    got = k.call("double", 21)
    assert got == 42, "On another number, double is wrong."
    return f"double(21) came back in one call; the margin is {'x' * 1000}"


def test_oracles_that_failed_to_import_in_their_thread_are_loaded_once_more(tmp_path):
    """A package imported from two threads at once can fail in one of them with
    ModuleNotFoundError (python/cpython#83065; seen as scipy.spatial._kdtree in the judge's
    loading thread): the load is tried once more, and its second outcome stands."""
    calls = []

    def flaky():
        calls.append(threading.current_thread().name)
        if len(calls) == 1:
            raise ModuleNotFoundError("No module named 'scipy.spatial._kdtree'")
        return {"a_hidden": _check_double}

    judge = Judge(flaky, tmp_path / "flaky.sock")
    assert set(judge.checks) == {"a_hidden"} and set(judge.checks) == {"a_hidden"}
    assert len(calls) == 2 and calls[0].startswith("judge-load") and not calls[1].startswith("judge-load")

    def broken():
        calls.append("broken")
        raise ModuleNotFoundError("No module named 'not_installed'")

    calls.clear()
    judge = Judge(broken, tmp_path / "broken.sock")
    for _ in range(3):  # tried twice in all, then the error stands
        with pytest.raises(ModuleNotFoundError, match="not_installed"):
            judge.checks
    assert calls == ["broken", "broken"]

    def wrong():
        calls.append("wrong")
        raise ValueError("an oracle's own error")

    calls.clear()
    judge = Judge(wrong, tmp_path / "wrong.sock")
    with pytest.raises(ValueError):
        judge.checks
    assert calls == ["wrong"]  # not an import: not tried again


def test_a_passing_check_may_leave_a_short_note_and_a_failing_one_only_its_reason(tmp_path):
    judge = _judge(tmp_path, a_hidden=_check_with_note)
    session = judge.open("a_hidden", 30)
    _serve(judge, session, {"double": lambda x: 2 * x})
    verdict = judge.close(session)
    assert verdict.passed and verdict.message.startswith("double(21) came back") and len(verdict.message) == 400
    session = judge.open("a_hidden", 30)
    _serve(judge, session, {"double": lambda x: x})
    verdict = judge.close(session)
    assert not verdict.passed and verdict.message == "On another number, double is wrong."
    judge.shutdown()


def test_rays_retry_advice_and_process_ids_are_cut_from_what_the_student_reads(tmp_path):
    task = "\x1b[36mray::ReadRange->MapBatches(bad)()\x1b[39m (pid=26934, ip=192.0.2.2)"
    ray_text = "\n".join([task, '  File "<cell>", line 4, in bad', "ValueError: columns differ: got 3, expected 4.", "",
                          "The above exception was the direct cause of the following exception:", "", task,
                          "ray.exceptions.UserCodeException: UDF failed to process a data block.",
                          "Failed to apply UDF transform after 1/1 attempts (total backoff 0.0s).",
                          "To change retry attempts, backoff, or which errors are retried, configure ..."])

    def raise_like_ray(x):
        raise RuntimeError(ray_text)

    judge = _judge(tmp_path, a_hidden=_check_double)
    session = judge.open("a_hidden", 30)
    _serve(judge, session, {"double": raise_like_ray})
    message = judge.close(session).message
    assert message == ("your code raised RuntimeError: ValueError: columns differ: got 3, expected 4. (in the Ray "
                       "task ReadRange->MapBatches(bad), line 4 of bad) Call your function on inputs of other sizes "
                       "and shapes to reproduce it."), message
    for gone in ("pid=", "attempts", "retry", "\x1b", "..", "direct cause"):
        assert gone not in message, gone
    judge.shutdown()


def test_the_students_exception_is_reported_in_words(tmp_path):
    judge = _judge(tmp_path, a_hidden=_check_double)
    session = judge.open("a_hidden", 30)
    _serve(judge, session, {"double": lambda x: 1 / 0})
    verdict = judge.close(session)
    assert not verdict.passed and "your code raised ZeroDivisionError: division by zero" in verdict.message
    session = judge.open("a_hidden", 30)
    _serve(judge, session, {})
    assert "name 'double' is not defined in your notebook" in judge.close(session).message


def test_a_cell_the_judge_never_heard_from_fails(tmp_path):
    judge = _judge(tmp_path, a_hidden=_check_double)
    session = judge.open("a_hidden", 2)
    verdict = judge.close(session, grace_s=0.5)
    assert not verdict.passed and "never heard from this cell" in verdict.message
    assert judge.verdicts["a_hidden"] is verdict


def test_a_wrong_nonce_is_ignored_and_the_right_one_judged(tmp_path):
    judge = _judge(tmp_path, a_hidden=_check_double)
    session = judge.open("a_hidden", 30)
    impostor = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    impostor.connect(str(judge.socket_path))
    wire.send_message(impostor, wire.Hello("not-the-nonce"))
    _serve(judge, session, {"double": lambda x: 2 * x})
    assert judge.close(session).passed
    impostor.close()


def test_a_full_accept_queue_does_not_cost_the_next_cell_its_verdict(tmp_path, monkeypatch):
    """While the judge waits on a silent connection, a flood fills its accept queue, and a Unix
    socket with a full queue refuses a connect at once: the kernel's side tries again."""
    monkeypatch.setattr(judge_module, "HELLO_TIMEOUT_S", 1.0)
    judge = _judge(tmp_path, a_hidden=_check_double)
    session = judge.open("a_hidden", 30)
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    silent.connect(str(judge.socket_path))  # holds the session's thread for HELLO_TIMEOUT_S
    time.sleep(0.2)
    queued = []
    while len(queued) < 256:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            sock.connect(str(judge.socket_path))
        except BlockingIOError:
            sock.close()
            break
        sock.sendall(b"\xff" * 4 + b"garbage")
        queued.append(sock)
    assert len(queued) < 256, "the accept queue never filled"
    result = _serve(judge, session, {"double": lambda x: 2 * x})
    assert result == {"passed": True} and judge.close(session).passed
    for sock in [silent, *queued]:
        sock.close()


def test_a_kernel_that_hangs_up_or_sends_garbage_fails_its_cell(tmp_path):
    judge = _judge(tmp_path, a_hidden=_check_double)
    session = judge.open("a_hidden", 30)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(judge.socket_path))
    wire.send_message(sock, wire.Hello(session.nonce))
    wire.recv_message(sock, allow_arrow=True)  # the first call
    sock.close()
    verdict = judge.close(session)
    assert not verdict.passed and "did not finish" in verdict.message
    session = judge.open("a_hidden", 30)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(judge.socket_path))
    wire.send_message(sock, wire.Hello(session.nonce))
    request = wire.recv_message(sock, allow_arrow=True)
    sock.sendall(struct.pack(">I", 9) + b'{"msg":1}')
    verdict = judge.close(session)
    assert not verdict.passed and "cannot read as data" in verdict.message and request.id == 1
    sock.close()


def test_a_check_that_meets_odd_data_fails_the_cell_without_breaking(tmp_path):
    @judges("b_hidden")
    def check(k):
        got = k.call("counts")
        assert sorted(got) == [1, 2], "wrong counts"

    judge = _judge(tmp_path, b_hidden=check)
    session = judge.open("b_hidden", 30)
    _serve(judge, session, {"counts": lambda: [1, "x", None]})
    verdict = judge.close(session)
    assert not verdict.passed and "unexpected kind" in verdict.message and "TypeError" in verdict.detail


def test_the_per_cell_limit_ends_a_session(tmp_path):
    @judges("c_hidden")
    def check(k):
        k.call("slow")

    judge = _judge(tmp_path, c_hidden=check)
    session = judge.open("c_hidden", 1.5)
    thread, _ = _serve_in_thread(judge, session, {"slow": lambda: time.sleep(5)})
    time.sleep(2)  # the cell's per-cell limit passes while the kernel is busy
    verdict = judge.close(session)
    assert not verdict.passed and "did not finish" in verdict.message and verdict.seconds < 4


def test_raised_errors_can_be_expected_by_a_check(tmp_path):
    @judges("d_hidden")
    def check(k):
        try:
            k.call("pool_for", 0)
        except KernelRaised as exc:
            assert exc.is_a("ValueError"), "must raise ValueError"
        else:
            raise AssertionError("must raise")

    def pool_for(n):
        raise ValueError("no CPU")

    judge = _judge(tmp_path, d_hidden=check)
    session = judge.open("d_hidden", 30)
    _serve(judge, session, {"pool_for": pool_for})
    assert judge.close(session).passed


# ------------------------------------------------------------------------------ the oracles


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_grade_cell_has_exactly_one_check(assignment):
    checks = load_checks(assignment, oracles_dir())
    release = nbformat.read(release_notebook(assignment), as_version=4)
    grade_cells = {c.metadata["nbgrader"]["grade_id"] for c in release.cells if c.metadata.get("nbgrader", {}).get("grade")}
    assert set(checks) == grade_cells
    assert all(fn.__doc__ is None or isinstance(fn.__doc__, str) for fn in checks.values())


# ------------------------------------------------------------------------------ integrity


def test_the_grader_notices_a_changed_gradebook_or_oracle(tmp_path):
    from nbgrader.api import Gradebook

    from raydata_grader.course_dir import prepare_course_dir
    from raydata_grader.integrity import gradebook_problems, oracle_changes
    from raydata_grader.judge import oracle_digests

    course = prepare_course_dir(tmp_path / "course", ("data01",))
    release = nbformat.read(release_notebook("data01", course), as_version=4)
    assert gradebook_problems(course, "data01", release) == []
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        cell = gb.find_source_cell("block_row_counts_visible", "data01", "data01")
        cell.source = "pass  # a test that always passes"
        gb.db.commit()
    assert gradebook_problems(course, "data01", release) == [
        "the gradebook's copy of cell 'block_row_counts_visible' differs from the release"]
    (tmp_path / "oracles").mkdir()
    (tmp_path / "oracles" / "data01.py").write_text("x = 1\n")
    before = oracle_digests(tmp_path / "oracles")
    (tmp_path / "oracles" / "data01.py").write_text("x = 2\n")
    (tmp_path / "oracles" / "data09.py").write_text("")
    assert oracle_changes(before, oracle_digests(tmp_path / "oracles")) == ["data01.py changed", "data09.py was added"]


def test_a_failure_names_the_input_it_failed_on_but_not_its_values():
    import pyarrow as pa

    from raydata_grader.input_shapes import about_input, describe_tables
    from raydata_grader.error_text import raised_message as _raised_message
    from raydata_grader.remote import KernelRaised

    tables = [pa.table({"id": list(range(26))}), pa.table({"id": list(range(25))})]
    described = describe_tables(tables)
    assert described == "a dataset of 51 rows in 2 blocks (26, 25 rows), column id"
    assert describe_tables(tables, sizes=False) == "a dataset of 51 rows in 2 blocks, column id"
    with pytest.raises(AssertionError) as failed:
        with about_input(described):
            assert False, "The counts are wrong."  # noqa: B011, PT015
    assert str(failed.value) == f"The counts are wrong. The input: {described}."
    with pytest.raises(KernelRaised) as raised:
        with about_input(described):
            raise KernelRaised("ValueError", "bad shape")
    message = _raised_message(raised.value)
    assert message.startswith("your code raised ValueError: bad shape.") and f"It raised on {described}" in message
    # the innermost description wins; an outer one does not stack on top
    with pytest.raises(AssertionError) as nested:
        with about_input("outer"), about_input("inner"):
            assert False, "Wrong."  # noqa: B011, PT015
    assert str(nested.value) == "Wrong. The input: inner."


@judges("a_hidden", facts=[reported("the kernel's own figure", "the kernel")])
def _check_reported_note(k):
    k.call("double", 1)
    return notebook_reported("your run took 3 s")


@judges("a_hidden", facts=[observed("a call's time", "the judge's clock")])
def _check_timed_note(k):
    result, seconds = k.timed_call("slow_double", 21)
    assert result.get() == 42 and seconds >= 0.2, "the judge's clock saw the call take its time"
    assert not k.observable()  # no sandbox here: what would be observed is taken from the kernel
    return measured(f"it took {seconds:.1f} s")


def test_a_note_says_where_its_figures_come_from_and_a_verdict_what_it_rests_on(tmp_path):
    """A check that rests on a reported fact says so in its verdict (its points can be held); a
    note is labelled observed or reported; a check that could not observe counts as reported."""
    def slow_double(x):
        time.sleep(0.2)
        return 2 * x

    for check, source in ((_check_reported_note, "reported"), (_check_timed_note, "observed")):
        judge = _judge(tmp_path, a_hidden=check)
        session = judge.open("a_hidden", 30)
        _serve(judge, session, {"double": lambda x: 2 * x, "slow_double": slow_double})
        verdict = judge.close(session)
        judge.shutdown()
        assert verdict.passed, verdict.message
        assert verdict.note_source == source and verdict.reported
        assert verdict.to_json()["reported"] is True and verdict.to_json()["note_source"] == source


def test_a_class_is_known_by_identity_not_by_name():
    """``is_instance`` looks the class itself up in the type's MRO: a class that takes Ray's
    name and module is not Ray's, and ``__class__`` cannot pretend."""
    from ray.data.collate_fn import CollateFn, NumpyBatchCollateFn

    from raydata_course.judging.helpers import is_instance

    class Fake:
        pass

    Fake.__module__, Fake.__qualname__, Fake.__name__ = "ray.data.collate_fn", "CollateFn", "CollateFn"

    class Pretender:
        __class__ = CollateFn  # what isinstance() would believe

    class Real(NumpyBatchCollateFn):
        def __call__(self, batch):
            return batch

    assert is_instance(Real(), "ray.data.collate_fn", "CollateFn")
    assert not is_instance(Fake(), "ray.data.collate_fn", "CollateFn")
    assert isinstance(Pretender(), CollateFn) and not is_instance(Pretender(), "ray.data.collate_fn", "CollateFn")


def test_warnings_are_captured_whatever_the_notebook_did_to_logging():
    """The helper that reads Ray Data's warnings undoes, while it runs, what a notebook can do to
    its logger family: a filter, a raised level, propagation cut, a logger disabled or a method
    replaced on a child logger; and it puts all of that back afterwards."""
    import logging

    from raydata_course.judging import helpers

    child = logging.getLogger("course_test.family.child")
    parent = logging.getLogger("course_test.family")
    drop = lambda record: False  # noqa: E731
    child.addFilter(drop)
    child.setLevel(logging.CRITICAL)
    child.propagate = False
    parent.disabled = True
    child.handle = lambda record: None
    try:
        got = helpers.call_capturing_warnings(lambda: child.warning("concurrency is deprecated") or 7,
                                              logger_name="course_test.family")
        assert got == {"result": 7, "messages": ["concurrency is deprecated"]}
        assert child.filters == [drop] and child.level == logging.CRITICAL and child.propagate is False
        assert parent.disabled is True and "handle" in vars(child)
    finally:
        child.filters.clear()
        child.setLevel(logging.NOTSET)
        child.propagate = True
        parent.disabled = False
        vars(child).pop("handle", None)
