# Streaming Ray Data: every entry point creates .venv on first use.
#
#   make course      run every chapter headless, grade every reference solution, run the quick lab
#   make lab         the training-ingest lab: every variant, 3 repeats (QUICK=1: the CI subset;
#                    RAY=2.55.1: the same lab against another Ray release, in .venv-ray2.55.1)
#   make lab-gpu     on a GPU node: the lab's GPU check (CUDA required, at most 8 minutes; OUT=folder)
#   make test        the full test suite (what CI runs), in TEST_WORKERS parallel processes
#                    (default 2; each has its own Ray cluster; TEST_WORKERS=0 runs it in one)
#   make test-fast   the inner loop: package units and static checks, no notebook execution, no
#                    playground build (make test builds it: PyPI and npm once, 98 MB of build tools)
#   make release     regenerate exercises/ from solutions/ with nbgrader
#   make grade SUBMISSIONS=path   grade a class: grades.csv, feedback, summary (OUT=build/grading;
#                    JOBS=N notebooks at once, default what the machine allows; CLUSTER=addr: on a Ray cluster)
#   make student-bundle   build/student-bundle.zip: what students get (no solutions, no hidden tests),
#                    with the browser playground's site (runs `make playground` first)
#   make jupyter     open JupyterLab at the course root with the course kernel and formgrader
#                    (GRADING=build/grading: formgrader shows that grading folder)
#   make playground  the browser playground: a JupyterLite site in build/playground/, built offline from
#                    PyPI and the npm registry (its tools in build/playground-tools, downloads cached)
#   make setup       only build .venv
#   make lock        re-pin requirements-lock.txt from a fresh .venv
#   make strip       strip outputs from every committed notebook

SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
# nbgrader shells out to `alembic` from the venv; Ray and the kernels find the venv first.
RUN := PATH="$(CURDIR)/$(BIN):$$PATH" RAYDATA_COURSE_HEADLESS=1
# The instructor's commands live in the grader package (autograder/raydata_grader).
GRADER := $(BIN)/python -m raydata_grader
TEST_WORKERS ?= 2
# Installed, then removed: jsonschema's optional IRI format checker (its format-nongpl extra,
# which Jupyter asks for). `import ray` imports jsonschema, and jsonschema imports this package,
# which builds an Earley grammar at import: about 2.2 CPU-s in every Ray worker, driver and graded
# notebook's worker. Nothing here checks the "iri" format; jsonschema skips it when the package
# is absent (jsonschema/_format.py). tests/test_environment.py checks that it is gone.
SLOW_OPTIONAL := rfc3987-syntax

.PHONY: setup course lab lab-gpu lab-quick test test-fast release jupyter lock strip clean grade student-bundle playground

$(STAMP): requirements.txt requirements-lock.txt pyproject.toml autograder/pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else "The course needs Python 3.11, found " + sys.version.split()[0] + ": set PYTHON=/path/to/python3.11")'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt -c requirements-lock.txt
	$(BIN)/python -m pip install --quiet --no-deps -e . -e autograder
	$(BIN)/python -m pip uninstall --quiet --yes $(SLOW_OPTIONAL)
	$(BIN)/python -m raydata_course.jupyter --install-kernel
	touch $(STAMP)

setup: $(STAMP)

course: $(STAMP)
	$(RUN) $(GRADER) course --out build/course

# >>> the lab: the student bundle's Makefile takes this part as it is (raydata_grader.bundle.lab_rules)
# `make lab RAY=2.55.1` runs the lab against another Ray release, in its own venv.
RAY ?=
ifneq ($(RAY),)
LAB_VENV := .venv-ray$(RAY)
LAB_OUT := build/lab-ray$(RAY)
LAB_ENV := RAYDATA_COURSE_RAY_VERSION=$(RAY)
else
LAB_VENV := $(VENV)
LAB_OUT := build/lab
LAB_ENV :=
endif

# Another Ray release's venv: the same pins, with only Ray swapped.
.venv-ray%/.installed-stamp: requirements.txt requirements-lock.txt pyproject.toml
	test -x .venv-ray$*/bin/python || $(PYTHON) -m venv .venv-ray$*
	.venv-ray$*/bin/python -m pip install --quiet --upgrade pip
	mkdir -p build
	{ grep -v '^ray\[' requirements.txt; echo 'ray[data,train]==$*'; } > build/requirements-ray$*.txt
	grep -v '^ray==' requirements-lock.txt > build/lock-ray$*.txt
	.venv-ray$*/bin/python -m pip install --quiet -r build/requirements-ray$*.txt -c build/lock-ray$*.txt
	.venv-ray$*/bin/python -m pip install --quiet --no-deps -e .
	.venv-ray$*/bin/python -m pip uninstall --quiet --yes $(SLOW_OPTIONAL)
	touch $@

