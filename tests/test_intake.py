"""Hostile submissions: intake (folders, zips, links, sizes, dates) and lint never stop the run.

Every vector the grader's threat model names for the class property (malformed JSON, odd types, corrupt or huge zip, symlink, misleading names or dates) is one test
here. Each asserts what becomes of the hostile entry (which student and assignment is refused,
with which reason, or which candidate is chosen) and that the honest students in the same
folder are still found. Fast: no Ray, no notebook execution, no nbgrader autograde.
"""

from __future__ import annotations

import copy
import csv
import io
import json
import os
import random
import re
import stat
import struct
import zipfile
from datetime import datetime, timezone
from pathlib import Path

import nbformat
import pytest

from nbgrader.nbgraderformat import MetadataValidator
from raydata_course.classroom.lint import MAX_JSON_DEPTH, exercise_grade_ids, exercise_of, grade_id, lint_notebook
from raydata_grader import intake, submission_files
from raydata_grader.intake import (MAX_NOTEBOOK_BYTES, MAX_ZIP_BYTES, MAX_ZIP_MEMBERS, choose,
                                   collect_submissions)
from raydata_grader.paths import ASSIGNMENTS, release_notebook

KNOWN = ("data01", "data02")
NB = b'{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}'


def _utc(*args) -> float:
    return datetime(*args, tzinfo=timezone.utc).timestamp()


def _honest(root: Path) -> None:
    """Two honest students next to every hostile entry: a folder (amy) and a zip (zed)."""
    (root / "amy" / "data02").mkdir(parents=True)
    (root / "amy" / "data02" / "data02.ipynb").write_bytes(NB)
    with zipfile.ZipFile(root / "zed.zip", "w") as z:
        z.writestr("data02/data02.ipynb", NB)


def _collect(root: Path):
    """Collect ``root`` and check that the honest students came through untouched."""
    found, students, empty, notes = collect_submissions(root, KNOWN)
    for student in ("amy", "zed"):
        assert [c.data for c in found[(student, "data02")]] == [NB], (student, found.keys(), dict(empty))
        assert not any(k[0] == student for k in empty), dict(empty)
    return found, students, empty, notes


def _refused(empty, key, *phrases) -> str:
    assert key in empty and key in empty.invalid, (key, dict(empty))
    for phrase in phrases:
        assert phrase in empty[key], empty[key]
    return empty[key]


def _zip(path: Path, members: dict[str, bytes], compression=zipfile.ZIP_DEFLATED) -> Path:
    with zipfile.ZipFile(path, "w", compression) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return path


def _patch_directory(path: Path, member: str, *, compressed: int | None = None, unpacked: int | None = None) -> None:
    """Overwrite the sizes the central directory states for ``member`` (the data stays as it is)."""
    raw = bytearray(path.read_bytes())
    start, name = 0, member.encode()
    while (start := raw.find(b"PK\x01\x02", start)) >= 0:
        length = struct.unpack_from("<H", raw, start + 28)[0]
        if raw[start + 46:start + 46 + length] == name:
            if compressed is not None:
                struct.pack_into("<I", raw, start + 20, compressed)
            if unpacked is not None:
                struct.pack_into("<I", raw, start + 24, unpacked)
            path.write_bytes(bytes(raw))
            return
        start += 4
    raise AssertionError(f"{member} not in {path}")


# ---------------------------------------------------------------------------------- lint


@pytest.fixture(scope="module")
def release():
    return nbformat.read(release_notebook("data02"), as_version=4)


@pytest.fixture(scope="module")
def good(release):
    return json.loads(nbformat.writes(release))


def _mutated(good, change) -> bytes:
    data = copy.deepcopy(good)
    change(data)
    return json.dumps(data).encode()


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


#: (name, change to the release's JSON or literal bytes, phrase the reason must hold)
MALFORMED = [
    ("top-level list", b"[]", "not a Jupyter notebook"),
    ("top-level number", b"3", "not a Jupyter notebook"),
    ("top-level null", b"null", "not a Jupyter notebook"),
    ("cells a number", lambda d: d.__setitem__("cells", 5), "cells are a number, not a list"),
    ("cells an object", lambda d: d.__setitem__("cells", {"a": 1}), "cells are an object, not a list"),
    ("cells a string", lambda d: d.__setitem__("cells", "cells"), "cells are text, not a list"),
    ("a cell is a number", lambda d: d["cells"].append(3), "is a number, not a cell"),
    ("a cell is a list", lambda d: d["cells"].insert(0, ["x"]), "cell 1 of the notebook is a list"),
    ("a cell is null", lambda d: d["cells"].insert(0, None), "is null, not a cell"),
    ("an empty cell", lambda d: d["cells"].insert(0, {}), "cell type that is null"),
    ("cell_type a list", lambda d: d["cells"][1].__setitem__("cell_type", ["code"]), "cell type that is a list"),
    ("metadata a list", lambda d: d.__setitem__("metadata", []), "metadata is a list"),
    ("metadata null", lambda d: d.__setitem__("metadata", None), "metadata is null"),
    ("cell metadata a list", lambda d: d["cells"][0].__setitem__("metadata", []), "has metadata that is a list"),
    ("cell metadata text", lambda d: d["cells"][2].__setitem__("metadata", "m"), "has metadata that is text"),
    ("source a dict", lambda d: d["cells"][0].__setitem__("source", {"a": 1}), "source that is an object"),
    ("source a number", lambda d: d["cells"][0].__setitem__("source", 5), "source that is a number"),
    ("source null", lambda d: d["cells"][0].__setitem__("source", None), "source that is null"),
    ("source a list of numbers", lambda d: d["cells"][0].__setitem__("source", [1, 2]), "source that is a list"),
    ("source nested lists", lambda d: d["cells"][0].__setitem__("source", [["x"]]), "source that is a list"),
    ("outputs a number", lambda d: d["cells"][1].__setitem__("outputs", 7), "outputs that are a number"),
    ("attachments a list", lambda d: d["cells"][0].__setitem__("attachments", [1]), "attachments that are a list"),
    ("id a number", lambda d: d["cells"][0].__setitem__("id", 1), "an id that is a number"),
    ("id a list", lambda d: d["cells"][0].__setitem__("id", ["x"]), "an id that is a list"),
    ("nbformat text", lambda d: d.__setitem__("nbformat", "4"), "(nbformat) is text"),
    ("nbformat_minor text", lambda d: d.__setitem__("nbformat_minor", "x"), "(nbformat_minor) is text"),
    ("nbformat 99", lambda d: d.__setitem__("nbformat", 99), "Unsupported nbformat version"),
    ("worksheets a number", b'{"nbformat": 3, "nbformat_minor": 0, "metadata": {}, "worksheets": 3}',
     "not a readable Jupyter notebook"),
    ("v3 input a number", json.dumps({"nbformat": 3, "nbformat_minor": 0, "metadata": {}, "worksheets": [
        {"cells": [{"cell_type": "code", "input": 5, "outputs": [], "language": "python", "metadata": {}}]}]}).encode(),
     "source that is a number"),
    ("markdown cell with outputs", lambda d: d["cells"][0].__setitem__("outputs", []), "even after repair"),
    ("huge int (5,000 digits)", b'{"cells": [], "metadata": {"x": ' + b"9" * 5000 + b"}}", "integer string conversion"),
    ("10,000-deep nesting", b'{"cells": [], "metadata": {"a": ' + _nested(10_000).encode() + b"}}", "nested too deeply"),
    ("10,000-deep cells", b'{"cells": ' + _nested(10_000).encode() + b"}", "nested too deeply"),
    (f"{MAX_JSON_DEPTH + 50}-deep metadata", lambda d: d["metadata"].__setitem__("k", json.loads(_nested(MAX_JSON_DEPTH + 50))),
     f"nested more than {MAX_JSON_DEPTH} levels"),
    ("500-deep source", lambda d: d["cells"][0].__setitem__("source", json.loads(_nested(500))), "nested more than"),
    ("lone surrogate in source", lambda d: d["cells"][3].__setitem__("source", "x = '\ud800'"), "can't be saved as UTF-8"),
    ("lone surrogate in metadata", lambda d: d["metadata"].__setitem__("k", "\udcff"), "can't be saved as UTF-8"),
    ("not UTF-8", b"\xff\xfe{\x00", "not UTF-8"),
    ("BOM", b"\xef\xbb\xbf{}", "not valid JSON"),
    ("truncated", None, "not valid JSON"),
    ("zero bytes", b"", "empty"),
    ("whitespace", b"  \n\t ", "empty"),
    ("NUL bytes", b"\x00" * 100, "not valid JSON"),
]


