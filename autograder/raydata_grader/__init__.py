"""The instructor's side of the course: everything only the grader may have.

It imports :mod:`raydata_course` (the student package) and is never imported by it. Nothing
here is shipped to students: the student bundle is the student package, the chapters, the
released exercises and the set-up files (:mod:`.bundle` builds it and proves it).

Modules, by job:

- course facts of the instructor's checkout: :mod:`.paths`;
- nbgrader, configured for the course: :mod:`.course_dir` (configuration, release, autograde,
  gradebook), :mod:`.nbgrader_steps` (the course's preprocessors);
- trusted grading: :mod:`.judge` (the judge: one check per grade cell, decided outside the
  kernel), :mod:`.remote` (the kernel as an oracle sees it: calls out, data back),
  :mod:`.kernel_sandbox` (bubblewrap and cgroups around every graded kernel),
  :mod:`.integrity` (gradebook and oracles unchanged, before each notebook);
- testing the tests: :mod:`.answers` (reference answers into a release) and :mod:`.mutants`
  (plausible wrong answers, and which of them may share a graded notebook);
- grading a class (``make grade``): :mod:`.grade` runs it; :mod:`.intake` finds submissions,
  :mod:`.jobs` is one notebook's job wherever it runs (its kit, its result),
  :mod:`.dispatch` runs the jobs on this machine or as Ray tasks on a cluster,
  :mod:`.results` merges each result into the grading folder (:mod:`.gradebook`: the
  submission's grades as data), :mod:`.scratch` sweeps what a killed job left,
  :mod:`.progress` shows how far a run is, :mod:`.sandbox` limits each autograde's worker,
  :mod:`.worker` is the autograde, :mod:`.outcome` turns how it ended into a status,
  :mod:`.records` keeps the rows, :mod:`.feedback` writes the students' pages and
  :mod:`.summary` the class summary and the run's throughput;
- the other instructor commands: :mod:`.release` (``make release``), :mod:`.course_run`
  (``make course``), :mod:`.bundle` (``make student-bundle``), :mod:`.formgrader`
  (``make jupyter`` with formgrader on a grading folder);
- one command line for all of them: ``python -m raydata_grader`` (:mod:`.__main__`).
"""

__version__ = "0.1.0"
