"""The state cache: a repeated state skips its prefix forward and answers exactly as uncached.

Real forwards on tiny random-weight models (where a wrong key or a modified cache moves
probabilities by ~0.9) and on the default model; the LRU's byte bound on real caches.
"""

from __future__ import annotations

import pytest
import torch

from logitjudge.engine.state_cache import StateCache, cache_nbytes, fork_cache
from logitjudge.engine.types import EngineRequest, Option, Question

TOL = 1e-4
STATE = (
    "Ticket 4471. The customer, Dana, writes: my order of two lamps arrived yesterday; one lamp is "
    "cracked and the other works. I would like a replacement for the cracked one, not a refund."
)
QUESTIONS = (
    Question("noul", "Is a lamp damaged?", (Option("true"), Option("false"))),
    Question("choice", "What does Dana want?", tuple(Option(n) for n in ("refund", "replacement", "nothing"))),
    Question("score", "How upset is Dana?", tuple(Option(str(i), t) for i, t in enumerate(("calm", "cross", "irate")))),
)
OTHER_QUESTIONS = (
    Question("noul", "Did both lamps break?", (Option("true"), Option("false"))),
    Question("noul", "Is this Dana's first problem?", (Option("true"), Option("false"))),
)


def probs(results):
    return [a.probabilities for r in results for a in r.answers]


def max_diff(a, b):
    return max(abs(x - y) for pa, pb in zip(a, b) for x, y in zip(pa, pb))


@pytest.fixture
def llama(make_tiny):
    return make_tiny("llama", state_cache_mb=64)


@pytest.mark.parametrize("strategy", ["auto", "prefix_packed", "prefix_rows"])
def test_a_hit_answers_what_an_uncached_run_answers(llama, make_tiny, strategy):
    uncached = make_tiny("llama", state_cache_mb=0)
    first, second = (llama.plan(EngineRequest(STATE, q)) for q in (QUESTIONS, OTHER_QUESTIONS))
    reference = [probs(uncached.run_plans([p], "separate")) for p in (first, second)]
    miss = llama.run_plans([first], strategy)
    stats = llama.state_cache.stats()
    assert (stats.hits, stats.misses, stats.entries) == (0, 1, 1)
    hit = llama.run_plans([second], strategy)  # the same state, other questions
    again = llama.run_plans([first], strategy)
    stats = llama.state_cache.stats()
    assert (stats.hits, stats.entries) == (2, 1)
    assert stats.hit_tokens == 2 * len(first.prefix)
    assert max_diff(probs(miss), reference[0]) <= TOL
    assert max_diff(probs(hit), reference[1]) <= TOL
    assert max_diff(probs(again), probs(miss)) <= 1e-6  # the stored cache was not extended


def test_a_hit_skips_the_prefix_forward(llama):
    plan = llama.plan(EngineRequest(STATE, QUESTIONS))
    cold = llama.runner.run([plan], "prefix_packed")
    warm = llama.runner.run([plan], "prefix_packed")
    assert cold.paths == ["prefix_packed:dense"] and warm.paths == ["prefix_packed:cached"]
    assert cold.tokens_run - warm.tokens_run == len(plan.prefix)


def test_auto_takes_the_cached_path_where_packed_would_be_chosen(make_tiny):
    """Sliding-window models run ``packed`` cold; a hit goes through ``prefix_rows`` (exact)."""
    gemma = make_tiny("gemma3", state_cache_mb=64)
    plan = gemma.plan(EngineRequest(STATE, QUESTIONS))
    assert gemma.runner.choose(plan) == "packed"
    gemma.runner.run([plan], "prefix_rows")  # stores the state
    assert gemma.runner.choose(plan) == "prefix_rows"
    got = probs(gemma.run_plans([plan], "auto"))
    assert max_diff(got, probs(gemma.run_plans([plan], "separate"))) <= TOL


def test_another_state_misses(llama):
    a = llama.plan(EngineRequest(STATE, QUESTIONS))
    b = llama.plan(EngineRequest(STATE.replace("Dana", "Dina"), QUESTIONS))
    llama.run_plans([a], "prefix_packed")
    got = llama.run_plans([b], "prefix_packed")
    assert llama.state_cache.stats().hits == 0
    assert max_diff(probs(got), probs(llama.run_plans([b], "separate"))) <= TOL


def test_the_key_holds_fingerprint_dtype_and_prompt_version(llama):
    fingerprint, precision, version = llama.state_cache.namespace
    assert fingerprint == llama.lm.fingerprint and precision == "float32" and version.startswith("lj-prompt-")
    dtype = precision
    other = StateCache(1 << 20, ("another-model", dtype, version))
    prefix = tuple(llama.plan(EngineRequest(STATE, QUESTIONS)).prefix)
    other.put(prefix, torch.zeros(4))
    assert StateCache(1 << 20, (fingerprint, dtype, version)).get(prefix) is None
    assert other.get(prefix) is not None


