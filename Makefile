# Set-up is automatic: every target creates .venv at the repo root when it is missing,
# installing torch first, then the package. Which torch build pip picks depends on its indexes:
# pip's configured indexes and wheel folders are used as they are (on this project's machines
# they hold the CPU build, 2.13.0+cpu); from the default index on Linux, a bare `torch` is the
# multi-GB CUDA build. To force the CPU build elsewhere, set TORCH_INDEX to PyTorch's own CPU
# wheel index (the `whl/cpu` folder of PyTorch's download site), e.g. `make test TORCH_INDEX=...`.
# The build that was installed is printed either way.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
TORCH_VERSION := 2.13.0
TORCH_INDEX ?=
STAMP := $(VENV)/.installed

.PHONY: venv demo test bench clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install -q torch==$(TORCH_VERSION) $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(BIN)/python -c "import torch; print('torch', torch.__version__, 'with CUDA' if torch.version.cuda else '(CPU-only build)')"
	$(BIN)/pip install -q -e ".[dev]"
	touch $(STAMP)

DEMO_TRACE := deepshare/data/traces/deepshare-simulate-trace0.json

demo: $(STAMP)
	$(BIN)/deepshare compare --trace $(DEMO_TRACE) --cluster testbed
	$(BIN)/deepshare evaluate --trace $(DEMO_TRACE) --cluster testbed --seeds 1 --out runs/demo \
		--policies las+spread,srtf+spread,las+consolidated,srtf+consolidated,srsf+packed,las+packed,srsf+uncontended,rl-base,rl-hybrid,rl-hybrid-preempt

# PYTHONFAULTHANDLER: a crash while the interpreter shuts down (seen twice on a loaded machine,
# after every test had passed) prints the threads' stacks instead of exiting 139 silently.
test: $(STAMP)
	PYTHONFAULTHANDLER=1 $(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python bench/simulator.py
	$(BIN)/python bench/contention.py
	$(BIN)/python bench/startup.py
	$(BIN)/python bench/scale.py  # 25k..1M jobs on 4,096 GPUs: minutes; bench/scale.py --quick stops at 100k
	$(BIN)/python bench/scale.py --burst 20000
	$(BIN)/python bench/scale.py --sizes 20000 --policies rl-hybrid  # the learned policy in the simulator (target 60 s)
	$(BIN)/python bench/decide_scale.py
	$(BIN)/python bench/serve_load.py
	$(BIN)/python bench/train_throughput.py
	$(BIN)/python bench/suite_scale.py  # the suite on a fake cluster of 1-3 one-CPU nodes beside the local pool

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
