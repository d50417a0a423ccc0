# Streaming Ray Data: every entry point creates .venv on first use.
#
#   make course      run every chapter headless, grade every reference solution, run the quick lab
#   make lab         the training-ingest lab: every variant, 3 repeats (QUICK=1: the CI subset)
#   make test        the full test suite (what CI runs)
#   make test-fast   the inner loop: package units and static checks, no notebook execution
#   make release     regenerate exercises/ from solutions/ with nbgrader
#   make jupyter     open JupyterLab at the course root with the course kernel
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
KERNEL := raydata-course

.PHONY: setup course lab lab-quick test test-fast release jupyter lock strip clean

$(STAMP): requirements.txt requirements-lock.txt pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else "The course needs Python 3.11, found " + sys.version.split()[0] + ": set PYTHON=/path/to/python3.11")'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt -c requirements-lock.txt
	$(BIN)/python -m pip install --quiet --no-deps -e .
	$(BIN)/python -m ipykernel install --sys-prefix --name $(KERNEL) --display-name "Python ($(KERNEL))"
	touch $(STAMP)

setup: $(STAMP)

course: $(STAMP)
	$(RUN) $(BIN)/python -m raydata_course.course --out build/course

lab: $(STAMP)
	$(RUN) $(BIN)/python -m raydata_course.lab --out build/lab $(if $(QUICK),--quick,)

lab-quick: $(STAMP)
	$(RUN) $(BIN)/python -m raydata_course.lab --out build/lab-quick --quick

test: $(STAMP)
	$(RUN) $(BIN)/python -m pytest

test-fast: $(STAMP)
	$(RUN) $(BIN)/python -m pytest -m "not slow"

release: $(STAMP)
	$(RUN) $(BIN)/python -m raydata_course.release

jupyter: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/jupyter lab --notebook-dir=$(CURDIR) \
	  --MappingKernelManager.default_kernel_name=$(KERNEL)

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
	rm -rf build submitted autograded feedback source_with_tests gradebook.db
