"""The GPU path, tested on the CPU: FlexAttention block masks, the dense-mask length limit,
attention/dtype/placement choices and the CLI flags that expose them.

FlexAttention runs on the CPU in this torch (compiled with the C++ backend, ~20 s per model shape
on 2 cores), so its parity with separate passes is checked here on tiny Llama and Gemma 3 models;
the ``gpu``-marked test repeats it on CUDA in fp32 and bf16.
"""

from __future__ import annotations

import pytest
import torch
from test_parity import QUESTIONS, STATE, max_diff

from logitjudge.engine.attention import FLEX_BLOCK, flex_block_mask, resolve_attn
from logitjudge.engine.config import EngineConfig
from logitjudge.engine.core import Engine, tolerance_for
from logitjudge.engine.model import LoadedModel, placement
from logitjudge.engine.pack import Tree, add_request, allowed_matrix, lay_out
from logitjudge.engine.types import EngineRequest
from logitjudge.errors import ConfigurationError

LONG_STATE = " ".join(f"Line {i}: the lamp order {i} shipped on time and arrived intact." for i in range(230))


def probs(engine: Engine, plan, strategy: str) -> list[tuple[float, ...]]:
    return [a.probabilities for a in engine.run_plans([plan], strategy)[0].answers]


@pytest.fixture(scope="module")
def long_llama(tokenizer) -> Engine:
    """A tiny Llama with an 8k context, so a state above the dense-mask limit fits."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=len(tokenizer),
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=8192,
            initializer_range=0.5,
            tie_word_embeddings=True,
        )
    ).eval()
    return Engine(
        LoadedModel(model, tokenizer, "tiny-llama-8k", "config", torch.device("cpu"), torch.float32, "8k"),
        dtype="float32",
    )


# -- the dense-mask limit -----------------------------------------------------------------------


def test_long_request_never_builds_a_dense_mask(long_llama):
    engine, runner = long_llama, long_llama.runner
    plan = engine.plan(EngineRequest(LONG_STATE, QUESTIONS[:3]))
    assert plan.n_tokens > runner.dense_mask_max_tokens == EngineConfig.dense_mask_max_tokens
    built = runner.dense_masks_built
    reads = runner.run([plan], "packed")
    assert reads.paths == ["packed>prefix_rows"]
    assert runner.dense_masks_built == built  # no L x L mask for the long request
    # the fallback answers what separate passes answer
    assert max_diff(probs(engine, plan, "packed"), probs(engine, plan, "separate")) <= tolerance_for(torch.float32)


def test_long_request_after_a_prefix_cache_gets_a_thin_mask(long_llama):
    """``prefix_packed`` (what ``auto`` runs on CPU) masks only branches x (prefix + branches):
    (Lb, S + Lb) cells, within the dense budget's square, never an L x L mask."""
    engine, runner = long_llama, long_llama.runner
    plan = engine.plan(EngineRequest(LONG_STATE, QUESTIONS[:3]))
    assert runner.choose(plan) == "prefix_packed"
    runner.largest_dense_side = runner.largest_dense_cells = 0
    reads = runner.run([plan], "prefix_packed")
    assert reads.paths[0].startswith("prefix_packed:")
    branches = plan.n_tokens - len(plan.prefix)
    assert 0 < runner.largest_dense_cells <= branches * plan.n_tokens <= runner.dense_mask_max_tokens**2
    assert runner.largest_dense_cells < plan.n_tokens**2  # never an L x L mask
    assert max_diff(probs(engine, plan, "prefix_packed"), probs(engine, plan, "separate")) <= tolerance_for(
        torch.float32
    )


def test_branches_split_into_groups_when_one_thin_mask_would_be_too_big(make_tiny):
    engine = make_tiny("llama", dense_mask_max_tokens=200, state_cache_mb=0)
    plan = engine.plan(EngineRequest(STATE, QUESTIONS))
    groups = engine.runner.branch_groups(plan)
    assert groups is not None and len(groups) > 1 and sum(groups, []) == list(range(len(QUESTIONS)))
    reads = engine.runner.run([plan], "prefix_packed")
    assert reads.paths == [f"prefix_packed:densex{len(groups)}"]
    assert engine.runner.largest_dense_cells <= 200**2
    assert max_diff(probs(engine, plan, "prefix_packed"), probs(engine, plan, "separate")) <= 1e-4


def test_short_request_takes_the_dense_path(long_llama):
    """Positive control for the counter: a short request does build a dense mask."""
    runner = long_llama.runner
    built = runner.dense_masks_built
    reads = runner.run([long_llama.plan(EngineRequest(STATE, QUESTIONS))], "packed")
    assert reads.paths == ["packed:dense"]
    assert runner.dense_masks_built == built + 1


def test_short_requests_share_one_padded_batch_under_the_limit(make_tiny):
    """Dense masks: requests are rows of one padded batch, so the mask's side is the longest
    request, never the sum of the batch (a shared row would have needed a 5x larger side)."""
    engine = make_tiny("llama", dense_mask_max_tokens=600)
    plans = [engine.plan(EngineRequest(STATE, QUESTIONS[: 1 + i % 2])) for i in range(5)]
    assert 600 < sum(p.n_tokens for p in plans) and all(p.n_tokens <= 300 for p in plans)
    reads = engine.runner.run(plans, "packed")
    assert reads.paths == ["packed:dense"]  # one forward for all five
    assert engine.runner.largest_dense_side == max(p.n_tokens for p in plans)
    together = engine.run_plans(plans, "packed")
    for plan, res in zip(plans, together):
        alone = engine.run_plans([plan], "separate")[0]
        assert max_diff([a.probabilities for a in res.answers], [a.probabilities for a in alone.answers]) <= 1e-4


