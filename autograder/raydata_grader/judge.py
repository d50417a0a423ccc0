"""The judge: a trusted process that decides every grade cell, outside the graded kernel.

The oracles (``autograder/oracles/<assignment>.py``) register one check per grade cell with
:func:`judges`: the hidden tests, and a twin of every visible test. The grader's executor
(:class:`raydata_grader.nbgrader_steps.TrackedExecute`) runs each grade cell in the sandboxed
kernel as the student sees it, then opens a *session* for it: the kernel connects to the
judge's Unix socket (:func:`raydata_course.judging.kernel.serve`), the check runs here and
calls the student's code there through a :class:`~raydata_grader.remote.Kernel`, and the
session ends in a :class:`Verdict`. A cell's score in the gradebook, the CSV and the feedback
is its verdict's (:class:`raydata_grader.nbgrader_steps.JudgedGrades`); a grade cell the
judge never heard from scores 0.

The check's code and expected values stay in this process. What crosses the socket is what a
check asks for and the data the kernel sends back, decoded as data only.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import secrets
import socket
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

from raydata_course.judging.wire import Done, Hello, WireError, recv_message, send_message
from raydata_grader.error_text import raised_message as _raised_message
from raydata_grader.error_text import ray_error_text
from raydata_grader.facts import forged_by, rests_on_reported
from raydata_grader.remote import Kernel, KernelGone, KernelRaised

if TYPE_CHECKING:
    from raydata_grader.facts import Fact

__all__ = ["Check", "Note", "measured", "notebook_reported", "Verdict", "Judge", "judges", "load_checks",
           "oracle_digests", "active_judge", "judging"]

#: A check: a function of the kernel that returns when the cell passes and raises
#: ``AssertionError`` (with a message for the student) when it does not. It may return a
#: short :class:`Note` for the student about the pass (a measured margin, say), at most
#: :data:`NOTE_CHARS` characters are kept; anything else it returns is ignored.
Check = Callable[[Kernel], "Note | None"]

#: The longest note a passing check's return value may leave under its cell.
NOTE_CHARS = 400


@dataclass(frozen=True)
class Note:
    """What a passing check says under its cell, and where its figures come from.

    Attributes:
        text: the note (at most :data:`NOTE_CHARS` characters are kept).
        source: ``"observed"`` for figures the judge measured outside the kernel (the
            feedback says "The grader measured"), ``"reported"`` for the notebook's own
            figures (it says so), ``""`` for a remark with no figure.
    """

    text: str
    source: str = ""


def measured(text: str) -> Note:
    """A note whose figures the judge measured outside the kernel."""
    return Note(text, "observed")


def notebook_reported(text: str) -> Note:
    """A note whose figures the notebook's own process computed."""
    return Note(text, "reported")

#: Seconds the judge waits for a new connection's hello.
HELLO_TIMEOUT_S = 5.0


def judges(*grade_ids: str, facts: "tuple[Fact, ...] | list[Fact]" = ()) -> Callable[[Check], Check]:
    """Register the decorated function as the check of the grade cells ``grade_ids``.

    Args:
        grade_ids: the grade cells it decides.
        facts: what its verdict rests on, and where the judge gets each fact
            (:func:`~raydata_grader.facts.recomputed`, :func:`~raydata_grader.facts.observed`,
            :func:`~raydata_grader.facts.reported`): the grader's inventory
            (``python -m raydata_grader inventory``) lists them, and a check that rests on a
            reported fact has its points held for review when the notebook holds code that could
            forge one (:mod:`raydata_grader.review`).

    Examples:
        >>> from raydata_grader.facts import recomputed
        >>> @judges("part_a_hidden", facts=[recomputed("f(2)")])
        ... def check_part_a(k):
        ...     assert k.call("f", 2) == 4, "f(2) must be 4."
        >>> check_part_a.__judges__, [f.kind for f in check_part_a.__facts__]
        (('part_a_hidden',), ['recomputed'])
    """
    def mark(fn: Check) -> Check:
        fn.__judges__ = tuple(grade_ids)
        fn.__facts__ = tuple(facts)
        return fn

    return mark