@pytest.mark.parametrize("name,change,phrase", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_lint_malformed_structure_is_invalid_never_raises(release, good, name, change, phrase):
    if change is None:
        raw = json.dumps(good).encode()[:5000]
    elif isinstance(change, bytes):
        raw = change
    else:
        data = copy.deepcopy(good)
        change(data)
        raw = json.dumps(data).encode()  # ASCII: a lone surrogate is written as an escape
    result = lint_notebook(raw, release)
    assert result.status == "invalid" and result.notebook is None, (result.status, result.message)
    assert phrase in result.message, result.message
    assert len(result.message) < 600, "a reason stays short, whatever the file holds"
    # the next (honest) notebook lints as before: nothing leaked from the hostile one
    assert lint_notebook(json.dumps(good).encode(), release).status == "graded"


#: Wrong types where lint repairs instead of refusing (the cell runs as an ordinary cell, or
#: the release's copy comes back).
REPAIRABLE = [
    ("grade_id a list", lambda d: d["cells"][3]["metadata"]["nbgrader"].__setitem__("grade_id", ["x"]), "malformed nbgrader"),
    ("grade_id an object", lambda d: d["cells"][3]["metadata"]["nbgrader"].__setitem__("grade_id", {"x": 1}), "malformed nbgrader"),
    ("grade_id a number", lambda d: d["cells"][3]["metadata"]["nbgrader"].__setitem__("grade_id", 7), "malformed nbgrader"),
    ("grade_id 100 kB", lambda d: d["cells"][3]["metadata"]["nbgrader"].__setitem__("grade_id", "x" * 100_000), "unknown grade id"),
    ("nbgrader a list", lambda d: d["cells"][3]["metadata"].__setitem__("nbgrader", []), "malformed nbgrader"),
    ("kernelspec text", lambda d: d["metadata"].__setitem__("kernelspec", "py"), "kernel was 'py'"),
    ("kernelspec a list", lambda d: d["metadata"].__setitem__("kernelspec", []), "kernel was []"),
    ("kernel name a list", lambda d: d["metadata"].__setitem__("kernelspec", {"name": [1]}), "kernel was [1]"),
    ("nbgrader points text", lambda d: d["cells"][3]["metadata"]["nbgrader"].__setitem__("points", "lots"), "was edited"),
]


@pytest.mark.parametrize("name,change,phrase", REPAIRABLE, ids=[m[0] for m in REPAIRABLE])
def test_lint_odd_types_in_metadata_are_repaired_never_raise(release, good, name, change, phrase):
    result = lint_notebook(_mutated(good, change), release)
    assert result.status == "repaired", (result.status, result.message)
    assert phrase in result.message, result.message
    assert len(result.message) < 2000
    nbformat.validate(result.notebook)


def test_lint_many_repairs_are_counted_not_listed(release, good):
    extra = [{"cell_type": "code", "source": "", "metadata": {"nbgrader": {"grade_id": f"g{i}"}}, "outputs": [],
              "execution_count": None} for i in range(500)]
    result = lint_notebook(_mutated(good, lambda d: d["cells"].extend(extra)), release)
    assert result.status == "repaired" and len(result.repairs) <= 51
    assert "more repairs like these" in result.repairs[-1]


def test_lint_survives_random_mutations(release, good):
    """Seeded fuzz: random values of random types dropped anywhere in the release's JSON."""
    rng = random.Random(20261201)
    values = [None, 0, -1, 10**30, 1.5, True, "", "x", [], [1], ["a", 2], {}, {"a": []}, json.loads(_nested(50))]

    def paths(node, path=()):
        yield path
        if isinstance(node, dict):
            for k, v in node.items():
                yield from paths(v, path + (k,))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                yield from paths(v, path + (i,))

    every = [p for p in paths(good) if p]
    statuses = set()
    for _ in range(150):
        data = copy.deepcopy(good)
        for path in rng.sample(every, rng.randint(1, 3)):
            node = data
            try:
                for step in path[:-1]:
                    node = node[step]
                node[path[-1]] = copy.deepcopy(rng.choice(values))
            except (KeyError, IndexError, TypeError):
                continue
        raw = json.dumps(data).encode()
        if rng.random() < 0.2:
            raw = raw[:rng.randint(0, len(raw))]
        result = lint_notebook(raw, release)  # must not raise
        assert result.status in ("graded", "repaired", "invalid")
        assert (result.notebook is None) == (result.status == "invalid")
        if result.notebook is not None:  # what nbgrader then reads: its own metadata check passes
            MetadataValidator().validate_nb(result.notebook)
        statuses.add(result.status)
    assert statuses >= {"repaired", "invalid"}


#: A cell of the student's own, marked in nbgrader's metadata but without a usable grade_id.
NO_GRADE_ID = [
    ("graded, no grade_id", {"grade": True, "solution": False, "locked": False, "points": 5, "schema_version": 3},
     "as a graded test (grade: true) but has no grade_id"),
    ("graded, empty grade_id", {"grade": True, "grade_id": "", "solution": False, "locked": False, "points": 5,
                                "schema_version": 3}, "as a graded test (grade: true) but has no grade_id"),
    ("answer, no grade_id", {"grade": False, "solution": True, "locked": False, "schema_version": 3},
     "as an answer cell but has no grade_id"),
    ("locked, no grade_id", {"grade": False, "solution": False, "locked": True, "schema_version": 3},
     "as a read-only cell but has no grade_id"),
    ("empty nbgrader", {}, "nbgrader metadata without a grade_id"),
]


@pytest.mark.parametrize("name,nbg,phrase", NO_GRADE_ID, ids=[n[0] for n in NO_GRADE_ID])
def test_lint_rejects_nbgrader_marks_without_a_grade_id(release, good, name, nbg, phrase):
    """nbgrader stops the whole notebook on such a cell ("nbgrader cell does not have a grade_id"):
    the lint takes the marking off, says so, and the cell runs as the student's own."""
    cell = {"cell_type": "code", "source": "print('my own test')", "metadata": {"nbgrader": nbg}, "outputs": [],
            "execution_count": None}
    result = lint_notebook(_mutated(good, lambda d: d["cells"].insert(4, cell)), release)
    assert result.status == "repaired" and phrase in result.message, result.message
    ours = next(c for c in result.notebook.cells if c.source == "print('my own test')")
    assert "nbgrader" not in ours.metadata
    MetadataValidator().validate_nb(result.notebook)


def test_the_reference_solution_lints_clean_and_its_edits_do_not(release):
    """solutions/dataNN is nbgrader's source form: no checksum or cell_type in its metadata,
    hidden-test regions in its test cells. Neither is an edit; an edited copy still is."""
    from raydata_grader.paths import source_notebook

    for assignment in ASSIGNMENTS:
        released = nbformat.read(release_notebook(assignment), as_version=4)
        result = lint_notebook(source_notebook(assignment).read_bytes(), released)
        assert (result.status, result.repairs) == ("graded", []), (assignment, result.repairs)
    source = json.loads(source_notebook("data02").read_bytes())
    hidden = next(c for c in source["cells"] if "BEGIN HIDDEN TESTS" in "".join(c["source"]))
    hidden["source"] = "assert True\n" + "".join(hidden["source"])
    answer = next(c for c in source["cells"] if c["metadata"].get("nbgrader", {}).get("solution"))
    answer["metadata"]["nbgrader"]["points"] = 50
    result = lint_notebook(json.dumps(source).encode(), release)
    assert result.status == "repaired" and len(result.repairs) == 2, result.repairs
    assert f"the test cell {hidden['metadata']['nbgrader']['grade_id']!r} was edited" in result.message


def test_a_release_copy_keeps_its_checksums_honest(good, release):
    """In a copy of the release (checksums present), a changed checksum or an added hidden-test
    region is still an edit: only a cell without the release's keys is read as source form."""
    def forge(d):
        d["cells"][4]["metadata"]["nbgrader"]["checksum"] = "0" * 32
        d["cells"][5]["source"] = "".join(d["cells"][5]["source"]) + "\n### BEGIN HIDDEN TESTS\npass\n### END HIDDEN TESTS"
    result = lint_notebook(_mutated(good, forge), release)
    gids = [c["metadata"]["nbgrader"]["grade_id"] for c in good["cells"][4:6]]
    assert result.status == "repaired" and len(result.repairs) == 2, result.repairs
    assert f"the nbgrader metadata of {gids[0]!r} was edited" in result.message or gids[0].endswith("_answer")
    assert f"{gids[1]!r} was edited" in result.message


def test_a_notebook_of_another_exercise_is_named_not_repaired(release):
    exercises = {a: exercise_grade_ids(nbformat.read(release_notebook(a), as_version=4)) for a in ASSIGNMENTS}
    data01 = nbformat.read(release_notebook("data01"), as_version=4)
    raw = release_notebook("data02").read_bytes()
    result = lint_notebook(raw, data01, exercise="data01", exercises=exercises)
    assert result.status == "invalid" and result.repairs == []
    assert result.message.startswith("this is data02's notebook, filed under data01"), result.message
    assert "Submit it as data02 (data02/data02.ipynb)" in result.message
    assert lint_notebook(raw, release, exercise="data02", exercises=exercises).status == "graded"
    assert [exercise_of(release_notebook(a).read_bytes(), exercises) for a in ASSIGNMENTS] == list(ASSIGNMENTS)
    # cells of two exercises, or none of any: no owner, and the lint judges it as before
    mixed = nbformat.read(release_notebook("data02"), as_version=4)
    mixed.cells += [c for c in data01.cells if (grade_id(c) or "").startswith("make_blocks")]
    assert exercise_of(mixed, exercises) is None
    assert lint_notebook(nbformat.writes(mixed), release, exercise="data02", exercises=exercises).status == "repaired"
    assert exercise_of(NB, exercises) is None and exercise_of(b"\xff", exercises) is None


def test_lint_never_raises_on_random_bytes(release):
    rng = random.Random(7)
    for size in (1, 2, 10, 100, 10_000):
        for _ in range(5):
            assert lint_notebook(bytes(rng.randrange(256) for _ in range(size)), release).status == "invalid"
    assert lint_notebook(None, release).status == "invalid"  # not even bytes


# ------------------------------------------------------------------------- zip files


def test_corrupt_zip_is_invalid_for_its_student(tmp_path):
    _honest(tmp_path)
    (tmp_path / "eve.zip").write_bytes(os.urandom(5000))
    good = _zip(tmp_path / "gus.zip", {"data02/data02.ipynb": NB * 100})
    (tmp_path / "gus.zip").write_bytes(good.read_bytes()[:-200])  # cut off the end record
    found, students, empty, _ = _collect(tmp_path)
    _refused(empty, ("eve", "*"), "eve.zip", "not a readable zip file", "make the zip again")
    _refused(empty, ("gus", "*"), "not a readable zip file")
    assert {"eve", "gus"} <= students and not any(k[0] in ("eve", "gus") for k in found)


def test_zip_bomb_is_refused_unread(tmp_path, monkeypatch):
    _honest(tmp_path)
    _zip(tmp_path / "eve.zip", {"data02/data02.ipynb": b"\0" * (50 * 2**20)})  # 50 MiB of zeros, ~50 kB packed
    _zip(tmp_path / "gus.zip", {"data02/data02.ipynb": NB, "data02/blob.bin": b"\0" * (2 * 2**20)})
    assert (tmp_path / "eve.zip").stat().st_size < 200_000
    opened = []
    real_open = zipfile.ZipFile.open
    monkeypatch.setattr(zipfile.ZipFile, "open", lambda self, name, *a, **k: opened.append(
        getattr(name, "filename", name)) or real_open(self, name, *a, **k))
    found, _, empty, _ = _collect(tmp_path)
    _refused(empty, ("eve", "*"), "zip bomb", "eve.zip")
    _refused(empty, ("gus", "*"), "zip bomb", "blob.bin")  # a bomb the grader would not even read
    assert opened == ["data02/data02.ipynb"], "only zed's notebook is unpacked"


def test_zip_with_too_many_members_is_refused(tmp_path):
    _honest(tmp_path)
    _zip(tmp_path / "eve.zip", {"data02/data02.ipynb": NB, **{f"data02/f{i}.txt": b"x" for i in range(2_000)}},
         zipfile.ZIP_STORED)
    found, _, empty, _ = _collect(tmp_path)
    _refused(empty, ("eve", "*"), "2,001 files", f"more than the {MAX_ZIP_MEMBERS:,}")
    assert ("eve", "data02") not in found


def test_zip_stating_too_much_unpacked_is_refused_before_unpacking(tmp_path):
    _honest(tmp_path)
    path = _zip(tmp_path / "eve.zip", {"data02/data02.ipynb": NB, "data02/a.bin": b"a", "data02/b.bin": b"b"})
    for member in ("data02/a.bin", "data02/b.bin"):
        _patch_directory(path, member, compressed=150 * 2**20, unpacked=150 * 2**20)
    found, _, empty, _ = _collect(tmp_path)
    _refused(empty, ("eve", "*"), "would unpack to 300.0 MiB", "over the 200.0 MiB limit")
    assert ("eve", "data02") not in found


def test_zip_member_stated_over_the_notebook_limit_is_refused(tmp_path):
    _honest(tmp_path)
    path = _zip(tmp_path / "eve.zip", {"data02/data02.ipynb": NB, "data01/data01.ipynb": NB}, zipfile.ZIP_STORED)
    _patch_directory(path, "data02/data02.ipynb", compressed=25 * 2**20, unpacked=25 * 2**20)
    found, _, empty, _ = _collect(tmp_path)
    _refused(empty, ("eve", "data02"), "25.0 MiB", "over the 20.0 MiB limit for a notebook", "clear the outputs")
    assert [c.data for c in found[("eve", "data01")]] == [NB], "the rest of the zip is still graded"


def test_zip_member_whose_header_lies_about_its_size(tmp_path):
    """The directory says 1,000 bytes; the member unpacks to 50 MiB: never read past the claim."""
    _honest(tmp_path)
    path = _zip(tmp_path / "eve.zip", {"data02/data02.ipynb": b"\0" * (50 * 2**20)})
    _patch_directory(path, "data02/data02.ipynb", unpacked=1000)
    found, _, empty, _ = _collect(tmp_path)
    _refused(empty, ("eve", "data02"), "could not be unpacked", "make the zip again")
    assert ("eve", "data02") not in found


def test_read_capped_never_reads_past_the_limit():
    stream = io.BytesIO(b"x" * (10 * 2**20))
    data = submission_files._read_capped(stream.read, 2**20)
    assert len(data) == 2**20 + 1 and stream.tell() == 2**20 + 1


def test_zip_file_over_the_limit_is_refused_unopened(tmp_path, monkeypatch):
    _honest(tmp_path)
    with open(tmp_path / "eve.zip", "wb") as f:
        f.truncate(MAX_ZIP_BYTES + 2**20)  # sparse: fast, no disk used
    calls = []
    real = zipfile.ZipFile.__init__
    monkeypatch.setattr(zipfile.ZipFile, "__init__", lambda self, file, *a, **k: calls.append(file) or real(self, file, *a, **k))
    found, _, empty, _ = _collect(tmp_path)
    _refused(empty, ("eve", "*"), "201.0 MiB", "over the 200.0 MiB limit for a zip file")
    assert len(calls) == 1, "only zed.zip was opened"


def test_unsupported_compression_is_refused(tmp_path):
    _honest(tmp_path)
    _zip(tmp_path / "eve.zip", {"data02/data02.ipynb": NB}, zipfile.ZIP_BZIP2)
    _, _, empty, _ = _collect(tmp_path)
    _refused(empty, ("eve", "data02"), "zip method 12", "deflate")


def test_zip_naming_another_student_is_invalid_for_its_file_name(tmp_path):
    _honest(tmp_path)
    (tmp_path / "bob" / "data01").mkdir(parents=True)
    (tmp_path / "bob" / "data01" / "data01.ipynb").write_bytes(NB)
    _zip(tmp_path / "alice.zip", {"bob/data01/data01.ipynb": b"forged", "bob/data01/timestamp.txt": b"2099-01-01"})
    _zip(tmp_path / "cleo.zip", {"cleo/data01/data01.ipynb": NB})  # her own id as the top folder: stripped
    found, students, empty, _ = _collect(tmp_path)
    _refused(empty, ("alice", "*"), "the zip's folder 'bob' is not the student id 'alice' of its file name")
    assert [c.data for c in found[("bob", "data01")]] == [NB], "bob gets only his own folder"
    assert not any(k[0] == "alice" for k in found) and "alice" in students
    assert found[("cleo", "data01")][0].origin.endswith("cleo.zip!cleo/data01/data01.ipynb")


def test_zip_members_that_climb_out_are_skipped(tmp_path):
    _honest(tmp_path)
    with zipfile.ZipFile(tmp_path / "eve.zip", "w") as z:
        z.writestr("../data02/data02.ipynb", b"climbs")
        z.writestr("data02/../../data01/data01.ipynb", b"climbs")
        z.writestr("/abs/data02.ipynb", b"absolute")
        z.writestr(zipfile.ZipInfo("C:/data02/data02.ipynb"), b"drive")
        z.writestr("data02/data02.ipynb", NB)
    found, _, empty, notes = _collect(tmp_path)
    assert [c.data for c in found[("eve", "data02")]] == [NB] and ("eve", "data01") not in found
    skipped = [n for n in notes if n.startswith("eve: skipped member")]
    assert len(skipped) == 4 and all("climbs out with '..'" in n for n in skipped), notes
    assert not any(k[0] == "eve" for k in empty)


def test_zip_member_symlink_is_refused(tmp_path):
    _honest(tmp_path)
    with zipfile.ZipFile(tmp_path / "eve.zip", "w") as z:
        link = zipfile.ZipInfo("data02/data02.ipynb")
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        z.writestr(link, "../../../etc/passwd")
        z.writestr("data01/data01.ipynb", NB)
    with zipfile.ZipFile(tmp_path / "gus.zip", "w") as z:
        z.writestr("data02/data02.ipynb", NB)
        link = zipfile.ZipInfo("data02/timestamp.txt")
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        z.writestr(link, "/etc/passwd")
    found, _, empty, _ = _collect(tmp_path)
    _refused(empty, ("eve", "data02"), "'data02/data02.ipynb' is a symbolic link inside the zip")
    assert [c.data for c in found[("eve", "data01")]] == [NB]
    _refused(empty, ("gus", "data02"), "'data02/timestamp.txt' is a symbolic link")
    assert ("gus", "data02") not in found


def test_a_zip_is_its_students_whatever_the_name(tmp_path):
    _honest(tmp_path)
    _zip(tmp_path / "my submission!.zip", {"data02/data02.ipynb": NB})
    _zip(tmp_path / "ann lee.zip", {"ann lee/data01/data01.ipynb": NB})  # her name as the top folder: stripped
    found, students, empty, notes = _collect(tmp_path)
    assert students == {"amy", "zed", "my submission!", "ann lee"}, students
    assert [c.data for c in found[("my submission!", "data02")]] == [NB]
    assert [c.data for c in found[("ann lee", "data01")]] == [NB] and not dict(empty)
    assert not any("<student>.zip" in n for n in notes), notes


# ------------------------------------------------------------------------------ dates


def _folder_and_zip(root: Path, zip_mtime: float) -> None:
    (root / "ivy" / "data02").mkdir(parents=True)
    (root / "ivy" / "data02" / "data02.ipynb").write_bytes(b"folder")
    (root / "ivy" / "data02" / "timestamp.txt").write_text("2025-03-01 09:00:00.000000 UTC\n")
    with zipfile.ZipFile(root / "ivy.zip", "w") as z:
        z.writestr(zipfile.ZipInfo("data02/data02.ipynb", date_time=(2099, 12, 31, 23, 59, 58)), b"zip")
        z.writestr(zipfile.ZipInfo("data02/timestamp.txt", date_time=(2099, 12, 31, 23, 59, 58)),
                   "2099-12-31 23:59:59.000000 UTC\n")
    os.utime(root / "ivy.zip", (zip_mtime, zip_mtime))


def test_dates_inside_a_zip_are_ignored_the_older_zip_loses(tmp_path):
    _honest(tmp_path)
    _folder_and_zip(tmp_path, _utc(2025, 2, 1, 12, 0))
    found, _, _, _ = _collect(tmp_path)
    chosen, note = choose(found[("ivy", "data02")])
    assert chosen.data == b"folder" and chosen.timestamp_text == "2025-03-01 09:00:00.000000 UTC"
    zipped = next(c for c in found[("ivy", "data02")] if c.data == b"zip")
    assert zipped.timestamp_text is None and zipped.timestamp == datetime(2025, 2, 1, 12, 0, tzinfo=timezone.utc)
    assert "2 submissions found: graded the latest" in note and "2099" not in note


def test_dates_inside_a_zip_are_ignored_the_later_zip_wins(tmp_path):
    _honest(tmp_path)
    _folder_and_zip(tmp_path, _utc(2025, 3, 5, 8, 0))
    found, _, _, _ = _collect(tmp_path)
    chosen, note = choose(found[("ivy", "data02")])
    assert chosen.data == b"zip" and chosen.timestamp_text is None
    assert chosen.origin.endswith("ivy.zip!data02/data02.ipynb")
    assert "2025-03-05 08:00 UTC" in note and "2099" not in note


def test_without_timestamp_txt_the_notebook_file_date_counts(tmp_path):
    _honest(tmp_path)
    (tmp_path / "ivy" / "data02").mkdir(parents=True)
    (tmp_path / "ivy" / "data02" / "data02.ipynb").write_bytes(b"folder")
    (tmp_path / "ivy" / "data02" / "timestamp.txt").write_text("not a date\n")  # ignored, with a note
    os.utime(tmp_path / "ivy" / "data02" / "data02.ipynb", (_utc(2025, 3, 3), _utc(2025, 3, 3)))
    _zip(tmp_path / "ivy.zip", {"data02/data02.ipynb": b"zip"})
    os.utime(tmp_path / "ivy.zip", (_utc(2025, 3, 2), _utc(2025, 3, 2)))
    found, _, _, notes = _collect(tmp_path)
    chosen, _ = choose(found[("ivy", "data02")])
    assert chosen.data == b"folder" and chosen.timestamp_text is None
    assert any("ignored ivy/data02/timestamp.txt (not a date" in n for n in notes)


def test_choose_breaks_ties_by_exact_name_then_order_found(tmp_path):
    _honest(tmp_path)
    (tmp_path / "ivy" / "data02").mkdir(parents=True)
    for name in ("a_copy.ipynb", "data02.ipynb", "z_copy.ipynb"):
        (tmp_path / "ivy" / "data02" / name).write_bytes(name.encode())
    (tmp_path / "ivy" / "data02" / "timestamp.txt").write_text("2025-03-01 09:00:00 UTC\n")
    found, _, _, _ = _collect(tmp_path)
    chosen, note = choose(found[("ivy", "data02")])
    assert chosen.data == b"data02.ipynb" and note.startswith("3 submissions found: graded the latest")


# ------------------------------------------------------------------------------ links


def test_symlinked_student_folder_is_refused_not_followed(tmp_path):
    _honest(tmp_path)
    (tmp_path / "bob").symlink_to(tmp_path / "amy")
    found, students, empty, _ = _collect(tmp_path)
    _refused(empty, ("bob", "*"), "the folder 'bob' is a symbolic link")
    assert "bob" in students and not any(k[0] == "bob" for k in found)


def test_symlinked_assignment_folder_notebook_timestamp_and_zip_are_refused(tmp_path):
    _honest(tmp_path)
    secret = tmp_path.parent / f"{tmp_path.name}-secret.ipynb"
    secret.write_bytes(b"the reference answers")
    (tmp_path / "carl").mkdir()
    (tmp_path / "carl" / "data02").symlink_to(tmp_path / "amy" / "data02")
    (tmp_path / "dora" / "data02").mkdir(parents=True)
    (tmp_path / "dora" / "data02" / "data02.ipynb").symlink_to(secret)
    (tmp_path / "emil" / "data02").mkdir(parents=True)
    (tmp_path / "emil" / "data02" / "data02.ipynb").write_bytes(NB)
    (tmp_path / "emil" / "data02" / "timestamp.txt").symlink_to(secret)
    (tmp_path / "finn").mkdir()
    (tmp_path / "finn" / "data01.ipynb").symlink_to(secret)  # the flat layout
    (tmp_path / "gwen.zip").symlink_to(tmp_path / "zed.zip")
    found, _, empty, _ = _collect(tmp_path)
    _refused(empty, ("carl", "data02"), "the data02 folder ('carl/data02') is a symbolic link")
    _refused(empty, ("dora", "data02"), "'dora/data02/data02.ipynb' is a symbolic link", "a copy, not a link")
    _refused(empty, ("emil", "data02"), "'emil/data02/timestamp.txt' is a symbolic link")
    _refused(empty, ("finn", "data01"), "'finn/data01.ipynb' is a symbolic link")
    _refused(empty, ("gwen", "*"), "the zip file 'gwen.zip' is a symbolic link")
    assert not any(k[0] in ("carl", "dora", "emil", "finn", "gwen") for k in found)
    assert all(b"reference" not in c.data for cs in found.values() for c in cs)


def test_other_links_in_a_folder_are_skipped_not_followed(tmp_path):
    _honest(tmp_path)
    (tmp_path / "amy" / "data02" / "data").symlink_to("/etc")
    (tmp_path / "amy" / "notes").symlink_to("/etc/passwd")
    _, _, _, notes = _collect(tmp_path)
    assert any("amy/data02/data" in n and "never followed" in n for n in notes)
    assert any("'notes' (a symbolic link, never followed)" in n for n in notes)


# ------------------------------------------------------------------- sizes and odd files


def test_oversized_notebook_is_refused_unread(tmp_path, monkeypatch):
    _honest(tmp_path)
    for path in (tmp_path / "eve" / "data02" / "data02.ipynb", tmp_path / "gus" / "data01.ipynb"):
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f:
            f.truncate(30 * 2**20)  # sparse: fast
    real_open = os.open
    opened = []
    monkeypatch.setattr(intake.os, "open", lambda p, *a, **k: opened.append(str(p)) or real_open(p, *a, **k))
    found, _, empty, _ = _collect(tmp_path)
    _refused(empty, ("eve", "data02"), "30.0 MiB", "over the 20.0 MiB limit for a notebook", "clear the outputs")
    _refused(empty, ("gus", "data01"), "over the 20.0 MiB limit")
    assert not any("eve" in p or "gus" in p for p in opened), "refused from its stat, never opened"
    assert MAX_NOTEBOOK_BYTES == 20 * 2**20


def test_fifo_and_odd_files_are_refused_without_blocking(tmp_path):
    _honest(tmp_path)
    (tmp_path / "eve" / "data02").mkdir(parents=True)
    os.mkfifo(tmp_path / "eve" / "data02" / "data02.ipynb")
    os.mkfifo(tmp_path / "gus.zip")
    (tmp_path / "hal.zip").mkdir()  # a folder named like a zip
    (tmp_path / "ida" / "data02").mkdir(parents=True)
    (tmp_path / "ida" / "data02" / "data02.ipynb").mkdir()  # a folder named like a notebook
    (tmp_path / "ida" / "data02" / "data02.ipynb" / "inner.ipynb").write_bytes(NB)
    (tmp_path / "stray.txt").write_text("hello")
    found, _, empty, notes = _collect(tmp_path)
    _refused(empty, ("eve", "data02"), "is a named pipe, not a file")
    _refused(empty, ("gus", "*"), "is a named pipe, not a file")
    _refused(empty, ("hal", "*"), "is a folder, not a file")
    assert [c.data for c in found[("ida", "data02")]] == [NB]
    assert any("stray.txt" in n for n in notes)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_notebook_is_refused(tmp_path):
    _honest(tmp_path)
    path = tmp_path / "eve" / "data02" / "data02.ipynb"
    path.parent.mkdir(parents=True)
    path.write_bytes(NB)
    path.chmod(0)
    try:
        _, _, empty, _ = _collect(tmp_path)
    finally:
        path.chmod(0o644)
    _refused(empty, ("eve", "data02"), "could not be opened")


def test_unexpected_errors_refuse_one_entry_and_the_scan_goes_on(tmp_path, monkeypatch):
    _honest(tmp_path)
    (tmp_path / "eve" / "data02").mkdir(parents=True)
    (tmp_path / "eve" / "data02" / "data02.ipynb").write_bytes(NB)
    real = intake._scan_assignment

    def boom(folder, student, *args):
        if student == "eve":
            raise MemoryError("out of memory")
        return real(folder, student, *args)
    monkeypatch.setattr(intake, "_scan_assignment", boom)
    _, _, empty, _ = _collect(tmp_path)
    _refused(empty, ("eve", "data02"), "could not be read (MemoryError: out of memory)")


def test_non_utf8_names_are_refused_or_noted(tmp_path):
    _honest(tmp_path)
    base = os.fsencode(tmp_path)
    try:
        os.mkdir(base + b"/\xff\xfe")
        (tmp_path / "eve" / "data02").mkdir(parents=True)
        with open(base + b"/eve/data02/caf\xe9.ipynb", "wb") as f:
            f.write(NB)
        with open(base + b"/\xe9.zip", "wb") as f:
            f.write(_zip(tmp_path / "tmp.zip", {"data02/data02.ipynb": NB}).read_bytes())
        (tmp_path / "tmp.zip").unlink()
        (tmp_path / "gus" / "data02").mkdir(parents=True)
        (tmp_path / "gus" / "data02" / "new\nline.ipynb").write_bytes(NB)
    except (OSError, UnicodeError) as exc:
        pytest.skip(f"this file system refuses such names: {exc}")
    found, students, empty, notes = _collect(tmp_path)
    _refused(empty, ("eve", "data02"), "not valid text", "rename it data02.ipynb")
    _refused(empty, ("gus", "data02"), "not valid text")
    # folders and zips whose names are not UTF-8 are students too, named with their bytes escaped
    assert students == {"amy", "zed", "eve", "gus", "\\xff\\xfe", "\\xe9"}, students
    assert [c.data for c in found[("\\xe9", "data02")]] == [NB]
    assert not any(k[0] == "\\xff\\xfe" for k in found) and "\\xff\\xfe" in students
    "\n".join(notes).encode("utf-8")  # every note can be printed
    "\n".join(empty.values()).encode("utf-8")


def test_missing_folder_raises_and_nothing_else_does(tmp_path):
    with pytest.raises(FileNotFoundError):
        collect_submissions(tmp_path / "nope", KNOWN)
    (tmp_path / "file").write_text("x")
    with pytest.raises(FileNotFoundError):
        collect_submissions(tmp_path / "file", KNOWN)
    found, students, empty, notes = collect_submissions(_empty_zip(tmp_path), KNOWN)
    assert students == {"eve"} and not found


def _empty_zip(tmp_path: Path) -> Path:
    root = tmp_path / "class"
    root.mkdir()
    _zip(root / "eve.zip", {})
    return root


# ------------------------------------------------------------------- names and strays


def test_every_name_is_kept_and_filed_under_a_short_key(tmp_path):
    """Spaces, accents, other scripts and ids at the file-name limit are students, each filed under
    a key that is bounded, safe and their own; one name spelled in NFC and NFD is one student."""
    from raydata_grader.student_names import MAX_KEY_CHARS, student_key

    _honest(tmp_path)
    names = ["José García", "李雷 Li", "x" * 255, "ann lee", "ann-lee", "o'brien;rm -rf", "-dash", "Ünïcödé"]
    for name in names:
        (tmp_path / name / "data02").mkdir(parents=True)
        (tmp_path / name / "data02" / "data02.ipynb").write_bytes(NB)
    nfd = "José García".replace("é", "e\u0301")
    _zip(tmp_path / f"{nfd}.zip", {"data01/data01.ipynb": NB})
    found, students, empty, notes = _collect(tmp_path)
    assert students == {"amy", "zed", *names}, students
    assert all([c.data for c in found[(n, "data02")]] == [NB] for n in names)
    assert [c.data for c in found[("José García", "data01")]] == [NB], "the NFD zip is the same student"
    keys = {n: student_key(n) for n in students}
    assert len(set(keys.values())) == len(keys), keys
    assert keys["amy"] == "amy" and keys["ann-lee"] == "ann-lee", "plain ids keep their folders"
    for name, key in keys.items():
        assert len(key) <= MAX_KEY_CHARS and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.@+~-]*", key), (name, key)
        assert ("~" in key) != (key == name), "a hashed key is never a plain id, so never another student's"
    assert keys["José García"].startswith("Jose-Garcia~") and keys["李雷 Li"].startswith("Li~")
    assert student_key("José García") == keys["José García"], "deterministic"


