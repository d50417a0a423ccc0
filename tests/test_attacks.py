"""The attack class, graded in the sandbox: every hostile vector fails, and the run holds.

``autograder/fixtures/attack_class.py`` builds one honest student (``zoe``, graded first) and
the attackers (graded next into the same folder). For every attacker the test checks the
expected status and per-cell scores, and for the run as a whole that:

- nothing secret reached a file a student could see or the kernel could print: no oracle code
  line and no reference-answer line (a student's own submitted lines excepted) in feedback,
  notes, repair logs, the CSV, the summary, the autograded notebooks or the logs;
- the honest student's files and row are byte for byte what they were, and the oracles too;
- no process, file, cgroup or shared-memory segment outlived its notebook, and a daemon that
  wanted to rewrite the grades after the run could not;
- every feedback page is inert (no script, event handler or ``javascript:`` URL from a
  submission), carries the grader's Content-Security-Policy, and is small;
- every notebook the grader stored for a viewer (``submitted/``, ``autograded/``) is inert: it is
  what :func:`raydata_grader.inert.inert_notebook` makes of itself, and holds no output metadata
  but numbers for images' sizes, no attachment, no markup that runs; the verbatim copies in
  ``received/`` are zips, which no viewer renders;
- the grading process stays under its memory bound (:data:`GRADER_PEAK_GROWTH_BYTES`): its peak
  resident memory (``VmHWM``, reset through ``/proc/self/clear_refs`` before the attackers are
  graded) grows by less than that while it grades them;
- no kernel wrote to or read from the kernel keyring, made a user namespace, traced a process
  or found a folder of the grader's in any process's command line or environment, and no
  sandbox uid holds a key afterwards;
- no student-visible file names the instructor's submissions or grading folder.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
import sys
import time
import zipfile
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import psutil
import pytest

from raydata_course.units import GiB, MiB
from raydata_grader.bundle import find_secrets, html_text, secret_lines
from raydata_grader.grade import GradeOptions, grade_class
from raydata_grader.judge import oracle_digests
from raydata_grader.paths import oracles_dir
from raydata_grader.sandbox_uids import SANDBOX_UID_BASE, SANDBOX_UID_SLOTS, key_counts

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow
#: How much the grading process's peak resident memory may grow while it grades the attackers.
GRADER_PEAK_GROWTH_BYTES = 512 * MiB


def _status_bytes(field: str) -> int:
    """A memory figure of this process from ``/proc/self/status`` (``VmHWM``: its peak resident set), in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def _reset_peak_rss() -> int:
    """Reset this process's ``VmHWM`` to its resident memory now (Linux 4.0+); return that, in bytes."""
    Path("/proc/self/clear_refs").write_text("5")
    return _status_bytes("VmRSS")


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "autograder" / "fixtures" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


class _ActiveContent(HTMLParser):
    """Collects what in a page could run: script bodies, event-handler attributes, javascript: URLs."""

    def __init__(self):
        super().__init__()
        self.found: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        self._in_script = tag == "script"
        if tag in ("iframe", "object", "embed"):
            self.found.append(f"<{tag}>")
        for name, value in attrs:
            value = (value or "").strip().lower()
            if name.lower().startswith("on"):
                self.found.append(f"{tag} {name}={value[:60]}")
            if name.lower() in ("href", "src", "action", "xlink:href") and value.startswith("javascript:"):
                self.found.append(f"{tag} {name}={value[:60]}")

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_script = False

    def handle_data(self, data):
        if self._in_script and ("rdg-payload" in data or "alert(" in data):
            self.found.append(f"script: {data.strip()[:80]}")


def _norm(text: str) -> str:
    return " ".join(text.split())


def _readable(path: Path) -> str:
    """A file's text as a reader sees it: a notebook's sources and outputs, a page's text and markup,
    each member of a zip as such."""
    if path.suffix == ".zip":
        with zipfile.ZipFile(path) as archive:
            return "\n".join(_readable_text(Path(n), archive.read(n).decode(errors="replace"))
                             for n in archive.namelist())
    return _readable_text(path, path.read_text(errors="replace"))


def _readable_text(path: Path, raw: str) -> str:
    if path.suffix == ".ipynb":
        try:
            nb = nbformat.reads(raw, as_version=4)
        except Exception:  # noqa: BLE001 - a submission need not be a notebook
            return raw
        parts = []
        for cell in nb.cells:
            parts.append(cell.get("source", ""))
            for output in cell.get("outputs", []):
                parts.append(output.get("text", "") + output.get("evalue", "") + "\n".join(output.get("traceback", [])))
                parts += [v if isinstance(v, str) else json.dumps(v) for v in output.get("data", {}).values()]
        return "\n".join(parts)
    if path.suffix == ".html":
        return html_text(raw) + "\n" + raw
    return raw


