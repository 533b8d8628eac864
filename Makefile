# One command sets up and runs the demo (`make demo`); one runs the tests (`make test`).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
SAMPLE_INDEX := .marag/sample-index

.PHONY: setup demo test test-fast bench lock clean

setup: $(VENV)/.installed
	# The default model (Qwen2.5-Coder-1.5B-Instruct, 1.1 GB), the smallest (SmolLM2-135M,
	# for the wiring tests) and the dense embedder's file (MiniLM int8 ONNX, 23 MB; never
	# fetched by `marag index` itself), sha256-checked, into $$MARAG_HOME or the user cache; once.
	$(BIN)/marag models pull qwen2.5-1.5b smollm2-135m minilm-int8
	# The retrievers' numba kernels, compiled once and cached (a minute on 2 cores), so the
	# first question of `make demo` or of a fresh `marag serve` does not wait for them.
	$(BIN)/python -m marag.index.warm

$(VENV)/.installed: pyproject.toml requirements/lock.txt requirements/bertopic-lock.txt
	$(PYTHON) -m venv $(VENV)
	# Exactly the versions CI tested, each file checked against its sha256 (requirements/,
	# refreshed by `make lock`); then marag itself, whose requirements the lock already holds.
	$(BIN)/pip install --quiet --require-hashes -r requirements/lock.txt
	$(BIN)/pip install --quiet --no-deps -e .
	# GINGER's optional BERTopic clusterer (tested): without its torch/CUDA requirements.
	$(BIN)/pip install --quiet --no-deps --require-hashes -r requirements/bertopic-lock.txt
	touch $@

demo: setup
	$(BIN)/marag index samples/corpus --out $(SAMPLE_INDEX) --collection-field folder --overwrite
	$(BIN)/marag ask --index $(SAMPLE_INDEX) \
		"Who is often called the first computer programmer?" \
		"Which two elements did Marie Curie discover in 1898?" \
		"Who made the first confirmed ascent of Mount Everest?" \
		"What is the name of the Linux mascot?"

test: setup
	$(BIN)/python -m pytest

test-fast: setup
	$(BIN)/python -m pytest -m "not integration"

bench: setup
	$(BIN)/python benchmarks/llm.py
	$(BIN)/python benchmarks/retrieval.py

# Re-resolve the locks after a change to pyproject.toml's requirements (tests/test_lock.py
# fails until then). Needs PyPI; uv comes with the dev install. The train lock is for Linux
# x86-64 and Python 3.11 with torch's CPU wheel (requirements/torch-cpu.txt): a plain
# `torch` requirement resolves to the CUDA build there.
# torch's CPU wheels: PyTorch's own index, or a directory holding them (this machine's /opt/wheels)
TORCH_FIND_LINKS ?= $(if $(wildcard /opt/wheels/torch-*),/opt/wheels,https://download.pytorch.org/whl/cpu/torch/)
UV_COMPILE := $(BIN)/uv pip compile --quiet --generate-hashes --python-version 3.11 --custom-compile-command 'make lock'
lock:
	$(UV_COMPILE) --universal pyproject.toml --extra dev -o requirements/lock.txt
	$(UV_COMPILE) --universal --no-deps requirements/bertopic.in -o requirements/bertopic-lock.txt
	$(UV_COMPILE) --python-platform x86_64-manylinux_2_28 pyproject.toml --extra train \
		-c requirements/lock.txt --override requirements/torch-cpu.txt \
		--find-links $(TORCH_FIND_LINKS) -o requirements/train-lock.txt

clean:
	rm -rf $(VENV) .marag
