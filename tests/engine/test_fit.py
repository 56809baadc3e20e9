"""``logitjudge fit`` on a tiny random-weight model: examples from labelled rows, features through
the engine and back from the cache, grouped-CV fitting, the head folder, and the same head read
in the packed pass giving what the fit's own map gives on the cached states."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from logitjudge.engine.heads import load_heads
from logitjudge.engine.types import EngineRequest
from logitjudge.errors import InvalidRequestError
from logitjudge.fit import extract, fit_head, head_examples, write_head
from logitjudge.rubrics.registry import default_registry

WORDS = ["river", "bridge", "museum", "train", "novel", "village", "team", "flight", "river", "market"]


def rows(n: int = 48) -> list[dict]:
    """Rows whose label the chunk's wording decides (a head on the tiny model can learn it)."""
    out = []
    for i in range(n):
        label = ("supports", "contradicts", "unrelated")[i % 3]
        word = WORDS[i % len(WORDS)]
        chunk = {
            "supports": f"Yes, the {word} report says it is true, item {i}.",
            "contradicts": f"No, the {word} report says it is false, never, item {i}.",
            "unrelated": f"The {word} has a blue door and {i} windows.",
        }[label]
        out.append(
            {
                "id": f"toy:{i}",
                "output": f"The {word} claim {i}.",
                "context": [chunk],
                "gold": {"per_chunk": [label]},
                "meta": {"case_id": f"c{i // 2}"},
            }
        )
    return out


def test_examples_follow_the_evaluator_question():
    defn = default_registry().get("chunk_support")
    ex = head_examples(defn, rows(6))
    assert len(ex) == 6 and ex[0].state.startswith("Passage: ")
    assert ex[0].question.head is None and ex[0].question.type == "choice"
    assert '"The river claim 0."' in str(ex[0].question.instructions)
    assert ex[0].group == ex[1].group == "case_id:c0"
    with pytest.raises(ValueError, match="gold label 'maybe'"):
        head_examples(defn, [{**rows(1)[0], "gold": {"per_chunk": ["maybe"]}}])
    with pytest.raises(ValueError, match="not read by a trained head"):
        head_examples(default_registry().get("chunk_support@3"), rows(1))
    with pytest.raises(InvalidRequestError, match=r"^row 'toy:1': context"):
        head_examples(defn, [rows(1)[0], {**rows(2)[1], "context": 7}])


def test_fit_cache_head_and_serving_agree(tiny_llama, tmp_path):
    engine = tiny_llama
    defn = default_registry().get("chunk_support")
    ex = head_examples(defn, rows())
    first = extract(engine, ex, layers=(1, 2), cache=tmp_path / "cache", batch_size=5)
    assert first.states.shape == (48, 2, engine.lm.model.config.hidden_size) and first.computed == 48
    again = extract(engine, ex, layers=(2,), cache=tmp_path / "cache")
    assert again.computed == 0 and np.array_equal(again.states[:, 0], first.states[:, 1])
    result = fit_head(defn, ex, first, engine.describe(), holdout=0.25, folds=3, c_grid=(0.1, 1.0))
    assert set(result.cv) == {f"{c} C={k}" for c in ("L1", "L2", "all") for k in (0.1, 1.0)}
    held = result.held_out
    assert held["rows"] == len(ex) - result.head.meta["trained"]["rows"]
    assert {"majority", "zero_shot", "per_source"} <= set(held)
    folder = write_head(result, tmp_path / "heads", timing={"features_s": 1.0})
    assert (folder / "CARD.md").read_text().startswith("# Head `chunk_support`")
    assert json.loads((folder / "report.json").read_text())["held_out"]["rows"] == held["rows"]
    heads = load_heads([tmp_path / "heads"])
    engine.set_heads(heads)
    try:
        head = heads["chunk_support"]
        q = ex[0].question.__class__(**{**ex[0].question.__dict__, "head": "chunk_support"})
        got = engine.run_batch([EngineRequest(ex[0].state, (q,))])[0].answers[0]
        cols = [first.layers.index(x) for x in head.layers]
        want = head.probabilities(torch.tensor(first.states[0, cols].reshape(1, -1)))[0].tolist()
        assert max(abs(a - b) for a, b in zip(got.probabilities, want)) < 1e-5
        assert got.label_probabilities is not None
    finally:
        engine.set_heads(None)


