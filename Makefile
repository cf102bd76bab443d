# Two commands on a fresh machine, each doing its own set-up:
#   make train     a virtual environment in .venv (made once), requirements.txt, then the embedded default run
#   make test      the same environment, requirements-dev.txt, then the whole suite (what CI runs: .ci/run),
#                  one pytest worker per core (pytest-xdist -n auto; a test file stays on one worker)
#   make test-core the same, the core's tests only (tests/conftest.py CORE_TESTS): the edit-run loop
# Flags for train.py go in ARGS:  make train ARGS="--clip clip --steps 50"
# Any python3 >= 3.10 makes the environment; PYTHON=python3.12 picks another.

PYTHON ?= python3
VENV := .venv
ARGS ?= --clip kl3 --delta 0.07

train: $(VENV)/.train
	$(VENV)/bin/python train.py $(ARGS)

test: $(VENV)/.test
	$(VENV)/bin/python -m pytest -q -n auto --dist loadfile

test-core: $(VENV)/.test
	$(VENV)/bin/python -m pytest -q -m core

# A stamp per requirements file: installed again only when the file changes.
$(VENV)/.train: requirements.txt | $(VENV)/bin/python
	$(VENV)/bin/python -m pip install -q -r requirements.txt
	touch $@

$(VENV)/.test: requirements.txt requirements-dev.txt | $(VENV)/bin/python
	$(VENV)/bin/python -m pip install -q -r requirements-dev.txt
	touch $@ $(VENV)/.train

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

.PHONY: train test test-core
