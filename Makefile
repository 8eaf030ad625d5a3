# The two commands of the README: `make run` and `make test`.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
# torch 2.13.0 is pinned so pip takes the CPU build cached on this kind of
# machine instead of downloading a multi-GB CUDA build (see README).
TORCH := torch==2.13.0
STAMP := $(VENV)/.installed

.PHONY: run test test-fast check bench wheel-test clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade "pip>=23" "setuptools>=68"
	$(BIN)/pip install --quiet "$(TORCH)"
	$(BIN)/pip install --quiet -e ".[test,check]"
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/sweepq launch sweeps/llm-analysis.yaml

# Two test processes (pytest-xdist), each taking whole files: the process tests spend much of
# their time waiting on the sweeps they start, so two at once nearly halve the wall time.
test: $(STAMP)
	$(BIN)/pytest -q -ra -n 2 --dist loadfile; code=$$?; if [ $$code -eq 5 ]; then echo "no tests collected"; exit 0; fi; exit $$code

# The in-process core (tests/unit) and the quick integration tests: a loop of under a minute.
test-fast: $(STAMP)
	$(BIN)/pytest -q -ra -m "not slow and not process"; code=$$?; if [ $$code -eq 5 ]; then exit 0; fi; exit $$code

# The static gate: ruff (lint) and mypy (types), settings in pyproject.toml.
check: $(STAMP)
	$(BIN)/ruff check sweepq tests bench migrations
	$(BIN)/ruff format --check sweepq tests bench migrations
	$(BIN)/mypy

bench: $(STAMP)
	@$(BIN)/python bench/checkpoint.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build dist *.egg-info runs