def test_a_head_on_your_own_labels_reads_a_one_question_evaluator(tiny_llama, tmp_path):
    """faithfulness with a head fitted on `gold.faithful`: the evaluator's question is read by it, no
    context-free twin is asked, and the score is the head's P(yes)."""
    from logitjudge.judge import Judge

    engine = tiny_llama
    defn = default_registry().get("faithfulness")
    data = [
        {
            "id": f"toy:{i}:{'right' if i % 2 else 'wrong'}",
            "input": f"Where is the {WORDS[i % 10]}?",
            "output": f"It is in town {i}." if i % 2 else f"It is never anywhere, no {i}.",
            "context": [f"The {WORDS[i % 10]} is in town {i}."],
            "gold": {"faithful": bool(i % 2)},
        }
        for i in range(40)
    ]
    ex = head_examples(defn, data, label_key="faithful")
    assert len(ex) == 40 and ex[0].question.type == "noul" and ex[0].label == "false"
    assert ex[0].group == "item:toy:0"
    feats = extract(engine, ex, layers=(2,), cache=None)
    result = fit_head(defn, ex, feats, engine.describe(), holdout=0.25, folds=3, c_grid=(1.0,))
    assert result.head.name == "faithfulness" and result.head.options == ("true", "false")
    engine.set_heads({"faithfulness": result.head})
    try:
        judge = Judge(engine)
        sent = []
        real = engine.run_batch
        engine.run_batch = lambda reqs, *a, **k: sent.extend(reqs) or real(reqs, *a, **k)  # type: ignore[method-assign]
        try:
            run = judge.evaluate([data[1]], ["faithfulness"])
        finally:
            del engine.run_batch
        res = run.results[0].results["faithfulness"]
        assert len(sent) == 1  # the item's request only: no twin without `context`
        q = sent[0].questions[0]
        assert q.head == "faithfulness"
        want = result.head.probabilities(torch.tensor(feats.states[1].reshape(1, -1)))[0, 0].item()
        assert res.score == pytest.approx(want, abs=1e-5)
    finally:
        engine.set_heads(None)


def test_the_report_ranks_two_option_heads_by_auroc():
    from sklearn.metrics import roc_auc_score

    from logitjudge.fit import classification_report

    rng = np.random.default_rng(0)
    gold = ["true" if k % 3 else "false" for k in range(60)]
    p_true = np.clip(np.array([0.7 if g == "true" else 0.4 for g in gold]) + rng.normal(0, 0.2, 60), 0.01, 0.99)
    rep = classification_report(gold, np.stack([p_true, 1 - p_true], 1), ["true", "false"], [str(k) for k in range(60)])
    assert rep["auroc"] == pytest.approx(roc_auc_score([g == "true" for g in gold], p_true))
    lo, hi = rep["auroc_interval"]
    assert lo < rep["auroc"] < hi
    three = classification_report(["a", "b", "c"], np.eye(3), ["a", "b", "c"], ["1", "2", "3"])
    assert "auroc" not in three  # three options: no single ranking


def entity_rows(n: int = 36) -> list[dict]:
    """context_entity_recall rows: each names one entity the context states in another form (an
    acronym, ``RGH``) and one it does not state (``Quentin Zed``); the rules leave both to the model."""
    out = []
    for i in range(n):
        word = WORDS[i % len(WORDS)].title()
        present, absent = f"{word[0]}GH", f"Quentin Zed{'abc'[i % 3]}"
        out.append(
            {
                "id": f"toy_entity:{i}",
                "expected": f"{present}; {absent}.",
                "context": [f"The {word} Grand Hotel opened in {1900 + i}.", "Another chunk."],
                "gold": {"entities": [present, absent], "present": [present], "level": 2},
                "meta": {"group": f"g{i // 3}"},
            }
        )
    return out