def _printed(out: Path, student: str, assignment: str) -> str:
    """Everything a student's graded notebook printed (its stream outputs), as one text."""
    nb = nbformat.read(out / "autograded" / student / assignment / f"{assignment}.ipynb", 4)
    return "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))


def _digest_tree(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _student_files(out: Path, student: str) -> dict[str, str]:
    found = {}
    for top in ("feedback", "notes", "submitted", "autograded", "received", "work"):
        folder = out / top / student
        if folder.is_dir():
            found.update({f"{top}/{k}": v for k, v in _digest_tree(folder).items()})
    repairs = out / "repairs" / f"{student}.md"
    if repairs.is_file():
        found["repairs"] = hashlib.sha256(repairs.read_bytes()).hexdigest()
    return found


def _orphan_kernels() -> list[str]:
    """Kernels whose sandbox folder is gone: they outlived their notebook."""
    orphans = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info["cmdline"] or []
        if "ipykernel_launcher" in cmd and "-f" in cmd:
            connection = Path(cmd[cmd.index("-f") + 1])
            if str(connection).startswith("/tmp/rdg-") and not connection.parent.exists():
                orphans.append(f"{proc.pid}: {' '.join(cmd)[:200]}")
        elif any("rdg-payload" in part for part in cmd):
            orphans.append(f"{proc.pid}: {' '.join(cmd)[:200]}")
    return orphans


def test_grade_the_attack_class(tmp_path, sandbox_support):
    attacks = _load("attack_class")
    folder = attacks.build_attack_class(tmp_path / "class")
    out = tmp_path / "grading"
    # one notebook at a time: two test workers already share two cores
    options = GradeOptions(cell_timeout_s=150, notebook_timeout_s=900, memory_bytes=4 * GiB, quiet=True, jobs=1)
    oracles_before = oracle_digests(oracles_dir())
    keys_before = key_counts()

    rows = grade_class(folder / "honest", out, options)
    honest = rows[(attacks.HONEST, attacks.ASSIGNMENT)]
    assert honest.status == "graded" and honest.score == honest.max_score == 12, honest
    honest_files = _student_files(out, attacks.HONEST)

    start = time.monotonic()
    rss_before = _reset_peak_rss()
    rows = grade_class(folder / "attackers", out, options)
    wall_s = time.monotonic() - start
    peak_growth = _status_bytes("VmHWM") - rss_before
    print(f"\nattack class: {len(rows)} rows in {wall_s:.0f} s; the grading process's peak resident memory "
          f"(VmHWM) {(rss_before + peak_growth) / MiB:.0f} MiB, {peak_growth / MiB:.0f} MiB over its "
          f"{rss_before / MiB:.0f} MiB at the start")
    for (student, assignment), row in sorted(rows.items()):
        print(f"  {student:8} {assignment} {row.status:8} {row.score:4g}/{row.max_score:g}  {row.message[:120]}")

    # ---- every vector failed: the expected status and scores, and the run completed
    problems = []
    for attack in attacks.ATTACKS:
        row = rows.get((attack.student, attacks.ASSIGNMENT))
        if row is None:
            problems.append(f"{attack.student}: no row")
            continue
        if row.status != attack.status or attack.message not in row.message:
            problems.append(f"{attack.student}: {row.status} ({row.message[:200]}), expected {attack.status} "
                            f"with {attack.message!r}")
            continue
        if attack.lost is None:
            if row.score != 0:
                problems.append(f"{attack.student}: scored {row.score}, expected 0")
            continue
        lost = {cell for cell, (s, m) in row.cells.items() if s < m}
        if lost != set(attack.lost) or len(row.cells) != 8:
            problems.append(f"{attack.student}: lost {sorted(lost)}, expected to lose {sorted(attack.lost)}")
    assert not problems, "\n".join(problems)
    assert ("bob", attacks.ASSIGNMENT) not in rows, "alice.zip became bob's submission"
    assert rows[(attacks.HONEST, attacks.ASSIGNMENT)] == honest, "the honest student's row changed"

    # ---- nothing secret reached anything a student or a kernel could see: no oracle code line,
    # and no reference-answer line that the student did not submit themselves
    secrets = secret_lines(ROOT)
    own = {student: _readable(p) for student in {a.student for a in attacks.ATTACKS} | {attacks.HONEST}
           for p in [next((out / "received" / student).rglob("*.zip"), None)] if p is not None}
    leaks = []
    shared = [out / "grades.csv", out / "grades.json", out / "summary.md"]
    per_student = [p for top in ("feedback", "notes", "autograded", "repairs", "work")
                   for p in (out / top).rglob("*") if p.is_file()]
    for path in shared + per_student:
        student = next((s for s in own if s in path.parts or path.name == f"{s}.md"), None)
        mine = _norm(own.get(student, ""))
        kept = {k: {ln for ln in lines if ln not in mine} for k, lines in secrets.items()}
        found = find_secrets(_readable(path), kept, markers=())
        if found:
            leaks.append(f"{path.relative_to(out)}: {found[:3]}")
    assert not leaks, "secret lines reached student-visible files:\n" + "\n".join(leaks)

    # ---- the honest student, the oracles, the gradebook: untouched
    assert _student_files(out, attacks.HONEST) == honest_files, "an attacker changed the honest student's files"
    assert oracle_digests(oracles_dir()) == oracles_before, "an attacker changed the oracles"

    # ---- every job ended completely
    assert not _orphan_kernels(), _orphan_kernels()
    assert not list(Path("/dev/shm").glob("rdg-payload*")) and not Path("/tmp/rdg-payload-tmp").exists()
    for result in (out / "work").rglob("result.json"):
        sandbox = json.loads(result.read_text()).get("sandbox", {})
        assert sandbox.get("level") in ("root", "user"), f"{result}: graded without a sandbox"
        assert not Path(sandbox["base_dir"]).exists(), f"{result}: the sandbox folder outlived the notebook"
        assert not any(Path(d).exists() for d in sandbox.get("cgroup_dirs", [])), f"{result}: a cgroup outlived it"
    if sandbox_support.level == "root":  # the connection folder was locked before the first cell
        printed = _printed(out, "lia", attacks.ASSIGNMENT)
        assert "rdg-ipc-refused" in printed and "rdg-ipc-wrote" not in printed, printed[-2000:]

    # ---- no kernel reached the keyring, a user namespace, another process or the grader's folders
    kim, kai = _printed(out, "kim", attacks.ASSIGNMENT), _printed(out, "kai", attacks.ASSIGNMENT)
    for student, printed in (("kim", kim), ("kai", kai)):
        keyring = [line for line in printed.splitlines() if line.startswith("rdg-keyring")]
        assert len(keyring) == 6 and all(line.endswith(" EPERM") for line in keyring), (student, keyring)
    for line in ("rdg-userns clone: EPERM", "rdg-userns unshare: EPERM", "rdg-ptrace child: EPERM",
                 "rdg-ptrace pid 1: EPERM"):
        assert line in kim, (line, kim[-3000:])
    unshare = next(line for line in kim.splitlines() if line.startswith("rdg-userns unshare -r:"))
    assert "Operation not permitted" in unshare, unshare
    paths = ast.literal_eval(next(line for line in kai.splitlines() if line.startswith("rdg-proc paths:"))
                             .split(":", 1)[1].strip())
    assert paths and not [p for p in paths if "rdg-" in p or str(tmp_path) in p], paths
    after = key_counts()
    assert not [uid for uid, n in after.items() if n > keys_before.get(uid, 0)
                and (SANDBOX_UID_BASE <= uid < SANDBOX_UID_BASE + SANDBOX_UID_SLOTS or uid == 65534)], after
    grades = (out / "grades.json").read_text()
    time.sleep(3)
    assert (out / "grades.json").read_text() == grades
    for row in json.loads(grades)["rows"]:  # no payload but the lines of its own code a row quotes for review
        text = json.dumps(row)
        for finding in row.get("findings", []):
            text = text.replace(json.dumps(finding)[1:-1], "")
        assert "rdg-payload" not in text, row["student"]

    # ---- the grading process stayed within its bound
    assert peak_growth < GRADER_PEAK_GROWTH_BYTES, f"the grading process grew by {peak_growth / MiB:.0f} MiB"

    # ---- stored notebooks are inert, the verbatim copies unviewable
    assert not list((out / "received").rglob("*.ipynb")), "a verbatim copy a viewer would render as a notebook"
    stored = [p for top in ("submitted", "autograded") for p in (out / top).rglob("*.ipynb")]
    assert len(stored) >= 2 * 6, stored
    for path in stored:
        _assert_stored_inert(path)
    oscar = nbformat.read(out / "autograded" / "oscar" / attacks.ASSIGNMENT / f"{attacks.ASSIGNMENT}.ipynb", 4)
    outputs = [o for c in oscar.cells for o in c.get("outputs", [])]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) == 2 and all(o["metadata"] == {} for o in images), images  # no width, no height: strings
    assert "characters of output were dropped by the grader" in "".join(o.get("text", "") for o in outputs)
    assert [len(o["ename"]) for o in outputs if o.get("ename", "").startswith("RdgPayloadEEE")] == [200]

    # ---- pages are inert and small
    for page in (out / "feedback").rglob("*.html"):
        text = page.read_text()
        assert len(text) < 2 * MiB, f"{page} is {len(text):,} characters"
        assert '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'' in text[:2000], page
        scanner = _ActiveContent()
        scanner.feed(text)
        assert not [f for f in scanner.found if "rdg-payload" in f or "alert(" in f or "javascript:" in f
                    or f.startswith("<")], f"{page}: {scanner.found[:5]}"
    mallory = html_text((out / "feedback" / "mallory" / "data01" / "data01.html").read_text())
    assert "rdg-payload" in mallory, "the escaped payloads should still be readable as text"
    csv_text = (out / "grades.csv").read_text()
    assert "=HYPERLINK" not in csv_text.replace("'=HYPERLINK", "")