def test_two_names_that_would_share_a_key_are_both_refused(tmp_path, monkeypatch):
    _honest(tmp_path)
    for name in ("bea", "bee"):
        (tmp_path / name / "data02").mkdir(parents=True)
        (tmp_path / name / "data02" / "data02.ipynb").write_bytes(NB)
    monkeypatch.setattr(intake, "student_key", lambda name: "b~0" if name.startswith("be") else name)
    _, _, empty, _ = _collect(tmp_path)
    _refused(empty, ("bea", "*"), "files this student under 'b~0'", "'bee'")
    _refused(empty, ("bee", "*"), "'bea'")


def test_a_file_directly_in_the_submissions_folder_is_its_own_row(tmp_path):
    _honest(tmp_path)
    (tmp_path / "carol.ipynb").write_bytes(NB)
    os.mkfifo(tmp_path / "pipe")
    _, students, empty, _ = _collect(tmp_path)
    assert {"carol.ipynb", "pipe"} <= students
    _refused(empty, ("carol.ipynb", "*"), "'carol.ipynb' is a file directly in the submissions folder",
             "put a student's notebook in their folder, e.g. carol/data01/data01.ipynb")
    _refused(empty, ("pipe", "*"), "directly in the submissions folder")


def test_what_is_outside_assignment_folders_is_recorded_as_strays(tmp_path):
    _honest(tmp_path)
    (tmp_path / "carol" / "data9").mkdir(parents=True)
    (tmp_path / "carol" / "data9" / "data01.ipynb").write_bytes(NB)
    (tmp_path / "carol" / "homework.ipynb").write_bytes(b"hw")
    (tmp_path / "carol" / "README.md").write_text("hi")
    (tmp_path / "carol" / "data").mkdir()
    (tmp_path / "carol" / "data" / "x.csv").write_text("1")
    _zip(tmp_path / "dan.zip", {"hw/data02.ipynb": NB, "notes.txt": b"n", "data01/data01.ipynb": NB})
    _zip(tmp_path / "eve.zip", {"data9/data01.ipynb": NB})  # one top folder, a mistyped assignment: not a student's
    found, _, empty, _ = _collect(tmp_path)
    strays = {(s.student, s.shown): s for s in empty.strays}
    carol = strays[("carol", "carol/data9/data01.ipynb")]
    assert (carol.why, carol.data, carol.named, carol.zip_name) == ("no assignment 'data9'", NB, "data01", None)
    assert strays[("carol", "carol/homework.ipynb")].data == b"hw"
    assert strays[("carol", "carol/homework.ipynb")].why == "not in an assignment folder"
    assert strays[("carol", "carol/README.md")].data is None
    assert "no notebook in it (it holds 'x.csv')" in strays[("carol", "carol/data/")].why
    dan = strays[("dan", "dan.zip: hw/data02.ipynb")]
    assert (dan.why, dan.data, dan.named, dan.zip_name) == ("no assignment 'hw'", NB, "data02", "dan.zip")
    assert ("dan", "dan.zip: notes.txt") in strays and [c.data for c in found[("dan", "data01")]] == [NB]
    assert strays[("eve", "eve.zip: data9/data01.ipynb")].data == NB and ("eve", "*") not in empty