def test_entity_recall_head_trains_on_the_asked_entities_and_serves(tiny_llama, tmp_path):
    """context_entity_recall@3: examples are the per-entity questions the rules leave to the model,
    the features of several questions packed over one state equal one question alone, and the
    fitted head reads those questions in serving (no head: version 2 answers, with a warning)."""
    from logitjudge.judge import Judge

    engine = tiny_llama
    registry = default_registry()
    defn = registry.get("context_entity_recall")
    assert defn.version == "3" and defn.head is not None
    data = entity_rows()
    ex = head_examples(defn, data)
    assert [e.label for e in ex[:2]] == ["true", "false"] and len(ex) == 2 * len(data)
    assert ex[0].key == "toy_entity:0@0" and ex[0].group == "group:g0" and ex[0].question.head is None
    assert '"RGH"' in str(ex[0].question.instructions) and ex[0].state == ex[1].state
    feats = extract(engine, ex, layers=(1, 2), cache=tmp_path / "cache")
    assert feats.computed == len(ex)
    alone = engine.answer_states([EngineRequest(ex[1].state, (ex[1].question,))], (1, 2))[0][0][0].numpy()
    assert np.abs(alone - feats.states[1]).max() < 1e-4  # packed with its sibling = asked alone
    result = fit_head(defn, ex, feats, engine.describe(), holdout=0.25, folds=3, c_grid=(1.0,))
    assert result.head.name == "context_entity_recall" and result.head.options == ("true", "false")
    judge = Judge(engine)
    fallback = judge.evaluate([data[0]], ["context_entity_recall"]).results[0].results["context_entity_recall"]
    assert fallback.version == "2" and "logitjudge fit" in (fallback.x_warning or "")
    engine.set_heads({"context_entity_recall": result.head})
    try:
        res = judge.evaluate([data[0]], ["context_entity_recall"]).results[0].results["context_entity_recall"]
        assert res.version == "3" and res.x_warning is None
        cols = [feats.layers.index(x) for x in result.head.layers]
        for k, detail in enumerate(res.details or ()):
            want = result.head.probabilities(torch.tensor(feats.states[k, cols].reshape(1, -1)))[0, 0].item()
            assert detail.probability == pytest.approx(want, abs=1e-4)
    finally:
        engine.set_heads(None)


def test_balanced_classes_move_the_head_to_equal_priors():
    """``balance=True`` (``--balance-classes``) weighs the rare option up: on rows where "true" is
    a quarter and the features hold weak evidence, the head's mean P(true) rises from near the
    rows' share towards one half, and the head records that it was trained so."""
    from logitjudge.fit import Features

    defn = default_registry().get("context_entity_recall")
    ex = [
        e
        for e in head_examples(defn, entity_rows(120))
        if e.label == "false" or int(e.key.split(":")[1].split("@")[0]) % 3 == 0
    ]
    y = np.array([e.label == "true" for e in ex])
    assert 0.2 < y.mean() < 0.3
    rng = np.random.default_rng(0)
    states = rng.normal(size=(len(ex), 1, 8)).astype(np.float32)
    states[:, 0, 0] += 0.8 * y  # weak evidence: the classes overlap
    feats = Features(states=states, layers=(1,), label_probs=np.full((len(ex), 2), 0.5, np.float32))
    means = {}
    for balance in (False, True):
        result = fit_head(defn, ex, feats, {"model": "toy"}, holdout=0, folds=3, c_grid=(1.0,), balance=balance)
        assert result.head.meta["trained"]["balanced"] is balance
        p = result.head.probabilities(torch.tensor(states[:, 0]))[:, 0].numpy()
        means[balance] = float(p.mean())
    assert abs(means[False] - y.mean()) < 0.05 and 0.4 < means[True] < 0.6, means


