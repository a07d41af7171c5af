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

.PHONY: test-all coverage venv demo test bench suites results docs clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install -q torch==$(TORCH_VERSION) $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(BIN)/pip install -q -e ".[dev]"
	$(BIN)/python -c "import torch; print('torch', torch.__version__, 'with CUDA' if torch.version.cuda else '(CPU-only build)')"
	touch $(STAMP)

DEMO_TRACE := deepshare/data/traces/deepshare-simulate-trace0.json

demo: $(STAMP)
	$(BIN)/deepshare compare --trace $(DEMO_TRACE) --cluster testbed
	$(BIN)/deepshare evaluate --trace $(DEMO_TRACE) --cluster testbed --seeds 1 --out runs/demo \
		--policies las+spread,srtf+spread,las+consolidated,srtf+consolidated,srsf+packed,las+packed,srsf+uncontended,rl-base,rl-hybrid,rl-hybrid-preempt

# The suite runs on pytest-xdist workers, one more than the cores (at most TEST_WORKERS_MAX): much of
# it waits on Ray, Serve and scheduler subprocesses, and the extra worker keeps the cores busy then
# (bench/suite_cpu.py measures it). A test module at a time (--dist loadfile), so what a module
# builds once (a service, a Ray cluster) is built once. TEST_WORKERS=0 runs it in one process. PYTHONDONTWRITEBYTECODE is cleared for the run so that
# the package and the tests are compiled once, not in every worker and subprocess.
# PYTHONFAULTHANDLER: a crash while the interpreter shuts down (seen twice on a loaded machine,
# after every test had passed) prints the threads' stacks instead of exiting 139 silently.
TEST_WORKERS ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 1) + 1 )))
TEST_WORKERS_MAX ?= 4
# Tests marked `timing` assert how fast a service answers while it is attacked; beside the other
# workers (more workers than cores) they would measure the load, not the service. They run after
# the parallel run, alone.
PYTEST_BASE := PYTHONFAULTHANDLER=1 PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -q
PYTEST_ALONE := $(PYTEST_BASE) -p no:xdist
PYTEST := $(PYTEST_BASE) \
	$(if $(filter 0,$(TEST_WORKERS)),-p no:xdist,-n $(TEST_WORKERS) --maxprocesses $(TEST_WORKERS_MAX) --dist loadfile)

test: $(STAMP)
	$(PYTEST) -m "not full_matrix and not timing"
	$(PYTEST_ALONE) -m "timing and not full_matrix"

# The test suite with the full cross products (every policy on every bundled trace...) that
# `make test` covers row by row and column by column.
test-all: $(STAMP)
	$(PYTEST) -m "not timing"
	$(PYTEST_ALONE) -m timing

# Line coverage of the package by the default suite (pytest-cov; subprocesses and Ray workers
# are not traced), as a table and runs/coverage.json.
coverage: $(STAMP)
	$(PYTEST) --cov=deepshare --cov-report=term:skip-covered --cov-report=json:runs/coverage.json

# Each benchmark prints its figures and writes the headline ones to runs/bench/NAME.json,
# which `make results` renders (with the date, commit and machine of the run).
BENCH_JSON := runs/bench