def test_a_student_folder_with_many_strays_reads_and_lists_only_so_many(tmp_path):
    _honest(tmp_path)
    (tmp_path / "fay").mkdir()
    for i in range(submission_files.MAX_STRAY_NOTEBOOKS + 3):
        (tmp_path / "fay" / f"nb{i:02}.ipynb").write_bytes(NB)
    for i in range(submission_files.MAX_STRAYS_LISTED + 5):
        (tmp_path / "fay" / f"f{i:02}.txt").write_text("x")
    _, _, empty, _ = _collect(tmp_path)
    fay = [s for s in empty.strays if s.student == "fay"]
    assert sum(s.data is not None for s in fay) == submission_files.MAX_STRAY_NOTEBOOKS
    assert sum(s.shown.endswith(".txt") for s in fay) == submission_files.MAX_STRAYS_LISTED
    assert any(s.shown == "fay/: 5 more files" for s in fay)


def _placed(tmp_path, identify=lambda data: None):
    from raydata_grader.strays import place_strays

    found, students, empty, _ = collect_submissions(tmp_path, KNOWN)
    notes, log = place_strays(found, empty, identify, KNOWN)
    return found, empty, notes, log


def test_a_notebook_in_a_mistyped_folder_makes_its_assignment_invalid_and_says_where_it_goes(tmp_path):
    (tmp_path / "carol" / "data9").mkdir(parents=True)
    (tmp_path / "carol" / "data9" / "data01.ipynb").write_bytes(NB)
    _, empty, notes, log = _placed(tmp_path)
    assert empty[("carol", "data01")] == ("carol/data9/data01.ipynb: no assignment 'data9'; the assignments are "
                                          "data01, data02: put it in carol/data01/")
    assert ("carol", "data01") in empty.invalid and ("carol", "*") not in empty and not notes and not log