lab: $(LAB_VENV)/.installed-stamp
	PATH="$(CURDIR)/$(LAB_VENV)/bin:$$PATH" RAYDATA_COURSE_HEADLESS=1 $(LAB_ENV) \
	  $(LAB_VENV)/bin/python -m raydata_course.lab --out $(LAB_OUT) $(if $(QUICK),--quick,) \
	  --compare-with $(sort $(wildcard build/lab/results.json build/lab-ray*/results.json))
# <<< the lab

# The GPU check, on a GPU node without the course's venv: Ray comes from .gpu/ (made by the
# project's gpu-bundle hook), torch from the machine. CUDA is required; at most 8 minutes.
# Writes its tables and figures to $(OUT) (default build/lab-gpu).
lab-gpu:
	source .gpu/activate && PYTHONPATH="$(CURDIR)/src:$$PYTHONPATH" RAYDATA_COURSE_HEADLESS=1 \
	  timeout 480 python3 -m raydata_course.lab --gpu-check --deadline-s 400 --out "$${OUT:-build/lab-gpu}"

# The playground's build tools (JupyterLite, its Pyodide kernel) in a venv of their own.
PLAYGROUND_TOOLS := build/playground-tools
$(PLAYGROUND_TOOLS)/.installed-stamp: playground/requirements-build.txt
	test -x $(PLAYGROUND_TOOLS)/bin/python || $(PYTHON) -m venv $(PLAYGROUND_TOOLS)
	$(PLAYGROUND_TOOLS)/bin/python -m pip install --quiet -r playground/requirements-build.txt || { \
	  echo "make playground: its build tools (playground/requirements-build.txt) come from PyPI on the first build: connect once; later builds need no network"; exit 2; }
	touch $@

playground: $(STAMP) $(PLAYGROUND_TOOLS)/.installed-stamp
	$(RUN) $(BIN)/python -m raydata_course.playground --jupyter $(PLAYGROUND_TOOLS)/bin/jupyter --out build/playground

lab-quick: $(STAMP)
	$(RUN) $(BIN)/python -m raydata_course.lab --out build/lab-quick --quick

test: $(STAMP)
	$(RUN) $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal --durations=25

test-fast: $(STAMP)
	$(RUN) $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal -m "not slow"

release: $(STAMP)
	$(RUN) $(GRADER) release

# `make grade SUBMISSIONS=path [OUT=build/grading] [JOBS=N] [CLUSTER=host:6379] [GRADE_ARGS="--cell-timeout 120 ..."]`
grade: $(STAMP)
	@test -n "$(SUBMISSIONS)" || { echo "usage: make grade SUBMISSIONS=<folder of <student>/<assignment>/*.ipynb or <student>.zip> [JOBS=N] [CLUSTER=address]"; exit 2; }
	$(RUN) $(GRADER) grade $(SUBMISSIONS) --out $(or $(OUT),build/grading) $(if $(JOBS),--jobs $(JOBS),) \
	  $(if $(CLUSTER),--cluster $(CLUSTER),) $(GRADE_ARGS)

student-bundle: $(STAMP) playground
	$(RUN) $(GRADER) bundle --out build/student-bundle.zip --site build/playground

# JupyterLab at the course root (nbgrader's extension reads ./nbgrader_config.py there) with the
# course kernel; raydata_grader.formgrader holds the command line. ARGS="--port 8899 --no-browser".
jupyter: $(STAMP)
	$(GRADER) jupyter $(if $(GRADING),--grading $(GRADING),) $(ARGS)

lock:
	rm -rf build/lock-venv && $(PYTHON) -m venv build/lock-venv
	build/lock-venv/bin/python -m pip install --quiet --upgrade pip
	build/lock-venv/bin/python -m pip install --quiet -r requirements.txt
	{ echo "# Every package the course installs, pinned (pip freeze of a fresh .venv built from"; \
	  echo "# requirements.txt). Installed as constraints: pip install -r requirements.txt -c requirements-lock.txt."; \
	  echo "# Regenerate with \`make lock\` after changing requirements.txt."; \
	  build/lock-venv/bin/python -m pip freeze --exclude-editable | sed -E 's/^(torch==[0-9.]+)\+cpu$$/\1/'; \
	} > requirements-lock.txt
	rm -rf build/lock-venv

strip: $(STAMP)
	$(BIN)/python -m nbstripout --keep-id $$(git ls-files '*.ipynb')

clean:
	rm -rf build submitted autograded feedback source_with_tests gradebook.db .venv-ray*
