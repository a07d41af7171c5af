# Set-up is automatic: every target creates .venv at the repo root when it is missing,
# installing the CPU build of torch first (a bare `torch` would pull a multi-GB CUDA build).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
TORCH_VERSION := 2.13.0
STAMP := $(VENV)/.installed

.PHONY: venv demo test bench clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install -q torch==$(TORCH_VERSION)
	$(BIN)/pip install -q -e ".[dev]"
	touch $(STAMP)

DEMO_TRACE := deepshare/data/traces/deepshare-simulate-trace0.json

demo: $(STAMP)
	$(BIN)/deepshare compare --trace $(DEMO_TRACE) --cluster testbed
	$(BIN)/deepshare evaluate --trace $(DEMO_TRACE) --cluster testbed --seeds 1 --out runs/demo \
		--policies las+spread,srtf+spread,las+consolidated,srtf+consolidated,las+contention-aware,rl-base,rl-hybrid

test: $(STAMP)
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python bench/simulator.py
	$(BIN)/python bench/contention.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