def test_a_stray_is_told_by_its_cells_before_its_name(tmp_path):
    data02 = release_notebook("data02").read_bytes()
    (tmp_path / "dan").mkdir()
    (tmp_path / "dan" / "my work.ipynb").write_bytes(data02)
    _zip(tmp_path / "eve.zip", {"hw/data01.ipynb": data02})  # named data01, but its cells are data02's
    exercises = {a: exercise_grade_ids(nbformat.read(release_notebook(a), as_version=4)) for a in KNOWN}
    _, empty, _, _ = _placed(tmp_path, lambda data: exercise_of(data, exercises))
    assert empty[("dan", "data02")].endswith("put it in dan/data02/") and ("dan", "data02") in empty.invalid
    assert empty[("eve", "data02")].endswith("put it in data02/ inside eve.zip"), dict(empty)
    assert ("eve", "data01") not in empty


def test_a_stray_next_to_graded_work_is_noted_on_its_row(tmp_path):
    for folder in ("data01", "old"):
        (tmp_path / "gus" / folder).mkdir(parents=True)
        (tmp_path / "gus" / folder / "data01.ipynb").write_bytes(NB)
    (tmp_path / "gus" / "README.md").write_text("my notes")
    found, empty, notes, log = _placed(tmp_path)
    assert ("gus", "data01") in found and not dict(empty)
    assert notes[("gus", "data01")] == ["also found gus/old/data01.ipynb (no assignment 'old'), which was not "
                                        "graded: only the notebook in the data01 folder is"]
    assert any("gus: not graded: gus/README.md" in line for line in log), log


