"""Trained heads read in the packed pass: exact like the label readout, no extra tokens, bound to
their model.

Random heads on tiny random-weight models (the exact maths), then the default model: a head's
answer in the packed pass equals one separate pass per question within 1e-4 (fp32), a tapped
layer is transformers' own ``hidden_states[l]``, a saved head reloads bit for bit, and a head
made for other weights is refused with the mismatch named.
"""

from __future__ import annotations

import pytest
import torch

from logitjudge.engine.core import Engine
from logitjudge.engine.heads import Head, load_heads
from logitjudge.engine.types import EngineRequest, Option, Question
from logitjudge.errors import HeadMismatchError, InvalidRequestError

TOL = 1e-4
STATE = (
    "Passage: The bridge opened in 1932 and carries six lanes of traffic; a toll of two dollars is "
    "charged northbound only. It was closed for repairs in 2019."
)
OPTIONS = ("supports", "contradicts", "unrelated")


def support_q(claim: str, head: str | None = "support") -> Question:
    opts = tuple(Option(n, f"the passage {n} the claim") for n in OPTIONS)
    return Question("choice", f"How does the passage relate to the claim {claim!r}?", opts, head=head)


def yes_q(text: str, head: str | None = "yes") -> Question:
    return Question("noul", text, (Option("true", None), Option("false", None)), head=head)


def random_head(
    engine: Engine, name: str, kind: str, options: tuple[str, ...], layers: tuple[int, ...], hidden: int = 0
) -> Head:
    """A head with random weights, scaled so its logits span a few units (answers far from uniform)."""
    gen = torch.Generator().manual_seed(hash((name, layers)) % 2**31)
    d = engine.lm.model.config.hidden_size * len(layers)
    dims = [d] + ([hidden] if hidden else []) + [len(options)]
    weights = tuple(
        (torch.randn(o, i, generator=gen) / i**0.5 * 3, torch.randn(o, generator=gen)) for i, o in zip(dims, dims[1:])
    )
    binding = {k: engine.describe()[k] for k in ("fingerprint", "prompt_version")}
    return Head(name, kind, options, layers, weights, {"model": engine.name, **binding})


def with_heads(engine: Engine, mlp: bool = False) -> Engine:
    n = engine.runner.n_layers
    engine.set_heads(
        {
            "support": random_head(engine, "support", "choice", OPTIONS, (1, n), hidden=16 if mlp else 0),
            "yes": random_head(engine, "yes", "noul", ("false", "true"), (n,)),
        }
    )
    return engine


QUESTIONS = (
    support_q("The bridge opened in 1932."),
    yes_q("Is there a toll?"),
    support_q("The bridge carries eight lanes."),
    Question("noul", "Was it closed in 2019?", (Option("true", None), Option("false", None))),  # label logits
    support_q("Tolls are charged in both directions."),
)


@pytest.mark.parametrize(
    "fixture,strategy",
    [
        ("tiny_llama", "packed"),
        ("tiny_llama", "prefix_packed"),
        ("tiny_llama", "prefix_rows"),
        ("tiny_gemma3", "packed"),
        ("tiny_gemma3", "prefix_rows"),
        ("tiny_mamba", "prefix_rows"),
    ],
)
@pytest.mark.parametrize("mlp", [False, True])
def test_head_answers_packed_equal_separate(request, fixture, strategy, mlp):
    engine = with_heads(request.getfixturevalue(fixture), mlp=mlp)
    try:
        plan = engine.plan(EngineRequest(STATE, QUESTIONS))
        ref = engine.run_plans([plan], "separate")[0]
        got = engine.run_plans([plan], strategy)[0]
        for a, b in zip(got.answers, ref.answers):
            assert max(abs(x - y) for x, y in zip(a.probabilities, b.probabilities)) < TOL
        heads = [a for a, q in zip(got.answers, QUESTIONS) if q.head]
        assert all(a.label_probabilities is not None for a in heads)
        # the head answers, not the labels: a random head disagrees with the random labels
        assert max(abs(x - y) for a in heads for x, y in zip(a.probabilities, a.label_probabilities or ())) > 0.05
        assert got.answers[3].label_probabilities is None
    finally:
        engine.set_heads(None)


def test_heads_add_no_tokens_and_leave_label_answers_alone(tiny_llama):
    request = EngineRequest(STATE, QUESTIONS)
    plain = tiny_llama.run_batch(
        [EngineRequest(STATE, tuple(Question(q.type, q.instructions, q.options) for q in QUESTIONS))]
    )[0]
    engine = with_heads(tiny_llama)
    try:
        headed = engine.run_batch([request])[0]
        assert headed.usage.input_tokens == plain.usage.input_tokens
        assert headed.answers[3].probabilities == plain.answers[3].probabilities
        # the label readout of a headed question is what the question says without its head
        for a, b in zip(headed.answers, plain.answers):
            assert max(abs(x - y) for x, y in zip(a.label_probabilities or a.probabilities, b.probabilities)) < TOL
    finally:
        engine.set_heads(None)


