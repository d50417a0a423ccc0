"""What a student handed in outside an assignment's folder, made into rows that say so.

The intake (:mod:`raydata_grader.intake`) grades only ``<student>/<assignment>/*.ipynb`` (and
the same inside a zip). Whatever else a student's folder or zip holds is a
:class:`~raydata_grader.submission_files.Stray`: a notebook in a mistyped folder
(``carol/data9/data01.ipynb``), a notebook next to the assignment folders, a folder or file that
is no assignment's. :func:`place_strays` decides, for each, which row it concerns, so that
nothing a student handed in is only a line on the instructor's console:

* a notebook is told apart by its cells (:func:`raydata_course.classroom.reading.exercise_of`,
  its grade ids against every release), else by its file name (``data01.ipynb``). When the
  student has no notebook of that assignment where the grader reads it, that row is
  ``invalid`` and says what was found and where to put it ("carol/data9/data01.ipynb: no
  assignment 'data9'; the assignments are data01, ...; put it in carol/data01/"); when they
  have one, the graded row notes that the other was not graded;
* a notebook whose exercise cannot be told, and anything at all from a student who handed in
  no notebook where the grader reads it, makes that student's rows without a submission
  ``invalid`` (the ``(student, "*")`` reason), listing what was found;
* other files next to a student's graded work (a README) are only noted in the log.

Examples:
    >>> from raydata_grader.submission_files import Stray, Unusable
    >>> empty = Unusable()
    >>> empty.strays.append(Stray("carol", "carol/data9/data01.ipynb", "no assignment 'data9'", b"{}", "data01"))
    >>> notes, log = place_strays({}, empty, lambda data: None, ("data01", "data02"))
    >>> print(empty[("carol", "data01")])
    carol/data9/data01.ipynb: no assignment 'data9'; the assignments are data01, data02: put it in carol/data01/
    >>> ("carol", "data01") in empty.invalid
    True
"""

from __future__ import annotations

from typing import Callable

from raydata_grader.submission_files import Stray, Unusable

__all__ = ["place_strays"]


def _home(stray: Stray, assignment: str) -> str:
    """Where ``assignment``'s notebook goes, said the way the student handed this one in."""
    if stray.zip_name:
        return f"put it in {assignment}/ inside {stray.zip_name}"
    return f"put it in {stray.student}/{assignment}/"


def _invalid(empty: Unusable, key: tuple[str, str], reason: str) -> None:
    """Make ``key``'s row invalid with ``reason`` (after any reason it already has)."""
    if key in empty and reason not in empty[key]:
        empty[key] += "; " + reason
    else:
        empty.setdefault(key, reason)
    empty.invalid.add(key)


def place_strays(found: dict, empty: Unusable, identify: Callable[[bytes], str | None],
                 known: tuple[str, ...]) -> tuple[dict[tuple[str, str], list[str]], list[str]]:
    """Decide which row each of ``empty.strays`` concerns (see the module's docstring).

    Args:
        found: the intake's notebooks per ``(student, assignment)``.
        empty: the intake's :class:`~raydata_grader.submission_files.Unusable`; reasons are
            added to it (and their keys to ``empty.invalid``).
        identify: the exercise a notebook's bytes belong to, or None (told from its cells).
        known: the course's assignment ids.

    Returns:
        ``(notes, log)``: for each ``(student, assignment)`` that is graded anyway, sentences
        for its row (another notebook of it was found elsewhere, not graded); and lines for
        the instructor's log about strays that change no row (a README next to graded work).
        The rows made invalid say the rest when they are written.
    """
    notes: dict[tuple[str, str], list[str]] = {}
    log: list[str] = []
    handed_in = {student for student, _ in found}
    every = ", ".join(known)
    unplaced: dict[str, list[Stray]] = {}
    for stray in empty.strays:
        target = None
        if stray.data is not None:
            target = identify(stray.data)
        target = target or stray.named
        if target in known:
            key = (stray.student, target)
            if key in found:
                notes.setdefault(key, []).append(
                    f"also found {stray.shown} ({stray.why}), which was not graded: only the notebook in the "
                    f"{target} folder is")
                log.append(f"{stray.student}: not graded: {stray.shown} ({stray.why}); {target} is graded from its folder")
            else:
                _invalid(empty, key, f"{stray.shown}: {stray.why}; the assignments are {every}: {_home(stray, target)}")
            continue
        if stray.data is None and stray.student in handed_in and not stray.shown.endswith(".ipynb"):
            log.append(f"{stray.student}: not graded: {stray.shown} ({stray.why})")
            continue
        unplaced.setdefault(stray.student, []).append(stray)
    for student, strays in unplaced.items():
        listed = "; ".join(f"{s.shown} ({s.why})" for s in strays)
        where = (f"in {strays[0].zip_name}, put each notebook in <assignment>/ (e.g. {known[0]}/{known[0]}.ipynb)"
                 if strays[0].zip_name and known else
                 f"put each notebook in {student}/<assignment>/ (e.g. {student}/{known[0]}/{known[0]}.ipynb)"
                 if known else "put each notebook in its assignment's folder")
        reason = (f"found {listed}, and none of it is a notebook of a course assignment in its folder; the "
                  f"assignments are {every}: {where}")
        _invalid(empty, (student, "*"), reason)
    return notes, log


def course_exercises(assignments: tuple[str, ...], root=None) -> dict[str, frozenset[str]]:
    """``{assignment: the grade ids of its release}`` for each of ``assignments`` whose release
    (``exercises/<id>/<id>.ipynb`` of the checkout, or of ``root``) can be read: what
    :func:`raydata_course.classroom.reading.exercise_of` tells notebooks apart by."""
    import nbformat

    from raydata_course.classroom.reading import exercise_grade_ids
    from raydata_grader.paths import release_notebook

    ids = {}
    for assignment in assignments:
        try:
            ids[assignment] = exercise_grade_ids(nbformat.read(release_notebook(assignment, root), as_version=4))
        except (OSError, ValueError):
            continue
    return ids