def test_strays_that_name_no_assignment_make_the_students_other_rows_invalid(tmp_path):
    (tmp_path / "hal").mkdir()
    (tmp_path / "hal" / "homework.ipynb").write_bytes(NB)
    (tmp_path / "ida").mkdir()
    (tmp_path / "ida" / "README.md").write_text("I could not finish")
    _, empty, _, _ = _placed(tmp_path)
    hal = _refused(empty, ("hal", "*"), "found hal/homework.ipynb (not in an assignment folder)",
                   "put each notebook in hal/<assignment>/ (e.g. hal/data01/data01.ipynb)")
    assert "the assignments are data01, data02" in hal
    _refused(empty, ("ida", "*"), "found ida/README.md (not a notebook in an assignment folder)")


# ------------------------------------------------------------------------ records


def _row(student="amy", **fields) -> dict:
    return {"student": student, "assignment": "data01", "score": 3, "max_score": 12, "status": "graded",
            "message": "", **fields}


def test_poisoned_records_are_set_aside_and_the_good_ones_kept(tmp_path):
    from raydata_grader.records import load_rows, save_rows

    long_id = "s" * 252  # an earlier grader kept it, then could not write repairs/<id>.md
    rows = [_row(), _row(long_id), _row("José García"), _row("../x"), _row("a\nb"), _row(7), _row(score="3"),
            _row(status="hacked"), _row(assignment="../d"), _row(), [1], _row("bo", cells={"c": [1]})]
    (tmp_path / "grades.json").write_text(json.dumps({"rows": rows}))
    kept, problems = load_rows(tmp_path)
    assert set(kept) == {("amy", "data01"), (long_id, "data01"), ("José García", "data01")}
    assert len(problems) == 9 and all("set aside in grades.rejected.jsonl" in p for p in problems), problems
    assert "second row for the same student" in problems[6]
    rejected = [json.loads(line) for line in (tmp_path / "grades.rejected.jsonl").read_text().splitlines()]
    assert [r["row"] for r in rejected] == [rows[i] for i in (3, 4, 5, 6, 7, 8, 9, 10, 11)]
    save_rows(tmp_path, kept)  # the long id no longer names a file: its key does
    logs = sorted(p.name for p in (tmp_path / "repairs").iterdir())
    assert len(logs) == 3 and all(len(name) <= 84 for name in logs), logs
    assert load_rows(tmp_path) == (kept, [])