def load_checks(assignment: str, folder: str | os.PathLike, *, warm: bool = False) -> dict[str, Check]:
    """Import ``<folder>/<assignment>.py`` and return ``{grade_id: check}``.

    Args:
        assignment: assignment id.
        folder: the oracles' folder.
        warm: also call the module's ``warm()``, if it has one: what its checks need that
            takes time (importing torch, loading a course table, training the oracle's
            model), done once, while the kernel starts.

    Raises:
        FileNotFoundError: if the oracle module does not exist.
        ValueError: if two checks claim one grade cell.
    """
    path = Path(folder) / f"{assignment}.py"
    if not path.is_file():
        raise FileNotFoundError(f"no oracle module {path}: every assignment needs autograder/oracles/<id>.py")
    spec = importlib.util.spec_from_file_location(f"raydata_oracle_{assignment}", path)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    checks: dict[str, Check] = {}
    for value in vars(module).values():
        for gid in getattr(value, "__judges__", ()):
            if gid in checks and checks[gid] is not value:
                raise ValueError(f"{path}: two checks judge grade cell {gid!r}")
            checks[gid] = value
    if warm and callable(getattr(module, "warm", None)):
        module.warm()
    return checks


def oracle_digests(folder: str | os.PathLike) -> dict[str, str]:
    """``{file name: SHA-256}`` of every ``*.py`` oracle in ``folder``."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(Path(folder).glob("*.py"))}


@dataclass
class Verdict:
    """How the judge decided one grade cell.

    Attributes:
        grade_id: the cell.
        passed: whether the cell earns its points.
        message: for the student: why it failed; when it passed, the check's note (often empty).
        seconds: the session's wall time.
        requests: requests the check sent to the kernel.
        detail: for the instructor's log only (a check that broke on odd data: its traceback).
        cell_raised: the grade cell itself raised in the kernel (a visible test that failed
            there); the executor sets it, and such a cell scores 0 whatever the verdict.
        reported: the verdict rests on at least one fact the kernel reported
            (:func:`raydata_grader.facts.reported`, or an observation the judge could not make
            here and took from the kernel instead): its points are held when the notebook
            holds code that could forge one (:mod:`raydata_grader.review`).
        note_source: where a passing check's note comes from: ``"observed"`` (the grader
            measured it outside the kernel), ``"reported"`` (the notebook's own figure) or
            ``""`` (a plain remark).
        forged_by: the scan's rules that flag code which could imitate one of the check's
            observed facts (:attr:`raydata_grader.facts.Fact.forged_by`): its points are held
            when the notebook trips one of them.
    """

    grade_id: str
    passed: bool
    message: str = ""
    seconds: float = 0.0
    requests: int = 0
    detail: str = ""
    cell_raised: bool = False
    reported: bool = False
    note_source: str = ""
    forged_by: tuple[str, ...] = ()

    def to_json(self) -> dict:
        """The verdict as a JSON-ready dict."""
        return {"grade_id": self.grade_id, "passed": self.passed, "message": self.message,
                "seconds": round(self.seconds, 2), "requests": self.requests, "cell_raised": self.cell_raised,
                "reported": self.reported, "note_source": self.note_source, "forged_by": list(self.forged_by)}


@dataclass
class _Session:
    grade_id: str
    nonce: str
    deadline: float
    started: float = field(default_factory=time.monotonic)
    verdict: Verdict | None = None
    abandoned: bool = False
    heard: bool = False
    thread: threading.Thread | None = None


class Judge:
    """The judge of one graded notebook: its checks, its socket, its verdicts.

    Args:
        checks: ``{grade_id: check}`` (:func:`load_checks`), or a function that returns them:
            it is then called in a thread of its own at once (while the kernel starts), and
            the first session waits for it.
        socket_path: where to listen (a folder the sandbox mounts read-only; the socket is
            made connectable for the sandbox's user).
        log: where to write one line per verdict (default: nowhere).
        outside: the kernel's sandbox as the host sees it (:class:`raydata_grader.outside.SandboxView`),
            handed to every check as ``k.outside``; None where the kernel has no sandbox
            (checks then take what they would observe from the kernel, and say so).
    """

    def __init__(self, checks: dict[str, Check] | Callable[[], dict[str, Check]], socket_path: str | os.PathLike,
                 log: Callable[[str], None] | None = None, outside=None):
        from concurrent.futures import Future, ThreadPoolExecutor

        self._load = checks if callable(checks) else None
        self._reloaded = False  # a failed import was loaded once more (see checks)
        self._reload_lock = threading.Lock()
        if callable(checks):
            pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="judge-load")
            self._checks: Future = pool.submit(checks)
            pool.shutdown(wait=False)
        else:
            self._checks = Future()
            self._checks.set_result(dict(checks))
        self.socket_path = Path(socket_path)
        self.outside = outside
        self.verdicts: dict[str, Verdict] = {}
        self._log = log or (lambda line: None)
        self._lock = threading.Lock()
        self.socket_path.unlink(missing_ok=True)
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(self.socket_path))
        os.chmod(self.socket_path, 0o666)
        self._listener.listen(8)

    @property
    def checks(self) -> dict[str, Check]:
        """``{grade_id: check}`` (waits for them to be loaded).

        Loading them in a thread of their own imports modules while the grading process
        imports others. A package imported from two threads at once can fail in one of them
        with ``ModuleNotFoundError`` for a submodule that is there (CPython's import is not
        thread-safe for packages whose submodules import each other, python/cpython#83065; seen
        once: ``scipy.spatial._kdtree``, under ``sklearn.datasets``, which lost a whole
        notebook's hidden points). So a load that failed with an ``ImportError`` is tried once
        more, in the calling thread, before its error stands.

        Raises:
            Exception: whatever loading the oracles raised, the second time for an ``ImportError``.
        """
        from concurrent.futures import Future

        try:
            return self._checks.result()
        except ImportError:
            if self._load is None:
                raise
            with self._reload_lock:
                if not self._reloaded:
                    self._reloaded = True
                    again: Future = Future()
                    try:
                        again.set_result(self._load())
                    except BaseException as exc:  # kept, as the first failure was
                        again.set_exception(exc)
                    self._checks = again
            return self._checks.result()

    def open(self, grade_id: str, timeout_s: float) -> _Session:
        """Start judging ``grade_id``: wait for the kernel's hello, then run its check.

        Returns:
            The session; pass it to :meth:`close` once the kernel's cell has finished.
        """
        session = _Session(grade_id, secrets.token_hex(16), time.monotonic() + timeout_s)
        session.thread = threading.Thread(target=self._run, args=(session,), name=f"judge-{grade_id}", daemon=True)
        session.thread.start()
        return session

    def close(self, session: _Session, grace_s: float = 5.0) -> Verdict:
        """The session's verdict, once its check has finished (at most ``grace_s`` more seconds).

        Call it when the kernel's cell has ended. A session whose kernel never connected has
        no verdict to wait for (the kernel's side answers before its cell can end), so it
        fails at once.
        """
        assert session.thread is not None
        until = time.monotonic() + grace_s
        while session.thread.is_alive() and session.heard and time.monotonic() < until:
            session.thread.join(timeout=0.05)
        with self._lock:
            if session.verdict is None:
                session.abandoned = True
                why = ("the judge never heard from this cell: the kernel did not run the grader's line "
                       "(it stopped, was interrupted, or was changed)") if not session.heard else (
                       "the hidden test did not finish: the cell ended (interrupted at the per-cell limit, or "
                       "the kernel stopped) before your code answered every call")
                session.verdict = Verdict(session.grade_id, False, why, time.monotonic() - session.started)
            verdict = session.verdict
        self.verdicts[session.grade_id] = verdict
        self._log(f"[judge] {verdict.grade_id}: {'passed' if verdict.passed else 'failed'} in {verdict.seconds:.1f} s, "
                  f"{verdict.requests} request(s)" + (f": {verdict.message[:200]}" if verdict.message else "")
                  + (f"\n{verdict.detail}" if verdict.detail else ""))
        return verdict

    def shutdown(self) -> None:
        """Stop listening and remove the socket."""
        with contextlib.suppress(OSError):
            self._listener.close()
        self.socket_path.unlink(missing_ok=True)

    # -- a session's thread
    def _accept(self, session: _Session) -> socket.socket | None:
        while not session.abandoned and time.monotonic() < session.deadline:
            self._listener.settimeout(min(0.5, max(0.01, session.deadline - time.monotonic())))
            try:
                conn, _ = self._listener.accept()
            except (socket.timeout, TimeoutError):
                continue
            except OSError:
                return None
            try:
                conn.settimeout(HELLO_TIMEOUT_S)
                hello = recv_message(conn, max_bytes=4096)
                if isinstance(hello, Hello) and secrets.compare_digest(hello.nonce, session.nonce):
                    return conn
            except (OSError, WireError, ValueError):
                pass
            conn.close()  # a connection that is not this session's: ignored
        return None

    def _run(self, session: _Session) -> None:
        conn = self._accept(session)
        if conn is None:
            return
        session.heard = True
        kernel = Kernel(conn, session.deadline, outside=self.outside)
        passed, message, detail, source, reported, imitable = False, "", "", "", False, ()
        try:
            check = self.checks.get(session.grade_id)
            if check is None:
                raise _NoCheck(session.grade_id)
            reported, imitable = rests_on_reported(check), tuple(forged_by(check))
            note = check(kernel)
            passed = True
            if isinstance(note, Note):
                message, source = note.text.strip()[:NOTE_CHARS], note.source
            elif isinstance(note, str):
                message = note.strip()[:NOTE_CHARS]
        except _NoCheck:
            message = "the grader has no check for this cell (instructor: add one to autograder/oracles/)"
        except AssertionError as exc:
            # Only the check's own message: never an assertion's introspection (the values
            # compared), should a test runner have rewritten the oracle's asserts.
            message = str(exc).split("\nassert ", 1)[0].strip() or "the check failed"
        except KernelRaised as exc:
            message = _raised_message(exc)
        except KernelGone as exc:
            message = f"the hidden test did not finish: {exc}"
        except WireError as exc:
            message = f"your code returned something the judge cannot read as data ({exc})"
        except Exception as exc:  # the check met data it did not expect (a list for a dict, say)
            message = (f"your code returned data of an unexpected kind, so the check could not use it "
                       f"({type(exc).__name__})")
            detail = traceback.format_exc(limit=6)
        finally:
            with contextlib.suppress(OSError, WireError):
                conn.settimeout(2.0)
                send_message(conn, Done(passed, message))
            conn.close()
        with self._lock:
            if not session.abandoned:
                session.verdict = Verdict(session.grade_id, passed, message, time.monotonic() - session.started,
                                          kernel.requests, detail, reported=reported or kernel.took_reported,
                                          note_source=source, forged_by=imitable)


class _NoCheck(Exception):
    """A grade cell that no check of the oracles judges."""


_ACTIVE: list[Judge] = []


@contextlib.contextmanager
def judging(judge: Judge) -> Iterator[Judge]:
    """Make ``judge`` the one :func:`active_judge` returns inside the block (then shut it down)."""
    _ACTIVE.append(judge)
    try:
        yield judge
    finally:
        _ACTIVE.remove(judge)
        judge.shutdown()


def active_judge() -> Judge | None:
    """The judge of the notebook being autograded in this process, if any."""
    return _ACTIVE[-1] if _ACTIVE else None