@pytest.mark.parametrize(
    ("evaluator", "named"),
    [("context_entity_recall", "gold.entities and gold.present"), ("chunk_support", "gold.per_chunk")],
)
def test_fit_without_the_gold_a_head_needs_names_it(tmp_path, capsys, evaluator, named):
    """Rows without the gold fields the evaluator's head trains on are refused before any model
    loads, naming the fields that kind reads."""
    from logitjudge.cli import main

    data = [{k: v for k, v in r.items() if k != "gold"} | {"output": "A claim."} for r in entity_rows(4)]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in data), encoding="utf-8")
    assert main(["fit", str(path), "--evaluator", evaluator, "--out", str(tmp_path / "heads")]) == 2
    assert named in capsys.readouterr().err


def test_fit_refuses_adapters_before_any_model_loads(tmp_path, capsys):
    """`fit` loads no adapter (a head reads the base model's question; an adapter starts from
    --init-adapter): `--adapters` is refused, naming the flag, instead of being ignored."""
    from logitjudge.cli import main

    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in entity_rows(4)), encoding="utf-8")
    assert main(["fit", str(path), "--evaluator", "chunk_support", "--adapters", "none", "--out", str(tmp_path)]) == 2
    assert "--adapters is for evaluate and serve" in capsys.readouterr().err


def test_a_head_reads_only_the_version_it_was_trained_on(tiny_llama):
    """The per-entity head of context_entity_recall@3 (a yes/no) is not read for version 1's
    score question of the same name (it was, and answered with an error); a head whose folder
    names no evaluator is taken as trained on the version asked; a head of an evaluator's name
    trained on another version is not read: the version naming it falls back, with a warning,
    and the current version of an evaluator reading its own head answers without it, saying so."""
    import dataclasses

    from logitjudge.judge import Judge
    from logitjudge.rubrics.head_plan import own_head

    engine = tiny_llama
    registry = default_registry()
    defn = registry.get("context_entity_recall")
    data = entity_rows(24)
    ex = head_examples(defn, data)
    feats = extract(engine, ex, layers=(2,), cache=None)
    head = fit_head(defn, ex, feats, engine.describe(), holdout=0, folds=3, c_grid=(1.0,)).head
    assert head.meta["evaluator"] == "context_entity_recall@3"
    engine.set_heads({"context_entity_recall": head})
    try:
        described = engine.describe()
        assert described["head_evaluators"] == {"context_entity_recall": "context_entity_recall@3"}
        v1 = registry.get("context_entity_recall@1")
        assert not own_head(v1, described)
        res = Judge(engine).evaluate([data[0]], ["context_entity_recall@1"]).results[0].results
        assert res["context_entity_recall"].status == "ok" and res["context_entity_recall"].version == "1"
        unsaid = dataclasses.replace(head, meta={k: v for k, v in head.meta.items() if k != "evaluator"})
        engine.set_heads({"context_entity_recall": unsaid})
        assert engine.describe()["head_evaluators"] == {"context_entity_recall": None}
        assert own_head(v1, engine.describe())
        # a head of the name trained on another version's question: version 3 answers by its fallback
        other = dataclasses.replace(head, meta={**head.meta, "evaluator": "context_entity_recall@1"})
        engine.set_heads({"context_entity_recall": other})
        res = Judge(engine).evaluate([data[0]], ["context_entity_recall"]).results[0].results
        assert res["context_entity_recall"].version == "2"
        assert "none trained for it is loaded" in (res["context_entity_recall"].x_warning or "")
        # a head you trained on faithfulness@1's question is not read by the current version, which says so
        mine = dataclasses.replace(head, name="faithfulness", meta={**head.meta, "evaluator": "faithfulness@1"})
        engine.set_heads({"faithfulness": mine})
        item = {"input": "Where?", "output": "In town.", "context": ["The river is in town."]}
        res = Judge(engine).evaluate([item], ["faithfulness"]).results[0].results["faithfulness"]
        assert res.status == "ok" and "trained on faithfulness@1's question" in (res.x_warning or "")
        assert res.x_p_yes_with_context is not None  # its contrast twin was asked: no head read it
    finally:
        engine.set_heads(None)
