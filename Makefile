# The course's set-up and checks. `make book` and `make test` are all a fresh machine needs.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The pip cap on this machine (/etc/xdg/pip) keeps torch on the CPU build that lies on disk.
PIP_FLAGS := --quiet --disable-pip-version-check --no-input

.PHONY: help venv system nbgrader-env book kit test lint lab grade exercises sizes lock clean

help:
	@echo "make book       build the HTML book in _build/html, executing every chapter"
	@echo "make test       run the whole test suite (library, notebooks, mutants, book build);"
	@echo "                as root, it first installs the Debian packages the suite needs (chromium)"
	@echo "make lab        open JupyterLab on the exercises (its terminals use the course's Python);"
	@echo "                options for jupyter lab go in ARGS: make lab ARGS=\"--no-browser --port 8899\""
	@echo "make grade NB=exercises/layernorm.ipynb"
	@echo "                score a notebook, as the grader will"
	@echo "make exercises  regenerate exercises/ from solutions/"
	@echo "make kit        the learner kit, $(KIT) (make book builds it too)"
	@echo "make lint       ruff"
	@echo "make sizes      each page's words of prose and lines of shown code"
	@echo "make lock       re-pin requirements.txt from requirements.in"

NEED_PYTHON := command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; install Python 3.11 or run 'make PYTHON=python3 ...'" >&2; exit 1; }

venv: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	@$(NEED_PYTHON)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install $(PIP_FLAGS) -r requirements.txt 2>&1 | grep -v "^WARNING: Location" || true
	@$(BIN)/python -c "import torch, jupyter_book, nbval" || { echo "error: installing requirements.txt failed (see above)" >&2; exit 1; }
	$(BIN)/python -m pip install $(PIP_FLAGS) --no-deps --no-build-isolation -e .
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 >/dev/null
	@# matplotlib builds its font cache on first import and says so on stderr: do it now, not in a chapter
	$(BIN)/python -c "import matplotlib.pyplot" 2>/dev/null
	@touch $@

# Chapters' cached outputs depend on the library too, which the cache does not see: drop the
# cache and Sphinx's environment whenever addnorm_lib changes, so no page shows numbers from older
# library code (a rebuild with no change still takes seconds).
LIBRARY := $(shell find addnorm_lib -name '*.py' 2>/dev/null)
_build/.library-stamp: $(LIBRARY)
	rm -rf _build/.jupyter_cache _build/.doctrees
	@mkdir -p _build && touch $@

# require.js and html-manager, pinned, so that the book's widgets render offline (see _config.yml).
WIDGET_JS := _vendor/widgets/.complete
$(WIDGET_JS): $(STAMP) addnorm_lib/authoring/widgets.py
	$(BIN)/python -m addnorm_lib.authoring.widgets --dest _vendor/widgets

# The learner kit (addnorm_lib/authoring/kit.py): the exercises, the library's wheel, pinned
# requirements and a README in one archive, which book/exercises.md offers for download. The book
# needs it (a missing download is a build error), and so do the book's tests.
KIT := book/_generated/addnorm-kit.zip
kit: $(KIT)
$(KIT): $(STAMP) $(LIBRARY) $(wildcard addnorm_lib/*/templates/* addnorm_lib/*/static/*) \
		pyproject.toml requirements.txt $(wildcard solutions/*.ipynb)
	$(BIN)/python -m addnorm_lib.authoring.kit --dest $(dir $(KIT))

book: $(STAMP) $(WIDGET_JS) _build/.library-stamp $(KIT)
	@start=$$(date +%s); \
	$(BIN)/jupyter-book build . --builder html --warningiserror --nitpick --keep-going && \
	$(BIN)/python -m addnorm_lib.authoring.build_report --since $$start && \
	echo "Built in $$(( $$(date +%s) - start )) s. The book is in _build/html/index.html"

# The system packages the suite needs (addnorm_lib/_provision.py): installed with apt-get when
# missing and this is root; otherwise one line says what to run. Standard library only.
system:
	@$(NEED_PYTHON)
	@$(PYTHON) -m addnorm_lib._provision

# nbgrader in an environment of its own (its Jupyter stack is not the course's): the test that runs
# the exercises through a real nbgrader course uses it, with the course's Python as the kernel.
NBGRADER_VENV := .venv-nbgrader
NBGRADER_STAMP := $(NBGRADER_VENV)/.installed
nbgrader-env: $(NBGRADER_STAMP)
$(NBGRADER_STAMP): requirements-nbgrader.txt
	@$(NEED_PYTHON)
	@test -x $(NBGRADER_VENV)/bin/python || $(PYTHON) -m venv $(NBGRADER_VENV)
	$(NBGRADER_VENV)/bin/python -m pip install $(PIP_FLAGS) -r requirements-nbgrader.txt 2>&1 | grep -v "^WARNING: Location" || true
	@$(NBGRADER_VENV)/bin/nbgrader --version >/dev/null || { echo "error: installing requirements-nbgrader.txt failed (see above)" >&2; exit 1; }
	@touch $@

# The book tests and the browser tests share one build: --dist loadgroup runs them on one worker.
# One math thread per process: the workers, their kernels and the book's already fill the cores,
# and torch's own threads on top of them made the suite slower, not faster. One worker more than
# cores: with one per core, a third of the CPU time was idle (tests waiting on kernels, clocks and
# subprocesses); on 2 cores, 3 workers took 569 s where 2 took 607-614 s (README).
TEST_WORKERS := $(shell echo $$(( $$(nproc) + 1 )))
test: system $(STAMP) $(WIDGET_JS) $(NBGRADER_STAMP) $(KIT)
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup --durations=10

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check addnorm_lib tests benchmarks

# JupyterLab on the exercises (addnorm_lib/_lab.py): --allow-root as root, ARGS passed on
# (make lab ARGS="--no-browser --port 8899"), and terminals that activate the course's venv after
# the user's own shell rc files, whatever those do to PATH.
ARGS ?=
lab: $(STAMP)
	$(BIN)/python -m addnorm_lib._lab $(ARGS)

OUT ?= grades
grade: $(STAMP)
	@test -n "$(NB)" || { echo "usage: make grade NB=exercises/layernorm.ipynb [OUT=grades]" >&2; exit 2; }
	@$(BIN)/python -m addnorm_lib.grading $(NB) --out $(OUT)

exercises: $(STAMP)
	$(BIN)/python -m addnorm_lib.authoring.release

# A chapter's main page: at most 3,000 words of prose and 250 lines of shown code (a test holds it).
sizes: $(STAMP)
	@$(BIN)/python -m addnorm_lib.authoring.page_size book/*.md

lock:
	rm -rf /tmp/addnorm-lock && $(PYTHON) -m venv /tmp/addnorm-lock
	/tmp/addnorm-lock/bin/python -m pip install $(PIP_FLAGS) -r requirements.in
	{ echo "# Generated by 'make lock' from requirements.in: every package the course installs, pinned."; \
	  echo "# torch resolves to the CPU build (2.13.0+cpu) that this machine keeps on disk."; \
	  /tmp/addnorm-lock/bin/python -m pip freeze --exclude-editable | sed 's/^torch==2.13.0+cpu$$/torch==2.13.0/' | sort -f; } > requirements.txt

clean:
	rm -rf _build
