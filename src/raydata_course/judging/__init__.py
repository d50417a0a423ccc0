"""How a graded kernel talks to the grader's judge (public: nothing here is secret).

The instructor's grader runs each submitted notebook in a sandbox. Its hidden tests do not
run in the notebook's kernel: a *judge*, a process outside the sandbox, holds them. At every
grade cell the grader asks the kernel to serve the judge (:func:`raydata_course.judging.kernel.serve`):
the judge chooses inputs, the student's code runs on them in the kernel, the results come
back as data (:mod:`raydata_course.judging.wire`), and the judge decides. Its verdicts are the
grades. :mod:`raydata_course.judging.helpers` holds the small pieces of kernel-side glue the
judge calls (building a dataset from blocks, a read-only batch, a measured run).

Students never need to call any of this: Validate and the self-check run the visible tests in
the notebook as before.
"""
