# Two commands do everything on a fresh machine with Python 3.11 and make:
#   make book   -- virtual environment + pinned packages, execute (quick profile) and render the book
#   make test   -- the whole test suite: the fast tier, then the slow tier (which includes a full
#                  quick-profile build of the book), so a broken unit fails in minutes
#   make test-fast -- the library and the chapters' claims, without the slow tier (< 2 min; a
#                  fast-tier test over 20 s fails, tests/conftest.py)
#   make test-slow -- the slow tier alone (pytest -m slow)
#   make lint   -- ruff (configured in pyproject.toml)
PYTHON  ?= $(shell command -v python3.11 || command -v python3)
VENV    ?= .venv
PROFILE ?= quick
WORKERS ?= $(shell nproc 2>/dev/null || echo 1)
BIN      = $(VENV)/bin
STAMP    = $(VENV)/.installed

# pytest-xdist workers ("auto": one per core); PYTEST_WORKERS=0 runs in one process
PYTEST_WORKERS ?= auto
XDIST    = $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist loadfile)

.PHONY: book test test-fast test-slow lint venv bench paper-cpu gpu-profile pdf clean help

help:
	@echo "make book [PROFILE=quick|paper]   build the book; HTML in _build/html"
	@echo "make test                         the whole suite: fast tier, then slow tier (a quick book build)"
	@echo "make test-fast                    the suite without the slow tier (pytest -m 'not slow')"
	@echo "make test-slow                    the slow tier alone (pytest -m slow)"
	@echo "make lint                         ruff check lib tests benchmarks tools"
	@echo "make bench                        run the benchmarks in benchmarks/ (minutes)"
	@echo "make paper-cpu                    time the paper profile on this CPU (about an hour)"
	@echo "make gpu-profile                  the paper profile on a CUDA machine, the build's scheduling (< 10 min)"
	@echo "make pdf                          the whole book as one PDF (needs Chromium: apt-get install chromium)"

venv: $(STAMP)

$(STAMP): requirements.txt requirements-nodeps.txt constraints.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt -c constraints.txt
	$(BIN)/python -m pip install --quiet --no-deps -r requirements-nodeps.txt
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

book: $(STAMP)
	$(BIN)/python -m attnsvm_book build --profile $(PROFILE) --workers $(WORKERS)

test: test-fast test-slow

test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not slow" $(XDIST)

test-slow: $(STAMP)
	$(BIN)/python -m pytest -m slow $(XDIST)

lint: $(STAMP)
	$(BIN)/ruff check lib tests benchmarks tools

# the book with its whole-book PDF (required here; `make book` makes it when Chromium is installed)
pdf: $(STAMP)
	$(BIN)/python -m attnsvm_book build --profile $(PROFILE) --workers $(WORKERS) --pdf

bench: $(STAMP)
	$(BIN)/python benchmarks/svm_speed.py
	$(BIN)/python benchmarks/svm_threads.py
	$(BIN)/python benchmarks/train_speed.py
	$(BIN)/python benchmarks/step_speed.py
	$(BIN)/python benchmarks/build_parallel.py

paper-cpu: $(STAMP)
	$(BIN)/python benchmarks/paper_profile.py --out _build/paper_profile.md --json _build/paper_profile.json

gpu-profile: $(STAMP)
	$(BIN)/python benchmarks/gpu_profile.py --json _build/gpu_profile.json

clean:
	rm -rf _build
