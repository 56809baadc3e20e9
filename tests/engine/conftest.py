"""Engine fixtures: tiny random-weight models of real architectures, built from configs in-test.

Weights are random (no download) but drawn with a large init range, so hidden states depend
strongly on what each token can see: a wrong mask moves probabilities by ~0.9 (see the negative
control in test_parity.py), far above the 1e-4 parity tolerance.
"""

from __future__ import annotations

import pytest
import torch

from logitjudge.engine.core import Engine
from logitjudge.engine.model import LoadedModel, convert_gguf
from logitjudge.engine.packaged import locate_packaged_gguf
from logitjudge.settings import EMBEDDED_MODEL


@pytest.fixture(scope="session")
def tokenizer():
    """SmolLM2-135M-Instruct's tokenizer (the packaged GGUF, converted once into the cache)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(convert_gguf(locate_packaged_gguf(EMBEDDED_MODEL)[0])))


def _tiny(kind: str, vocab: int) -> torch.nn.Module:
    from transformers import (
        Gemma3ForCausalLM,
        Gemma3TextConfig,
        LlamaConfig,
        LlamaForCausalLM,
        MambaConfig,
        MambaForCausalLM,
    )

    torch.manual_seed(0)
    if kind == "llama":
        return LlamaForCausalLM(
            LlamaConfig(
                vocab_size=vocab,
                hidden_size=64,
                intermediate_size=128,
                num_hidden_layers=2,
                num_attention_heads=4,
                num_key_value_heads=2,
                max_position_embeddings=4096,
                initializer_range=0.5,
                tie_word_embeddings=True,
            )
        )
    if kind == "gemma3":  # sliding-window layers (window 16) mixed with full-attention layers
        return Gemma3ForCausalLM(
            Gemma3TextConfig(
                vocab_size=vocab,
                hidden_size=64,
                intermediate_size=128,
                num_hidden_layers=4,
                num_attention_heads=4,
                num_key_value_heads=2,
                head_dim=16,
                max_position_embeddings=4096,
                sliding_window=16,
                initializer_range=0.5,
                layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
            )
        )
    if kind == "mamba":  # layers ignore attention masks
        return MambaForCausalLM(
            MambaConfig(vocab_size=vocab, hidden_size=64, num_hidden_layers=2, state_size=8, initializer_range=0.5)
        )
    raise ValueError(kind)


def tiny_engine(kind: str, tokenizer, **kw) -> Engine:
    """A tiny engine, fp32 unless ``dtype`` is given (mixed precision has its own fixtures)."""
    kw.setdefault("dtype", "float32")
    model = _tiny(kind, len(tokenizer)).eval()
    lm = LoadedModel(model, tokenizer, f"tiny-{kind}", "config", torch.device("cpu"), torch.float32, kind)
    return Engine(lm, **kw)


@pytest.fixture(scope="session")
def tiny_llama(tokenizer) -> Engine:
    return tiny_engine("llama", tokenizer)


@pytest.fixture(scope="session")
def tiny_gemma3(tokenizer) -> Engine:
    return tiny_engine("gemma3", tokenizer)


@pytest.fixture(scope="session")
def tiny_mamba(tokenizer) -> Engine:
    return tiny_engine("mamba", tokenizer)


@pytest.fixture(scope="session")
def tiny_llama_mixed(tokenizer) -> Engine:
    """Mixed precision (the state in bf16, questions in fp32) on the tiny Llama."""
    return tiny_engine("llama", tokenizer, dtype="mixed")


@pytest.fixture(scope="session")
def tiny_gemma3_mixed(tokenizer) -> Engine:
    return tiny_engine("gemma3", tokenizer, dtype="mixed")


@pytest.fixture(scope="session")
def default_engine(default_judge) -> Engine:
    """The suite's model as ``Judge.load()`` serves it: ``dtype=auto`` (mixed precision on a CPU
    with native bf16, else fp32)."""
    return default_judge.engine


@pytest.fixture(scope="session")
def default_engine_fp32(default_judge) -> Engine:
    """The same loaded weights, every forward in fp32 (the only mode ``packed`` runs in on CPU)."""
    return Engine(default_judge.engine.lm, dtype="float32")


@pytest.fixture(scope="session")
def default_engine_mixed(default_judge) -> Engine:
    """The same loaded weights in mixed precision, whatever this CPU is."""
    return Engine(default_judge.engine.lm, dtype="mixed")


@pytest.fixture(scope="session")
def make_tiny(tokenizer):
    """Build a tiny engine with options: ``make_tiny("llama", max_single_token_labels=8)``."""
    return lambda kind, **kw: tiny_engine(kind, tokenizer, **kw)


@pytest.fixture(scope="session")
def make_tiny_model(tokenizer):
    """A fresh tiny random-weight ``*ForCausalLM`` (no engine): ``make_tiny_model("llama")``."""
    return lambda kind: _tiny(kind, len(tokenizer)).eval()
