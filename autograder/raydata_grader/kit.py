"""What every grading job of one assignment needs: the course kit, and the installation it expects.

A grading run builds one :class:`CourseKit` per assignment (:func:`build_kit`) and hands it to
every job of that assignment, wherever the job runs (:mod:`raydata_grader.jobs`): a scratch
nbgrader course that holds only that assignment (its source, its release, a gradebook
without students) and the oracle module, with its SHA-256. What the kit does not carry, the
grader's and the student package's code, the nbgrader configuration and the versions of
Python, Ray and nbgrader, must be the same where the job runs: :func:`installation_digest`
says what "the same" is.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import nbformat

from raydata_grader.paths import oracles_dir
from raydata_grader.sandbox import remove_tree
from raydata_grader.scratch import owned_temp_dir, remove_owned

__all__ = ["CourseKit", "build_kit", "installation_digest", "files_under", "sha256"]


def sha256(data: bytes) -> str:
    """The SHA-256 of ``data``, in hex."""
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class CourseKit:
    """What every job of one assignment needs, built once per run (:func:`build_kit`).

    Attributes:
        assignment: assignment id.
        files: ``{path: bytes}`` of an nbgrader course that holds this assignment only: its
            source (``solutions/<id>/...``), its release (``exercises/<id>/...``) and a
            gradebook without students (``gradebook.db``), paths relative to the course.
        oracle: the oracle module's source (``autograder/oracles/<id>.py``), as bytes.
        oracle_sha256: its SHA-256, checked where the job runs.
        source_sha256: SHA-256 of the source notebook (the row keeps it).
        max_score: points of the release's grade cells.
        duedate: the assignment's due date in the class's gradebook (ISO 8601, UTC), if the
            instructor set one (formgrader, ``nbgrader db``); the job's gradebook gets it, so
            that nbgrader's late penalty is computed as in the class's.
    """

    assignment: str
    files: dict[str, bytes]
    oracle: bytes
    oracle_sha256: str
    source_sha256: str
    max_score: float
    duedate: str | None = None


def files_under(folder: Path) -> dict[str, bytes]:
    """``{path relative to folder: bytes}`` of every file below ``folder`` (no caches, no checkpoints)."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts and ".ipynb_checkpoints" not in p.parts}


def build_kit(out: str | os.PathLike, assignment: str) -> CourseKit:
    """The :class:`CourseKit` of ``assignment``, from the grading folder ``out``.

    ``out`` must hold the assignment's source (``solutions/<id>/``, as
    :func:`raydata_grader.grade.ensure_course` copies it). The release and the empty
    gradebook are generated with nbgrader in a scratch folder, and cached in
    ``<out>/kits/<id>/`` under the hash of the source and of this installation
    (:func:`installation_digest`), with a hash of the cached files themselves: a later run
    reuses them only when all three still match, and generates them again otherwise.

    Raises:
        FileNotFoundError: if the source or the oracle module is missing.
        RuntimeError: if nbgrader cannot generate the release.
    """
    from raydata_grader.course_dir import release

    out = Path(out).resolve()
    source = out / "solutions" / assignment
    if not (source / f"{assignment}.ipynb").is_file():
        raise FileNotFoundError(f"{source / f'{assignment}.ipynb'} is missing: the grading folder holds no source "
                                f"of {assignment}")
    oracle_path = oracles_dir() / f"{assignment}.py"
    if not oracle_path.is_file():
        raise FileNotFoundError(f"no oracle module {oracle_path}: every assignment needs one")
    source_files = files_under(source)
    key = sha256(json.dumps({"source": {k: sha256(v) for k, v in source_files.items()},
                           "installation": installation_digest()}, sort_keys=True).encode())
    cache = out / "kits" / assignment
    files = _cached_kit(cache, key)
    if files is None:
        remove_tree(cache)
        scratch = owned_temp_dir("kit")
        try:
            for name, data in source_files.items():
                target = scratch / "solutions" / assignment / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
            release((assignment,), course_dir=scratch)
            files = {f"{folder}/{assignment}/{name}": data for folder in ("solutions", "exercises")
                     for name, data in files_under(scratch / folder / assignment).items()}
            files["gradebook.db"] = (scratch / "gradebook.db").read_bytes()
        finally:
            remove_owned(scratch)
        for name, data in files.items():
            (cache / name).parent.mkdir(parents=True, exist_ok=True)
            (cache / name).write_bytes(data)
        (cache / "key.txt").write_text(f"{key}\n{_manifest(files)}\n")
    release_nb = nbformat.reads(files[f"exercises/{assignment}/{assignment}.ipynb"].decode(), as_version=4)
    max_score = float(sum(float(c.metadata.get("nbgrader", {}).get("points", 0) or 0) for c in release_nb.cells
                          if c.metadata.get("nbgrader", {}).get("grade")))
    oracle = oracle_path.read_bytes()
    return CourseKit(assignment, files, oracle, sha256(oracle), sha256(source_files[f"{assignment}.ipynb"]), max_score)


def _manifest(files: dict[str, bytes]) -> str:
    return sha256(json.dumps({k: sha256(v) for k, v in sorted(files.items())}).encode())


def _cached_kit(cache: Path, key: str) -> dict[str, bytes] | None:
    """The kit's files cached in ``cache``, if they were made for ``key`` and are as they were written."""
    stamp = cache / "key.txt"
    if not stamp.is_file():
        return None
    lines = stamp.read_text().split()
    files = {k: v for k, v in files_under(cache).items() if k != "key.txt"}
    return files if lines[:1] == [key] and lines[1:2] == [_manifest(files)] else None


@lru_cache(maxsize=1)
def installation_digest() -> str:
    """SHA-256 of what grading depends on in this installation, beside the kit a job brings.

    The source of both packages (``raydata_grader``, ``raydata_course``), the course's
    nbgrader configuration, and the versions of Python, Ray and nbgrader. Every machine that
    grades for one run must give the run's value, or the same notebook could be graded
    differently there.
    """
    import nbgrader
    import ray

    import raydata_course
    import raydata_grader
    from raydata_grader.paths import nbgrader_config_file

    digest = hashlib.sha256()
    for package in (raydata_grader, raydata_course):
        root = Path(package.__file__).parent
        for path in sorted(root.rglob("*.py")):
            digest.update(f"{package.__name__}/{path.relative_to(root).as_posix()}\0".encode())
            digest.update(path.read_bytes())
    digest.update(nbgrader_config_file().read_bytes())
    digest.update(f"python {sys.version_info[:3]} ray {ray.__version__} nbgrader {nbgrader.__version__}".encode())
    return digest.hexdigest()


