# The two commands of the README's quick start: `make report` (the main job) and `make test`.
# Both create .venv with the pinned dependencies on first use; `make test` also builds the pinned
# Kubernetes control plane (`make kube`: hack/kube/build.sh, into ~/.cache/gpufleet/kube, only
# what is missing) that the live tests run on, and installs Debian's chromium for the browser
# tests when it is missing (`make browser`: hack/chromium.sh).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[dev]'
	touch $@

.PHONY: install kube browser report test typecheck bench mutate
install: $(BIN)/.installed

report: $(BIN)/.installed
	$(BIN)/gpufleet compare --out reports/default

kube:
	hack/kube/build.sh

# Debian's chromium for the dashboard's browser tests (only when missing).
browser:
	hack/chromium.sh

test: $(BIN)/.installed kube browser
	$(BIN)/mypy
	$(BIN)/python -m pytest

typecheck: $(BIN)/.installed
	$(BIN)/mypy

bench: $(BIN)/.installed
	$(BIN)/python bench/throughput.py

# Mutation testing (docs/testing.md): slow, so neither `make test` nor CI runs it. MUTATE narrows a
# run to files (src/gpufleet/core/fairshare.py), folders (src/gpufleet/core/) or mutant-name globs
# (gpufleet.core.fairshare.x_fair_shares*); named mutants are always run again, a plain
# `make mutate` resumes and keeps what mutants/ already knows. MUTATE_JOBS workers (default 1:
# the shared 2-core machine).
MUTATE ?=
MUTATE_JOBS ?= 1
MUTANT_GLOBS = $(foreach m,$(MUTATE),$(if $(filter src/%,$(m)),$(subst /,.,$(patsubst src/%,%,$(patsubst %.py,%,$(patsubst %/,%,$(m))))).*,$(m)))

mutate: $(BIN)/.installed
	rm -rf mutants/tests  # mutmut copies tests/ over this copy each run, and a deleted test would stay
	$(BIN)/mutmut run --max-children $(MUTATE_JOBS) $(foreach g,$(MUTANT_GLOBS),'$(g)')
	$(BIN)/python hack/mutation_report.py --out reports/mutation.md $(foreach g,$(MUTANT_GLOBS),'$(g)')
