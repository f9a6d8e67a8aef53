# The two commands of the README's quick start: `make report` (the main job) and `make test`.
# Both create .venv with the pinned dependencies on first use; `make test` also builds the pinned
# Kubernetes control plane (`make kube`: hack/kube/build.sh, into ~/.cache/gpufleet/kube, only
# what is missing) that the live tests run on.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[dev]'
	touch $@

.PHONY: install kube report test typecheck bench
install: $(BIN)/.installed

report: $(BIN)/.installed
	$(BIN)/gpufleet compare --out reports/default

kube:
	hack/kube/build.sh

test: $(BIN)/.installed kube
	$(BIN)/mypy
	$(BIN)/python -m pytest

typecheck: $(BIN)/.installed
	$(BIN)/mypy

bench: $(BIN)/.installed
	$(BIN)/python bench/throughput.py
