# One Makefile, the same commands here, in CI and on a laptop.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
TORCH_SPEC ?= torch==2.13.0

.PHONY: install test lint check format demo bench bench-quick snapshots screenshot tui example clean

install: $(BIN)/traceml

$(BIN)/traceml: pyproject.toml setup.py traceml/instrument/_native.c traceml/analysis/_fold.c traceml/transport/wire/_pack.c
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "$(TORCH_SPEC)"
	$(BIN)/pip install -q -e ".[dev]"
	@touch $@

# Three workers on two cores: most tests wait on real subprocesses, sockets and torchrun.
# worksteal: an idle worker takes tests queued for a busy one. With xdist's default, the last
# worker sat on a queue of slow tests (one file's) for minutes after the others had finished.
test: install
	$(BIN)/pytest -q -n 3 --dist worksteal

lint: install
	$(BIN)/ruff check traceml tui tests examples benchmarks
	$(BIN)/ruff format --check traceml tui tests examples benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports

format: install
	$(BIN)/ruff format traceml tui tests examples benchmarks
	$(BIN)/ruff check --fix traceml tui tests examples benchmarks

check: format lint test

# The live view in a terminal, progress lines and the card otherwise (traceml run decides).
demo: install
	$(BIN)/traceml run examples/input_bound.py
	@echo
	@echo "Next: fix it and compare. Run 'make demo' again with more workers (num_workers in"
	@echo "examples/input_bound.py), then 'traceml compare' the two traceml-runs/*/final_summary.json;"
	@echo "'traceml ls --all' lists your runs, 'traceml show RUN_ID' prints a card again."

example: demo

bench: install
	$(BIN)/python benchmarks/overhead.py
	$(BIN)/python benchmarks/pinned.py
	$(BIN)/python benchmarks/inloop.py
	$(BIN)/python benchmarks/threaded.py
	$(BIN)/python benchmarks/layers.py
	$(BIN)/python benchmarks/fold.py
	$(BIN)/python benchmarks/transport.py
	$(BIN)/python benchmarks/viewer.py
	$(BIN)/python benchmarks/view_cost.py
	$(BIN)/python benchmarks/view_cpu.py
	$(BIN)/python benchmarks/distributed.py
	@if command -v valgrind >/dev/null; then $(BIN)/python benchmarks/instructions.py; \
	else echo "benchmarks/instructions.py skipped: valgrind is not installed"; fi

bench-quick: install
	$(BIN)/python benchmarks/overhead.py --quick
	$(BIN)/python benchmarks/pinned.py --rounds 2 --steps 3000
	$(BIN)/python benchmarks/inloop.py --blocks 2 --steps 1000
	$(BIN)/python benchmarks/threaded.py --blocks 8 --steps 1000
	$(BIN)/python benchmarks/layers.py --pairs 1 --steps 2000
	$(BIN)/python benchmarks/fold.py --steps 50000
	$(BIN)/python benchmarks/transport.py --steps 10000 --snapshot 20000 --seconds 1
	$(BIN)/python benchmarks/viewer.py --quick
	$(BIN)/python benchmarks/view_cost.py --cycles 2 --period 2
	$(BIN)/python benchmarks/view_cpu.py --rounds 1 --period 5
	$(BIN)/python benchmarks/distributed.py --quick

snapshots: install
	$(BIN)/pytest tests/tui --snapshot-update

# docs/live-view.svg from a real run of examples/input_bound.py (no canned data).
screenshot: install
	$(BIN)/python tui/tools/screenshot.py docs/live-view.svg

tui: install
	$(BIN)/textual run --dev traceml_tui.app:TraceMLApp

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