bench: $(STAMP)
	$(BIN)/python bench/simulator.py --json $(BENCH_JSON)/simulator.json
	$(BIN)/python bench/contention.py --json $(BENCH_JSON)/contention.json
	$(BIN)/python bench/startup.py --json $(BENCH_JSON)/startup.json
	$(BIN)/python bench/scale.py --json $(BENCH_JSON)/scale.json  # 25k..1M jobs on 4,096 GPUs: minutes; bench/scale.py --quick stops at 100k
	$(BIN)/python bench/scale.py --burst 20000 --json $(BENCH_JSON)/scale-burst.json
	$(BIN)/python bench/scale.py --sizes 20000 --policies rl-hybrid --target-s 60 --json $(BENCH_JSON)/scale-rl-hybrid.json  # the learned policy in the simulator (target 60 s)
	$(BIN)/python bench/decide_scale.py --fabric --repeats 3 --policies srsf+packed rl-base rl-hybrid rl-hybrid-preempt las+consolidated las+topo-bestfit las+topo-aware --json $(BENCH_JSON)/decide_scale.json  # learned over srsf+packed, flat and fabric (target <= 5x)
	$(BIN)/python bench/anchor_streak.py --workers 2 --json $(BENCH_JSON)/anchor_streak.json  # what the shipped anchor streak changes on four suites (~15 min)
	$(BIN)/python bench/decide_scale.py --pending 10000 --queues 100 --repeats 3 --policies srsf+packed rl-hybrid --json $(BENCH_JSON)/decide_scale-queues.json  # behind 100 queues' admission (target <= 1.5x)
	$(BIN)/python bench/scale.py --cluster h100-leafspine-2to1 --sizes 100000 --policies las+topo-bestfit,las+topo-aware --json $(BENCH_JSON)/scale-fabric-leafspine.json  # fabric over its flat twin (target <= 2x)
	$(BIN)/python bench/scale.py --cluster clos3-256 --sizes 100000 --policies las+topo-bestfit,las+topo-aware --json $(BENCH_JSON)/scale-fabric-clos.json
	$(BIN)/python bench/learned_contention.py --workers 2 --json $(BENCH_JSON)/learned_contention.json  # the learned contention model's error against the prior's (~6 min)
	$(BIN)/python bench/crux_anchor.py --json $(BENCH_JSON)/crux_anchor.json  # the share of jobs contention slows on clos3-256, beside Crux's
	$(BIN)/python bench/serve_load.py --json $(BENCH_JSON)/serve_load.json
	$(BIN)/python bench/journal_scale.py --json $(BENCH_JSON)/journal_scale.json  # a journal of 300,000 ended jobs, with and without its indexes
	$(BIN)/python bench/estimate_robustness.py --json $(BENCH_JSON)/estimate_robustness.json  # ~10 min
	$(BIN)/python bench/train_throughput.py --json $(BENCH_JSON)/train_throughput.json
	$(BIN)/python bench/suite_scale.py  # the suite on a fake cluster of 1-3 one-CPU nodes beside the local pool

# The benchmark suites the results page reports (quick ~3.5 min, loaded ~15 min on 2 idle cores; standard an hour or more).
SUITE_JSON := runs/suite

suites: $(STAMP)
	mkdir -p $(SUITE_JSON)
	$(BIN)/deepshare evaluate --suite quick --workers 2 --json $(SUITE_JSON)/quick.json
	$(BIN)/deepshare evaluate --suite loaded --workers 2 --json $(SUITE_JSON)/loaded.json
	$(BIN)/deepshare evaluate --suite standard --workers 2 --json $(SUITE_JSON)/standard.json
	$(BIN)/deepshare evaluate --suite fabric --workers 2 --json $(SUITE_JSON)/fabric.json
	$(BIN)/deepshare evaluate --suite tenants --workers 2 --json $(SUITE_JSON)/tenants.json
	$(BIN)/deepshare evaluate --suite tenants-learned --workers 2 --json $(SUITE_JSON)/tenants-learned.json
	$(BIN)/deepshare evaluate --suite learned --workers 2 --json $(SUITE_JSON)/learned.json  # contention learned online against known (~13 min)
	$(BIN)/deepshare evaluate --suite learned-long --workers 2 --json $(SUITE_JSON)/learned-long.json  # the same, median job 4 h (~6 min)

# docs/results.md and the README's headline table, from the JSON files above (whichever exist);
# the files it used are kept in docs/results/ so the page can be regenerated and checked.
results: $(STAMP)
	$(BIN)/python -m deepshare.experiments.results_page --suites $(SUITE_JSON) --bench $(BENCH_JSON)

docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

clean:
	rm -rf $(VENV) build site *.egg-info .pytest_cache .hypothesis
