"""Located verdicts: faithfulness's ``x_located`` names, per claim, the chunk that decides it, read
from chunk_support@4's per-chunk, per-claim answers on the same item.

The rule on hand-made answers (a contradiction decides over a support; no decisive chunk is "not
found"), then on the embedded 135M with an adapter bound to ``chunk_support@4`` (PEFT-made, random
weights: the machinery, not the model's judgement, is under test): the located chunk's
probabilities are the ones chunk_support reports for that chunk, faithfulness's score does not
move, and without chunk_support, or with its head-less fallback (version 3), there are none.
"""

from __future__ import annotations

import copy

import pytest
import torch
from support.adapters import peft_folder

from logitjudge.engine.core import Engine
from logitjudge.engine.model import LoadedModel
from logitjudge.judge import Judge
from logitjudge.rubrics.results import located_claims

peft = pytest.importorskip("peft")

S, C, U = "supports", "contradicts", "unrelated"


def _p(s: float, c: float) -> dict[str, float]:
    return {S: s, C: c, U: round(1 - s - c, 6)}


def test_located_claims_rule():
    cells = {
        (0, 0): _p(0.2, 0.1),
        (1, 0): _p(0.7, 0.1),  # claim 0: chunk 1 supports
        (0, 1): _p(0.45, 0.5),  # claim 1: chunk 0 contradicts, chunk 1 supports: the contradiction decides
        (1, 1): _p(0.9, 0.05),
        (0, 2): _p(0.3, 0.2),  # claim 2: no chunk decides; the one closest to supporting is named
        (1, 2): _p(0.35, 0.1),
    }
    got = located_claims(["a", "b", "c", "d"], cells)
    assert [(d.index, d.x_chunk, d.passed) for d in got] == [(0, 1, True), (1, 0, False), (2, 1, False)]
    assert [d.label for d in got] == ["supported (chunk 1)", "contradicted (chunk 0)", "not found in any chunk"]
    assert [d.score for d in got] == [0.7, 0.9, 0.35]  # the best P(supports) over the chunks
    assert got[1].probabilities == cells[(0, 1)] and got[2].x_claim == "c"
    # a chunk that supports decides even when another has a larger P(supports) but is not decisive
    mixed = located_claims(["e"], {(0, 0): {S: 0.45, C: 0.0, U: 0.55}, (1, 0): {S: 0.4, C: 0.3, U: 0.3}})[0]
    assert (mixed.label, mixed.x_chunk, mixed.score) == ("supported (chunk 1)", 1, 0.45)
    # a supported claim under the threshold does not pass
    assert not located_claims(["a"], {(0, 0): _p(0.5, 0.1)}, threshold=0.6)[0].passed


ITEM = {
    "id": "bridge",
    "input": "When was the bridge opened?",
    "output": "The bridge opened in 1932.",
    "context": ["The Harbour Bridge was opened in March 1932.", "It carries rail, vehicle and foot traffic."],
}


@pytest.fixture(scope="module")
def judge(default_judge, tmp_path_factory) -> Judge:
    """The 135M with a random-weight adapter bound to chunk_support@4 (no head: without the
    adapter, version 3 would answer)."""
    lm0 = default_judge.engine.lm
    base = copy.deepcopy(lm0.model).float().eval()
    folder = peft_folder(
        base, tmp_path_factory.mktemp("adapter") / "stance", name="stance", evaluator="chunk_support@4", seed=5
    )
    lm = LoadedModel(base, lm0.tokenizer, lm0.name, lm0.source, lm0.device, torch.float32, lm0.fingerprint)
    out = Judge(Engine(lm, dtype="float32"), default_rotations=1)
    out.engine.load_adapters([folder])
    return out


def test_faithfulness_names_the_chunk_chunk_support_found(judge):
    both = judge.evaluate([ITEM], ["faithfulness", "chunk_support"]).results[0].results
    alone = judge.evaluate([ITEM], ["faithfulness"]).results[0].results["faithfulness"]
    faith, support = both["faithfulness"], both["chunk_support"]
    assert support.version == "4" and support.status == "ok"  # the adapter answers version 4 (no fallback)
    assert faith.x_located_by == "chunk_support@4" and alone.x_located_by is None and alone.x_located is None
    assert faith.details == alone.details  # the evaluator's own details do not change
    (claim,) = faith.x_located or []
    assert claim.x_claim == "The bridge opened in 1932." and claim.index == 0
    # one claim: chunk_support's per-chunk details are that claim's cells
    cells = {d.index: d.probabilities for d in support.details or []}
    assert claim.probabilities == pytest.approx(cells[claim.x_chunk], abs=1e-9)
    contradicting = [i for i, p in cells.items() if max(p, key=p.get) == C]
    backing = [i for i, p in cells.items() if max(p, key=p.get) == S]
    if contradicting:
        assert claim.x_chunk == max(contradicting, key=lambda i: cells[i][C])
    elif backing:
        assert claim.x_chunk == max(backing, key=lambda i: cells[i][S])
    else:
        assert claim.x_chunk == max(cells, key=lambda i: cells[i][S]) and claim.label == "not found in any chunk"
    assert claim.score == pytest.approx(max(p[S] for p in cells.values()), abs=1e-9)
    assert faith.score == pytest.approx(alone.score, abs=1e-6)  # the score does not move


def test_no_located_verdicts_from_the_headless_fallback(default_judge):
    res = default_judge.evaluate([ITEM], ["faithfulness", "chunk_support"]).results[0].results
    assert res["chunk_support"].version == "3"  # no head, no adapter for the 135M
    assert res["faithfulness"].x_located_by is None and res["faithfulness"].x_located is None


def test_locate_names_another_chunk_head_evaluator():
    from logitjudge.rubrics.definitions import Catalogue
    from logitjudge.rubrics.registry import default_registry

    base = default_registry().catalogue
    faith = base.evaluators[[e.name for e in base.evaluators].index("faithfulness")]
    support = next(e for e in base.evaluators if e.name == "chunk_support")
    # a catalogue without chunk_support loads (its faithfulness results carry no located verdicts)
    Catalogue(format=base.format, evaluators=(faith,))
    with pytest.raises(ValueError, match="locate must name another evaluator"):
        Catalogue(format=base.format, evaluators=(support.model_copy(update={"locate": "chunk_support"}),))
