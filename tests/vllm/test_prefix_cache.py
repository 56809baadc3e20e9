"""Prefix reuse is real: vLLM's own counters show the state's KV blocks computed once per request.

Read from vLLM's Prometheus counters in this process (``VllmBackend.counters``:
``vllm:prompt_tokens`` and ``vllm:prompt_tokens_cached``), not from timings. vLLM caches whole
blocks only (``block_size`` 32 here), so per question at least the state's full blocks, and at
most the state rounded down to a block, come from the cache.
"""

from __future__ import annotations

import uuid

N_QUESTIONS = 8


def _request(state: str) -> dict:
    return {
        "model": "jev-latest",
        "state": state,
        "questions": {
            f"q{i}": {"type": "noul", "instructions": f"Is claim {i} supported?"} for i in range(N_QUESTIONS)
        },
    }


def test_the_state_is_computed_once_for_all_the_questions_of_a_request(vllm_judge) -> None:
    engine = vllm_judge.engine
    # a state no earlier test sent, so its blocks start cold
    state = f"Report {uuid.uuid4().hex}. " + "The pump failed twice during the night shift and was restarted. " * 40
    prefix = len(engine.prompt.prefix_ids(state))
    block = engine.describe()["vllm"]["block_size"]
    full_blocks = prefix // block * block
    assert full_blocks >= 512  # a state long enough that reuse is worth measuring

    before = engine.backend.counters()
    vllm_judge.ask(_request(state))
    after = engine.backend.counters()
    cached = after["prompt_tokens_cached"] - before["prompt_tokens_cached"]
    prompt = after["prompt_tokens"] - before["prompt_tokens"]
    # every question but the first reads the state's full blocks from the cache
    assert cached >= (N_QUESTIONS - 1) * full_blocks, (cached, prompt, full_blocks)
    assert prompt >= N_QUESTIONS * prefix  # vLLM counts each sequence's whole prompt

    # and across requests: the same state again is cached for every question
    before = engine.backend.counters()
    vllm_judge.ask(_request(state))
    after = engine.backend.counters()
    assert after["prompt_tokens_cached"] - before["prompt_tokens_cached"] >= N_QUESTIONS * full_blocks