def test_tapped_layer_is_transformers_hidden_state(tiny_llama):
    """Layer l of a head is transformers' ``hidden_states[l]`` at the answer position."""
    engine = tiny_llama
    head = random_head(engine, "support", "choice", OPTIONS, (1,))
    engine.set_heads({"support": head})
    try:
        q = support_q("The bridge opened in 1932.")
        plan = engine.plan(EngineRequest(STATE, (q,)))
        _, _, tapped = engine.read([plan], "separate")
        ids = torch.tensor(plan.prefix + plan.questions[0].views[0].branch)[None]
        out = engine.lm.model(input_ids=ids, output_hidden_states=True)
        want = out.hidden_states[1][0, -1]
        assert tapped is not None
        assert torch.allclose(tapped[0].float(), want.float(), atol=1e-5)
        got = engine.run_plans([plan], "separate")[0].answers[0].probabilities
        expect = head.probabilities(want[None])[0].tolist()
        assert max(abs(x - y) for x, y in zip(got, expect)) < 1e-6
    finally:
        engine.set_heads(None)


def test_head_round_trips_through_its_files(tiny_llama, tmp_path):
    engine = with_heads(tiny_llama, mlp=True)
    try:
        before = engine.run_batch([EngineRequest(STATE, QUESTIONS)])[0]
        for head in engine.heads.values():
            head.save(tmp_path / head.name)
        loaded = load_heads([tmp_path])
        assert sorted(loaded) == ["support", "yes"]
        engine.set_heads(loaded)
        after = engine.run_batch([EngineRequest(STATE, QUESTIONS)])[0]
        assert [a.probabilities for a in after.answers] == [a.probabilities for a in before.answers]
        assert (tmp_path / "support" / "head.safetensors").is_file()
    finally:
        engine.set_heads(None)


def test_head_for_other_weights_is_refused(tiny_llama, tiny_gemma3):
    foreign = random_head(tiny_gemma3, "support", "choice", OPTIONS, (1,))
    with pytest.raises(HeadMismatchError) as err:
        tiny_llama.set_heads({"support": foreign})
    assert "fingerprint" in err.value.mismatch and "logitjudge fit" in str(err.value)
    assert tiny_llama.heads == {}


def test_questions_naming_a_missing_or_unfit_head_are_refused(tiny_llama):
    engine = with_heads(tiny_llama)
    try:
        with pytest.raises(InvalidRequestError, match="no head 'nope'"):
            engine.plan(EngineRequest(STATE, (yes_q("x?", head="nope"),)))
        with pytest.raises(InvalidRequestError, match="reads a choice"):
            engine.plan(EngineRequest(STATE, (yes_q("x?", head="support"),)))
        rotated = Question("choice", "x?", support_q("y").options, rotations=3, head="support")
        with pytest.raises(InvalidRequestError, match="no rotations"):
            engine.plan(EngineRequest(STATE, (rotated,)))
    finally:
        engine.set_heads(None)
    # a head gives a distribution over options: a likelihood readout (continuation) has none
    with pytest.raises(ValueError, match="a head reads a question over options .*: not 'continuation'"):
        random_head(tiny_llama, "text", "continuation", ("the text",), (1,))


@pytest.mark.parametrize("engine_name", ["default_engine_fp32", "default_engine_mixed"])
def test_default_model_head_parity(request, engine_name):
    """The default model: a head on layers 20 and 28 (final), packed strategies vs separate passes."""
    engine = request.getfixturevalue(engine_name)
    engine.set_heads({"support": random_head(engine, "support", "choice", OPTIONS, (20, engine.runner.n_layers))})
    try:
        questions = tuple(q for q in QUESTIONS if q.head != "yes")
        plan = engine.plan(EngineRequest(STATE, questions))
        ref = engine.run_plans([plan], "separate")[0]
        for strategy in ("packed", "prefix_packed", "prefix_rows"):
            if not engine.runner.allows(strategy):
                continue
            got = engine.run_plans([plan], strategy)[0]
            d = max(
                abs(x - y) for a, b in zip(got.answers, ref.answers) for x, y in zip(a.probabilities, b.probabilities)
            )
            assert d < TOL, strategy
    finally:
        engine.set_heads(None)
