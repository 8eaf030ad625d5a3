# The two commands of the README: `make run` and `make test`.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
# torch 2.13.0 is pinned so pip takes the CPU build cached on this kind of
# machine instead of downloading a multi-GB CUDA build (see README).
TORCH := torch==2.13.0
STAMP := $(VENV)/.installed

# W&B's own sweep engine, for the W&B table test only (tests/spec/test_wandb_engine.py): PyPI's
# `sweeps` (pins numpy<2, pulls scipy and scikit-learn) and `wandb`, in a virtualenv of their own
# so that neither touches sweepq's dependencies. Built once; again when its pins change.
WANDB_VENV := .venv-wandb
WANDB_STAMP := $(WANDB_VENV)/.installed
WANDB_PINS := tests/wandb_engine/requirements.txt

.PHONY: run run-over test test-fast check bench docs wheel-test clean wandb-engine gpu-check

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade "pip>=23" "setuptools>=68"
	$(BIN)/pip install --quiet "$(TORCH)"
	$(BIN)/pip install --quiet -e ".[test,check]"
	touch $(STAMP)

$(WANDB_STAMP): $(WANDB_PINS)
	test -x $(WANDB_VENV)/bin/python || $(PY) -m venv $(WANDB_VENV)
	$(WANDB_VENV)/bin/pip install --quiet -r $(WANDB_PINS)
	touch $(WANDB_STAMP)

wandb-engine: $(WANDB_STAMP)

# Headless Chromium loads the HTML report in its test (tests/process/test_html_report.py): Debian's
# `chromium`, installed only where it is missing (CI machines are clean and run as root).
CHROMIUM_STAMP := $(VENV)/.chromium

$(CHROMIUM_STAMP): $(STAMP)
	command -v chromium || (export DEBIAN_FRONTEND=noninteractive; apt-get install -y -q chromium || (apt-get update -q && apt-get install -y -q chromium))
	touch $(CHROMIUM_STAMP)

# A throwaway PostgreSQL server for the tests of the queue on PostgreSQL (tests/services/postgres.py
# starts one per test process on 127.0.0.1): Debian's `postgresql`, installed only where it is missing.
POSTGRES_STAMP := $(VENV)/.postgresql
SLURM_STAMP := $(VENV)/.slurm

$(POSTGRES_STAMP): $(STAMP)
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || (export DEBIAN_FRONTEND=noninteractive; apt-get -o DPkg::Lock::Timeout=300 install -y -q postgresql || (apt-get update -q && apt-get -o DPkg::Lock::Timeout=300 install -y -q postgresql))
	touch $(POSTGRES_STAMP)

# The single-node Slurm of the `launch --on slurm` tests (tests/services/slurm.py installs it too).
$(SLURM_STAMP): $(STAMP)
	command -v slurmctld >/dev/null 2>&1 && command -v munged >/dev/null 2>&1 || (export DEBIAN_FRONTEND=noninteractive; apt-get -o DPkg::Lock::Timeout=300 install -y -q slurm-wlm munge || (apt-get update -q && apt-get -o DPkg::Lock::Timeout=300 install -y -q slurm-wlm munge))
	touch $(SLURM_STAMP)

run: $(STAMP)
	$(BIN)/sweepq launch sweeps/llm-analysis.yaml

# The bundled sweep from scratch: its root (runs/llm-analysis) is deleted, the virtualenv kept.
run-over: $(STAMP)
	rm -rf runs/llm-analysis
	$(BIN)/sweepq launch sweeps/llm-analysis.yaml

# Two test processes (pytest-xdist), each taking whole files: the process tests spend much of
# their time waiting on the sweeps they start, so two at once nearly halve the wall time.
test: $(STAMP) $(WANDB_STAMP) $(CHROMIUM_STAMP) $(POSTGRES_STAMP) $(SLURM_STAMP)
	$(BIN)/pytest -q -ra -n 2 --dist loadfile; code=$$?; if [ $$code -eq 5 ]; then echo "no tests collected"; exit 0; fi; exit $$code

# The in-process core (tests/unit) and the quick integration tests: a loop of under a minute.
test-fast: $(STAMP) $(WANDB_STAMP)
	$(BIN)/pytest -q -ra -m "not slow and not process"; code=$$?; if [ $$code -eq 5 ]; then exit 0; fi; exit $$code

# The static gate: ruff (lint) and mypy (types), settings in pyproject.toml.
check: $(STAMP)
	$(BIN)/ruff check sweepq tests bench migrations
	$(BIN)/ruff format --check sweepq tests bench migrations
	$(BIN)/mypy

# The documentation site (mkdocs.yml, docs/) into site/, with warnings as errors: a broken link or
# anchor, or a docstring the API reference cannot read, fails the build. The `docs` extra is
# installed here, once, so the environment of `make run` and `make test` stays as it was.
DOCS_STAMP := $(VENV)/.docs-installed

$(DOCS_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -e ".[test,check,docs]"
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

bench: $(STAMP) $(POSTGRES_STAMP)
	@$(BIN)/python bench/checkpoint.py $(BENCH_ARGS)
	@$(BIN)/python bench/history.py $(BENCH_ARGS)
	@$(BIN)/python bench/cli.py $(BENCH_ARGS)
	@$(BIN)/python bench/claims.py $(BENCH_ARGS)
	@$(BIN)/python bench/status_scale.py $(BENCH_ARGS)
	@$(BIN)/python bench/scale.py $(BENCH_ARGS)
	@$(BIN)/python bench/cell_start.py $(BENCH_ARGS)
	@$(BIN)/python bench/ranks.py $(BENCH_ARGS)
	@$(BIN)/python bench/postgres.py $(BENCH_ARGS)
bench-eta: $(STAMP) ; @$(BIN)/python bench/eta.py  # the sweep's ETA against its real end (minutes: a whole sweep)
gpu-check: $(STAMP) ; @$(BIN)/python bench/gpu_check.py  # the CUDA paths where a GPU exists (JSON; CPU paths elsewhere)

clean:
	rm -rf $(VENV) $(WANDB_VENV) build dist *.egg-info runs site