# -- FlexAttention ------------------------------------------------------------------------------


def _row(engine: Engine):
    tree = Tree()
    add_request(tree, engine.plan(EngineRequest(STATE, QUESTIONS)), 0)
    add_request(tree, engine.plan(EngineRequest("A short note: the lamp is fine.", QUESTIONS[2:])), 1)
    return lay_out(tree)


@pytest.mark.parametrize("window", [None, 16])
def test_flex_block_mask_equals_the_dense_mask(tiny_llama, window):
    row = _row(tiny_llama)
    L = row.input_ids.numel()
    bm = flex_block_mask(row, window, torch.device("cpu"))
    dense = allowed_matrix(row, window=window)  # (L, L) reference, small here
    q, kv = torch.arange(L)[:, None], torch.arange(L)[None, :]
    assert torch.equal(bm.mask_mod(None, None, q, kv), dense)  # element level
    nb = -(-L // FLEX_BLOCK)
    padded = torch.zeros(nb * FLEX_BLOCK, nb * FLEX_BLOCK, dtype=torch.bool)
    padded[:L, :L] = dense
    tiles = padded.view(nb, FLEX_BLOCK, nb, FLEX_BLOCK).any(3).any(1)  # (nb, nb)
    assert torch.equal(bm.to_dense()[0, 0].bool(), tiles)  # tile level: nothing skipped, nothing extra
    full = bm.full_kv_num_blocks[0, 0]
    for qb in range(nb):  # tiles marked full skip mask_mod, so they must be all allowed
        for kb in bm.full_kv_indices[0, 0, qb, : full[qb]].tolist():
            assert padded[qb * FLEX_BLOCK : (qb + 1) * FLEX_BLOCK, kb * FLEX_BLOCK : (kb + 1) * FLEX_BLOCK][
                : L - qb * FLEX_BLOCK, : L - kb * FLEX_BLOCK
            ].all()


@pytest.mark.parametrize("kind", ["llama", "gemma3"])
def test_flex_packed_equals_separate_passes(make_tiny, request, kind):
    """Packed with FlexAttention (CPU, fp32) vs separate passes of an sdpa engine on the same weights."""
    reference = request.getfixturevalue(f"tiny_{kind}")
    flex = make_tiny(kind, attn="flex_attention")
    assert flex.attn == "flex_attention" and flex.runner.flex
    plan = flex.plan(EngineRequest(STATE, QUESTIONS))
    built = flex.runner.dense_masks_built
    reads = flex.runner.run([plan], "packed")
    assert reads.paths == ["packed:flex"] and flex.runner.dense_masks_built == built
    got = probs(flex, plan, "packed")
    assert max_diff(got, probs(reference, plan, "separate")) <= 1e-4


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_flex_on_cuda_within_dtype_tolerance(make_tiny, dtype):
    cpu = make_tiny("llama").lm
    lm = LoadedModel(
        cpu.model.to("cuda", dtype),
        cpu.tokenizer,
        "tiny-llama",
        "config",
        torch.device("cuda"),
        dtype,
        "cuda",
    )
    engine = Engine(lm)  # auto: flex on CUDA
    assert engine.attn == "flex_attention"
    assert engine.self_check() <= tolerance_for(dtype)


# -- choices: attention, dtype tolerance, placement, flags ---------------------------------------


def test_attention_choice(tiny_llama, tiny_mamba):
    llama, mamba = tiny_llama.lm.model, tiny_mamba.lm.model
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert resolve_attn("auto", llama, cpu, mask_ignoring=False) == llama.config._attn_implementation
    assert resolve_attn("auto", llama, cuda, mask_ignoring=False) == "flex_attention"
    assert resolve_attn("auto", mamba, cuda, mask_ignoring=True) != "flex_attention"
    assert resolve_attn("eager", llama, cuda, mask_ignoring=False) == "eager"
    with pytest.raises(ConfigurationError, match="unknown attention 'flash'"):
        resolve_attn("flash", llama, cpu, mask_ignoring=False)
    with pytest.raises(ConfigurationError, match="does not support flex_attention"):
        resolve_attn("flex_attention", mamba, cpu, mask_ignoring=True)


def test_tolerance_is_dtype_aware():
    assert tolerance_for(torch.float32) == 1e-4
    assert tolerance_for(torch.bfloat16) > tolerance_for(torch.float32)
    assert tolerance_for(torch.float16) > tolerance_for(torch.float32)


def test_placement_uses_a_device_map_only_for_auto_on_several_gpus():
    cuda = torch.device("cuda")
    assert placement("auto", cuda, 4) == {"device_map": "auto"}
    assert placement("auto", cuda, 1) == {}
    assert placement("cuda", cuda, 4) == {}  # an explicit device keeps the model whole there
    assert placement("auto", torch.device("cpu"), 0) == {}


def test_cli_flags_reach_the_engine():
    import argparse

    from logitjudge.cli import add_model_args, load_judge

    parser = argparse.ArgumentParser()
    add_model_args(parser)
    args = parser.parse_args(
        ["--device", "cpu", "--dtype", "float32", "--attn", "eager", "--engine-row-tokens", "1024"]
    )
    engine = load_judge(args).engine
    info = engine.describe()
    assert (info["attn"], info["max_row_tokens"], info["dtype"]) == ("eager", 1024, "float32")
    assert engine.lm.model.config._attn_implementation == "eager"