@pytest.mark.parametrize("content", [b"{not json", b"\xff\xfe", b"[]", b'{"rows": {}}', b"null"])
def test_a_grades_file_that_is_not_one_is_moved_aside(tmp_path, content):
    from raydata_grader.records import load_rows

    (tmp_path / "grades.json").write_bytes(content)
    assert load_rows(tmp_path)[0] == {} and not (tmp_path / "grades.json").exists()
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("grades.json.unusable-")]
    assert len(aside) == 1 and aside[0].read_bytes() == content


# ------------------------------------------------------------- a run that grades nothing


def test_a_class_with_nothing_to_grade_gets_every_row_and_a_failing_exit(tmp_path, capsys):
    """No kernel starts: every submission here is decided by the intake or the lint. Each gets its
    row, under its own name; the run exits 1 and says why; an empty folder exits 2."""
    from raydata_grader.__main__ import main
    from raydata_grader.records import load_rows

    subs, out = tmp_path / "class", tmp_path / "grading"
    (subs / "José García" / "data02").mkdir(parents=True)
    (subs / "José García" / "data02" / "data02.ipynb").write_bytes(b"not json")
    (subs / "李雷 Li" / "data01").mkdir(parents=True)
    (subs / "李雷 Li" / "data01" / "data01.ipynb").write_bytes(release_notebook("data02").read_bytes())
    (subs / ("x" * 255) / "data9").mkdir(parents=True)
    (subs / ("x" * 255) / "data9" / "data01.ipynb").write_bytes(b"{}")
    _zip(subs / "ann lee.zip", {"data02/data02.ipynb": b""})
    (subs / "zoe.ipynb").write_bytes(NB)
    out.mkdir()
    (out / "grades.json").write_text(json.dumps({"rows": [_row("../escape")]}))
    argv = ["grade", str(subs), "--out", str(out), "--no-sandbox", "--jobs", "1"]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("[grade] nothing was graded: none of the submissions of the 5 student(s)"), err
    rows, problems = load_rows(out)
    assert problems == [] and ("../escape", "data01") not in rows
    status = {k: (r.status, r.message) for k, r in rows.items()}
    assert set(status) == {(s, a) for s in ("José García", "李雷 Li", "x" * 255, "ann lee", "zoe.ipynb")
                           for a in ("data01", "data02")}
    assert status[("José García", "data02")][0] == "invalid" and status[("José García", "data01")][0] == "missing"
    assert status[("李雷 Li", "data01")] == ("invalid", status[("李雷 Li", "data01")][1])
    assert status[("李雷 Li", "data01")][1].startswith("this is data02's notebook, filed under data01")
    assert status[("x" * 255, "data01")][1].startswith(f"{'x' * 255}/data9/data01.ipynb: no assignment 'data9'")
    assert status[("ann lee", "data02")][0] == "invalid" and status[("zoe.ipynb", "data02")][0] == "invalid"
    with open(out / "grades.csv", newline="") as f:
        assert {r["student"] for r in csv.DictReader(f)} == {s for s, _ in status}
    for row in rows.values():
        assert (out / "feedback" / row.key / row.assignment / f"{row.assignment}.html").is_file()
        assert row.student in (out / "summary.md").read_text() or len(row.student) > 100
    assert all(len(p.name) <= 84 for folder in ("received", "notes", "feedback", "repairs")
               for p in (out / folder).iterdir())
    assert main(argv) == 1, "a second run over the same class: still nothing graded"
    (tmp_path / "empty").mkdir()
    assert main(["grade", str(tmp_path / "empty"), "--out", str(out), "--no-sandbox"]) == 2
    assert "holds no submission" in capsys.readouterr().err.strip().splitlines()[-1]