def test_the_lru_stays_within_its_bytes_on_real_caches(make_tiny):
    engine = make_tiny("llama", state_cache_mb=0)
    states = [STATE + f" Reference {i}." * (1 + i) for i in range(4)]
    plans = [engine.plan(EngineRequest(s, QUESTIONS[:1])) for s in states]
    caches = [engine.runner._prefix_cache(p)[0] for p in plans]
    sizes = [cache_nbytes(c) for c in caches]
    assert sizes[0] > 0 and sizes == sorted(sizes)
    lru = StateCache(sizes[1] + sizes[2], ("m", "float32", "v"))
    for p, c in zip(plans[:3], caches[:3]):
        lru.put(p.prefix, c)
    stats = lru.stats()
    assert stats.bytes <= stats.max_bytes and stats.evictions == 1
    assert lru.get(plans[0].prefix) is None and lru.get(plans[2].prefix) is not None
    lru.get(plans[1].prefix)  # now the most recent: plans[2] goes first
    assert lru.put(plans[0].prefix, caches[0])
    assert lru.contains(plans[1].prefix) and lru.contains(plans[0].prefix) and not lru.contains(plans[2].prefix)
    assert lru.stats().bytes == sizes[0] + sizes[1] <= lru.max_bytes
    tiny = StateCache(sizes[0] - 1, ("m", "float32", "v"))
    assert tiny.put(plans[0].prefix, caches[0]) is False and tiny.stats().too_large == 1


def test_a_fork_shares_tensors_and_leaves_the_original_unchanged(llama):
    plan = llama.plan(EngineRequest(STATE, QUESTIONS))
    cache, _ = llama.runner._prefix_cache(plan)
    before = cache.get_seq_length()
    keys = [layer.keys.clone() for layer in cache.layers]
    fork = fork_cache(cache)
    assert all(a.keys is b.keys for a, b in zip(cache.layers, fork.layers))  # no copy made
    llama.run_plans([plan], "separate")
    ids = torch.tensor([[5, 6, 7]])
    llama.runner._decode(ids, torch.arange(before, before + 3)[None], cache=fork, use_cache=True)
    assert fork.get_seq_length() == before + 3 and cache.get_seq_length() == before
    assert all(torch.equal(k, layer.keys) for k, layer in zip(keys, cache.layers))


def test_disabled_cache_stores_nothing(make_tiny):
    engine = make_tiny("llama", state_cache_mb=0)
    plan = engine.plan(EngineRequest(STATE, QUESTIONS))
    engine.run_plans([plan], "prefix_packed")
    engine.run_plans([plan], "prefix_packed")
    assert engine.runner.state_cache is None and engine.state_cache.stats().entries == 0
    assert engine.describe()["state_cache_mb"] == 0


def test_counters_report_paths_and_cache(llama):
    plan = llama.plan(EngineRequest(STATE, QUESTIONS))
    llama.run_plans([plan])
    llama.run_plans([plan])
    c = llama.counters()
    assert c["paths"] == {"prefix_packed:dense": 1, "prefix_packed:cached": 1}
    assert c["state_cache"]["hits"] == 1 and c["state_cache"]["bytes"] > 0


def test_default_model_hit_is_exact(default_engine):
    """The default model: 16 questions over a state, then 16 others over the same state."""
    qs = [Question("noul", f"Does the text mention item {i}?", (Option("true"), Option("false"))) for i in range(32)]
    state = STATE * 6
    default_engine.state_cache.clear()
    plans = [default_engine.plan(EngineRequest(state, tuple(qs[k : k + 16]))) for k in (0, 16)]
    hits = default_engine.state_cache.stats().hits
    got = [probs(default_engine.run_plans([p], "prefix_packed")) for p in plans]
    assert default_engine.state_cache.stats().hits == hits + 1
    for p, g in zip(plans, got):
        assert max_diff(g, probs(default_engine.run_plans([p], "separate"))) <= TOL
    default_engine.state_cache.clear()


def test_a_single_question_runs_in_one_forward_and_still_fills_the_state_cache(llama, make_tiny):
    """One question in one row: ``auto`` runs one causal forward (``separate``) and keeps the
    state's KV cropped from it, so the next request on the state skips the prefix."""
    single = llama.plan(EngineRequest(STATE, QUESTIONS[:1]))
    assert len(single.questions) == 1 and len(single.questions[0].views) == 1
    assert llama.runner.choose(single) == "separate"
    cold = llama.runner.run([single], "auto")
    assert cold.paths == ["separate"] and cold.tokens_run == len(single.prefix) + len(
        single.questions[0].views[0].branch
    )
    stats = llama.state_cache.stats()
    assert (stats.misses, stats.entries) == (0, 1)  # stored without a prefix-only forward
    other = llama.plan(EngineRequest(STATE, OTHER_QUESTIONS))
    warm = llama.run_plans([other], "auto")
    assert llama.state_cache.stats().hits == 1
    uncached = make_tiny("llama", state_cache_mb=0)
    assert max_diff(probs(warm), probs(uncached.run_plans([other], "separate"))) <= TOL
    assert max_diff(probs(llama.run_plans([single], "auto")), probs(uncached.run_plans([single], "separate"))) <= TOL