def _assert_stored_inert(path: Path) -> None:
    """A notebook the grader stored holds only inert data, and is its own inert form."""
    from nbconvert.filters.markdown import markdown2html
    from support.pages import Page

    from raydata_grader.inert import inert_notebook

    nb = nbformat.read(path, as_version=4)
    again, _ = inert_notebook(nb, keep_grader_notes=True)
    assert nbformat.writes(again) == nbformat.writes(nb), f"{path} is not what the inert pass makes of it"
    for cell in nb.cells:
        assert "attachments" not in cell, path
        if cell.cell_type == "markdown":
            page = Page(markdown2html(cell.source))
            assert page.scripts == [] and page.handlers() == [], (path, cell.source[:200])
            assert not {t for t, _ in page.tags} & {"iframe", "svg", "object", "embed", "form", "script", "style"}
        for output in cell.get("outputs", []):
            for mime, meta in output.get("metadata", {}).items():
                assert mime.startswith("image/") and set(meta) <= {"width", "height", "unconfined"}, (path, meta)
                assert all(isinstance(meta[k], (int, float)) for k in ("width", "height") if k in meta), (path, meta)
    assert set(nb.metadata) <= {"kernelspec", "language_info", "raydata_grader"}, (path, sorted(nb.metadata))


def _student_visible(out: Path) -> list[Path]:
    """The files of a grading folder that a student or a shared spreadsheet may see."""
    return [out / "grades.csv", *(p for top in ("feedback", "notes", "repairs") for p in (out / top).rglob("*")
                                  if p.is_file())]


