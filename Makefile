# One command sets up and runs the demo (`make demo`); one runs the tests (`make test`).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
SAMPLE_INDEX := .marag/sample-index

.PHONY: setup demo test test-fast bench clean

setup: $(VENV)/.installed
	# The default model (Qwen2.5-Coder-1.5B-Instruct, 1.1 GB), the smallest (SmolLM2-135M,
	# for the wiring tests) and the dense embedder's file (MiniLM int8 ONNX, 23 MB; never
	# fetched by `marag index` itself), sha256-checked, into $$MARAG_HOME or the user cache; once.
	$(BIN)/marag models pull qwen2.5-1.5b smollm2-135m minilm-int8

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet -e '.[dev]'
	# GINGER's optional BERTopic clusterer (tested): without its torch/CUDA requirements.
	$(BIN)/pip install --quiet --no-deps bertopic
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

clean:
	rm -rf $(VENV) .marag