def test_no_folder_of_the_instructors_reaches_a_students_files(tmp_path):
    """A zip whose notebook's name is longer than a file name may be breaks the grader's copy of
    it: the row says the grader failed, and neither the grading folder's path nor the
    submissions folder's reaches the CSV, the notes or the feedback page."""
    import zipfile

    attacks = _load("attack_class")
    subs, out = tmp_path / "instructor-submissions", tmp_path / "instructor-grading"
    subs.mkdir()
    with zipfile.ZipFile(subs / "olga.zip", "w") as z:
        z.writestr(f"{attacks.ASSIGNMENT}/" + "a" * 300 + ".ipynb",
                   nbformat.writes(nbformat.read(ROOT / "exercises" / "data01" / "data01.ipynb", 4)))
    from raydata_grader.grade import NothingGraded
    from raydata_grader.records import load_rows

    with pytest.raises(NothingGraded):  # her one submission could not be graded: the run says so
        grade_class(subs, out, GradeOptions(quiet=True, jobs=1))
    row = load_rows(out)[0][("olga", attacks.ASSIGNMENT)]
    assert row.status == "crashed" and "<grading folder>/received/olga" in row.message, row
    files = _student_visible(out)
    assert any("olga" in str(p) for p in files)
    leaks = [str(p.relative_to(out)) for p in files for folder in (subs, out) if str(folder) in p.read_text()]
    assert not leaks, leaks


def test_an_unreadable_notebook_is_refused_without_the_folders_path(tmp_path):
    """Read by a grader that is not root, a notebook it may not read is refused with the reason,
    and the reason does not name the instructor's submissions folder."""
    import os
    import subprocess

    subs = Path(f"/tmp/rdg-test-{os.getpid()}-instructor-submissions")
    notebook = subs / "pia" / "data01" / "data01.ipynb"
    notebook.parent.mkdir(parents=True)
    notebook.write_text("{}")
    notebook.chmod(0)
    for folder in (subs, subs / "pia", notebook.parent):
        folder.chmod(0o755)
    code = ("import json, sys; from raydata_grader.intake import collect_submissions; "
            "found, students, empty, notes = collect_submissions(sys.argv[1], ('data01',)); "
            "print(json.dumps({'empty': {'/'.join(k): v for k, v in empty.items()}, 'notes': notes}))")
    cmd = [sys.executable, "-c", code, str(subs)]
    if os.geteuid() == 0:  # root reads any file: read as nobody
        cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *cmd]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd="/")
    finally:
        subprocess.run(["rm", "-rf", str(subs)], check=False)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    assert "Permission denied" in seen["empty"]["pia/data01"], seen
    assert str(subs) not in out.stdout, seen
