"""Quality: agreement with real labels and calibration, on every labelled dev set.

    python benchmarks/quality/quality.py [--model PATH] [--dtype auto|mixed|float32|bfloat16|float16] [--device auto]
                                 [--limit N] [--seed 0] [--resamples 1000] [--rotations 1]
                                 [--calibration calib.json] [--sets vitaminc,qags] [--tag NAME]
    python benchmarks/quality/quality.py --rebuild benchmarks/results/quality-<model>.json   # tables again, no model

Each ``dev.jsonl`` in ``shared/data`` (read-only; see its SOURCE.md) runs through
:func:`logitjudge.rubrics.api.evaluate` with ``evaluators="auto"`` (each row's own evaluator;
typed-question rows run ``typed_question``).

**Sample.** ``--limit N`` takes N rows per set with
:func:`logitjudge.rubrics.samples.stratified_sample`: a seeded shuffle (``--seed``) stratified by
(question type, gold value, source), proportional allocation by largest remainder, so the
sample's shares of each type, gold value and source (QAGS cnndm/xsum, sys1bench tickets/phishing,
jevbench domains, EVOUNA systems) are the file's within about one row. WikiEval pairs are taken
whole. Without ``--limit``: every row.

**Figures.** One metric per column, defined in each table's header; four tables by kind of label:

- *binary labels* (faithfulness, answer_correctness, context_recall, typed yes/no): AUROC of
  P(pass) (the result's 0..1 score; typed yes/no: P(yes)) against gold; the length baseline:
  AUROC of the judged text's length as a score, in its better direction (named: ``shorter`` or
  ``longer`` passes); the model's AUROC minus the baseline's on the same resamples; accuracy at
  the evaluator's threshold (typed yes/no: 0.5); Brier and ECE (10 bins) of P(pass);
- *three-way chunk support* (VitaminC): chunk label accuracy, macro-F1, the majority-label
  baseline, and NLL / multi-class Brier / top-label ECE of the 3-way distribution;
- *choice and score* (typed questions): exact accuracy (argmax = gold), chance (mean 1/k),
  NLL of the gold option, multi-class Brier, top-label ECE, and (scores) the mean absolute error
  of the expected level;
- *pairs* (WikiEval, RAGAS protocol): pairwise accuracy (the preferred item scores higher; ties
  1/2), the pairwise length baseline in its better direction, the difference, published figures.

Every figure carries its n and a 95% percentile bootstrap interval (``--resamples`` draws of
whole source items, seeded by ``--seed``; :func:`logitjudge.rubrics.samples.bootstrap_interval`).
A figure on fewer than 20 items (pairs, chunks) is marked ``†``. Point estimates use
scikit-learn (``roc_auc_score``, ``accuracy_score``, ``brier_score_loss``, ``f1_score``) or
:mod:`logitjudge.rubrics.samples`; draws use the same definitions on numpy arrays.

Writes ``benchmarks/results/quality-<model>[-<tag>].json`` (command, config, environment with
hardware, dtype, model name and fingerprint, metrics, per-item result rows) and ``.md`` (the
tables), and prints the tables.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.metrics import accuracy_score, brier_score_loss, f1_score, roc_auc_score

from logitjudge.rubrics.aggregate import ece_noise_floor, expected_calibration_error, gold_of, summarize
from logitjudge.rubrics.api import evaluate
from logitjudge.rubrics.debias import MIN_BATCH, batch_calibrated
from logitjudge.rubrics.items import text_lengths
from logitjudge.rubrics.registry import Registry, default_registry
from logitjudge.rubrics.samples import (
    auroc,
    bootstrap_interval,
    item_group,
    length_baseline_auroc,
    length_baseline_pairwise,
    sample_arrays,
    samples_from_rows,
    stratified_sample,
    stratum_of,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared result writer
from _results import DATA, RESULTS, run_metadata  # noqa: E402

WITHOUT_CONTRAST = "without_contrast"
"""Group suffix of an evaluator with contrast scored by P(yes) with context alone (same run)."""
WEAKEST_CLAIM = "weakest_claim"
"""Group suffix of a per-claim evaluator scored by its weakest claim (``x_min_score``, same run)."""
BATCH_CALIBRATED = "batch_calibrated"
"""Group suffix of typed choice/score answers of the same run with each question's prior divided
out (:mod:`logitjudge.rubrics.debias`, what ``logitjudge evaluate --debias batch`` gives)."""
RESCORED = {WITHOUT_CONTRAST: "x_p_yes_with_context", WEAKEST_CLAIM: "x_min_score"}
"""Group suffix -> the result field that rescores the same run under it."""
SMALL_N = 20
"""Figures on fewer items than this are marked with a dagger."""

REFERENCES: dict[tuple[str, str], tuple[float, str]] = {
    ("wikieval", "faithfulness"): (0.95, "RAGAS paper (gpt-3.5), WikiEval pairwise"),
    ("wikieval", "answer_relevancy"): (0.78, "RAGAS paper (gpt-3.5), WikiEval pairwise"),
    ("wikieval", "chunk_relevance"): (0.70, "RAGAS paper (gpt-3.5), WikiEval pairwise (context relevance)"),
}
"""Published figures to show beside ours: (set, evaluator) -> (value, source)."""


def select_rows(
    rows: Sequence[dict[str, Any]], limit: int | None, seed: int = 0, types: frozenset[str] | None = None
) -> list[dict[str, Any]]:
    """``limit`` rows, stratified and seeded (see the module docstring); all when None.

    ``types`` keeps only rows whose question type (or evaluator) is in it, before sampling, so a
    figure on one type (jevbench's 70 choice rows) is not limited to that type's share of a sample.
    """
    if types is not None:
        rows = [r for r in rows if stratum_of(r)[0] in types]
    return [dict(r) for r in stratified_sample(rows, limit, seed=seed)]


# -- per-unit data -----------------------------------------------------------------------------


def _judged_length(name: str, lengths: Mapping[str, Any]) -> float:
    """Characters of the text the evaluator judges (the context for retrieval evaluators, else
    the output), NaN when unknown; as :func:`logitjudge.rubrics.aggregate._judged_length`."""
    key = "context" if name.startswith(("chunk_relevance", "context_")) else "output"
    value = lengths.get(key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else float("nan")


def _binary_units(name: str, rows: Sequence[Mapping[str, Any]]) -> dict[str, np.ndarray]:
    """Items with a binary gold label: group, P(pass), predicted pass, gold, judged length."""
    out: dict[str, list[Any]] = defaultdict(list)
    for r in rows:
        res, gold = r["results"][name], r.get("gold") or {}
        if res.get("status") != "ok":
            continue
        answer = res.get("answer")
        if answer is not None:  # typed yes/no: P(yes) against gold.answer
            if answer.get("type") != "noul" or gold.get("unknown") or not isinstance(gold.get("answer"), bool):
                continue
            p, g, pred = float(answer["noul"]), gold["answer"], float(answer["noul"]) >= 0.5
        else:
            g = (gold.get("passed") or {}).get(name)
            if not isinstance(g, bool) or res.get("score") is None or res.get("passed") is None:
                continue
            p, pred = float(res["score"]), bool(res["passed"])
        for key, value in (
            ("group", item_group(r["id"])),
            ("p", p),
            ("pred", pred),
            ("gold", g),
            ("length", _judged_length(name, r.get("x_lengths") or {})),
        ):
            out[key].append(value)
    return {k: np.asarray(v) for k, v in out.items()}


def _pair_units(name: str, rows: Sequence[Mapping[str, Any]]) -> dict[str, np.ndarray]:
    """Complete pairs: group, win (1, 1/2 on ties, 0), preferred-is-shorter (same scale)."""
    members: dict[str, list[tuple[bool, float, float]]] = defaultdict(list)
    for r in rows:
        res, pair = r["results"][name], ((r.get("gold") or {}).get("pair") or {}).get(name)
        if pair is None or res.get("status") != "ok":
            continue
        value = res.get("x_soft_score", res.get("score"))
        if value is not None:
            members[pair[0]].append((bool(pair[1]), float(value), _judged_length(name, r.get("x_lengths") or {})))
    out: dict[str, list[Any]] = defaultdict(list)
    for pair_id, m in members.items():
        good, bad = [x for x in m if x[0]], [x for x in m if not x[0]]
        if len(good) == 1 and len(bad) == 1:
            (_, gv, gn), (_, bv, bn) = good[0], bad[0]
            out["group"].append(item_group(pair_id))
            out["win"].append(1.0 if gv > bv else 0.5 if gv == bv else 0.0)
            out["lengths"].append((gn, bn))
    return {k: np.asarray(v) for k, v in out.items()}


def _chunk_units(name: str, rows: Sequence[Mapping[str, Any]]) -> tuple[dict[str, np.ndarray], list[Any]]:
    """Chunks with a gold label: group, predicted and gold label; and their 3-way samples."""
    out: dict[str, list[Any]] = defaultdict(list)
    for r in rows:
        res, gold = r["results"][name], ((r.get("gold") or {}).get("chunks") or {}).get(name)
        details = res.get("details") or []
        if res.get("status") == "ok" and gold and len(gold) == len(details):
            for d, g in zip(details, gold):
                out["group"].append(item_group(r["id"]))
                out["pred"].append(d["label"])
                out["gold"].append(g)
    samples = [s for s in samples_from_rows(rows) if s.source == name and len(s.probs) == 3]
    return {k: np.asarray(v) for k, v in out.items()}, samples


# -- figures -----------------------------------------------------------------------------------


class _Figures:
    """Builds figure records: point value, n, bootstrap interval over one set of units."""

    def __init__(self, groups: np.ndarray, resamples: int, seed: int) -> None:
        self.groups, self.resamples, self.seed = groups, resamples, seed
        self.out: dict[str, dict[str, Any]] = {}

    def add(
        self, name: str, value: float | None, draw: Callable[[np.ndarray], float | None], n: int, **extra: Any
    ) -> None:
        ci = None
        if value is not None and n > 0:
            ci = bootstrap_interval(draw, list(self.groups), resamples=self.resamples, seed=self.seed)
        self.out[name] = {
            "name": name,
            "value": None if value is None else float(value),
            "n": n,
            "lo": ci["lo"] if ci else None,
            "hi": ci["hi"] if ci else None,
            "resamples": ci["resamples"] if ci else 0,
            **extra,
        }

    def add_floor(self, scores: np.ndarray, n: int) -> None:
        """``ece_floor``: the ECE of a perfectly calibrated predictor with these scores at this n
        (:func:`~logitjudge.rubrics.aggregate.ece_noise_floor`; no interval)."""
        floor = ece_noise_floor(scores)
        self.out["ece_floor"] = {"name": "ece_floor", "value": floor, "n": n, "lo": None, "hi": None, "resamples": 0}


def _mean(x: np.ndarray) -> Callable[[np.ndarray], float | None]:
    return lambda idx: float(x[idx].mean()) if len(idx) else None


def best_threshold_accuracy(gold: np.ndarray, p: np.ndarray) -> float | None:
    """The accuracy of "pass when p >= t" at the best t, chosen on these very items (optimistic:
    an upper bound for any fixed threshold, the yardstick of the shipped one). Every cut between
    distinct scores is tried, and passing everything or nothing."""
    if not len(gold):
        return None
    order = np.argsort(-p, kind="stable")
    g, q = gold[order].astype(float), p[order]
    hits_above = np.concatenate([[0.0], np.cumsum(g)])  # gold passes among the top k
    misses_below = np.concatenate([[0.0], np.cumsum((1 - g)[::-1])])[::-1]  # gold fails below the top k
    cuts = [0] + [k for k in range(1, len(q)) if q[k] != q[k - 1]] + [len(q)]
    return float(max(hits_above[k] + misses_below[k] for k in cuts) / len(q))


def _binary_figures(u: dict[str, np.ndarray], resamples: int, seed: int) -> dict[str, dict[str, Any]]:
    n = len(u.get("gold", []))
    figs = _Figures(u.get("group", np.asarray([])), resamples, seed)
    if not n:
        return figs.out
    p, pred, gold, length = u["p"].astype(float), u["pred"].astype(bool), u["gold"].astype(bool), u["length"]
    two = len(set(gold.tolist())) == 2
    figs.add("auroc", roc_auc_score(gold, p) if two else None, lambda i: auroc(gold[i], p[i]), n)
    known = ~np.isnan(length)
    base = length_baseline_auroc(gold[known].tolist(), length[known].tolist()) if known.any() else None
    if base is not None:
        sign = 1.0 if base[1] == "longer" else -1.0

        def base_draw(i: np.ndarray) -> float | None:
            k = i[known[i]]
            return auroc(gold[k], sign * length[k])

        def delta_draw(i: np.ndarray) -> float | None:
            k = i[known[i]]
            a, b = auroc(gold[k], p[k]), auroc(gold[k], sign * length[k])
            return None if a is None or b is None else a - b

        nk = int(known.sum())
        figs.add("length_baseline_auroc", base[0], base_draw, nk, direction=base[1])
        model_known = roc_auc_score(gold[known], p[known])
        figs.add("auroc_minus_length_baseline", model_known - base[0], delta_draw, nk, direction=base[1])
    figs.add("accuracy", accuracy_score(gold, pred), _mean((gold == pred).astype(float)), n)
    figs.add(
        "best_threshold_accuracy",
        best_threshold_accuracy(gold, p),
        lambda i: best_threshold_accuracy(gold[i], p[i]),
        n,
    )
    figs.add("brier", brier_score_loss(gold, p), _mean((p - gold) ** 2), n)
    figs.add(
        "ece",
        expected_calibration_error(p.tolist(), gold.tolist()),
        lambda i: expected_calibration_error(p[i].tolist(), gold[i].tolist()),
        n,
    )
    figs.add_floor(p, n)
    return figs.out


def _pair_figures(u: dict[str, np.ndarray], resamples: int, seed: int) -> dict[str, dict[str, Any]]:
    n = len(u.get("win", []))
    figs = _Figures(u.get("group", np.asarray([])), resamples, seed)
    if not n:
        return figs.out
    win = u["win"].astype(float)
    figs.add("pairwise_accuracy", win.mean(), _mean(win), n)
    known = [(a, b) for a, b in u["lengths"].tolist() if a == a and b == b]  # NaN != NaN
    base = length_baseline_pairwise(known) if len(known) == n else None
    if base is not None:
        pref, other = u["lengths"][:, 0], u["lengths"][:, 1]
        shorter = np.where(pref < other, 1.0, np.where(pref == other, 0.5, 0.0))
        hit = shorter if base[1] == "shorter" else 1.0 - shorter
        figs.add("length_baseline_pairwise_accuracy", base[0], _mean(hit), n, direction=base[1])
        figs.add("pairwise_minus_length_baseline", win.mean() - base[0], _mean(win - hit), n, direction=base[1])
    return figs.out


def _distribution_figures(figs: _Figures, samples: Sequence[Any], n: int, *, top_label: bool = False) -> None:
    """NLL, Brier and ECE of labelled distributions whose units are the figure's units."""
    arr = sample_arrays(samples, top_label=top_label)
    figs.add("nll", arr["nll"].mean(), _mean(arr["nll"]), n)
    figs.add("brier", arr["brier"].mean(), _mean(arr["brier"]), n)
    score, truth = arr["score"], arr["truth"]
    figs.add(
        "ece",
        expected_calibration_error(score.tolist(), truth.tolist()),
        lambda i: expected_calibration_error(score[i].tolist(), truth[i].tolist()),
        n,
    )
    figs.add_floor(score, n)


def _chunk_figures(name: str, rows: Sequence[Mapping[str, Any]], resamples: int, seed: int) -> dict[str, Any]:
    u, samples = _chunk_units(name, rows)
    n = len(u.get("gold", []))
    figs = _Figures(u.get("group", np.asarray([])), resamples, seed)
    if not n:
        return figs.out
    pred, gold = u["pred"], u["gold"]
    labels = sorted(set(gold.tolist()) | set(pred.tolist()))
    figs.add("chunk_accuracy", accuracy_score(gold, pred), _mean((pred == gold).astype(float)), n)
    figs.add(
        "chunk_macro_f1",
        f1_score(gold, pred, labels=labels, average="macro", zero_division=0),
        lambda i: float(f1_score(gold[i], pred[i], labels=labels, average="macro", zero_division=0)),
        n,
    )
    majority, _ = Counter(gold.tolist()).most_common(1)[0]
    figs.add(
        "majority_baseline_accuracy",
        float((gold == majority).mean()),
        _mean((gold == majority) * 1.0),
        n,
        label=majority,
    )
    if len(samples) == n:  # one 3-way distribution per chunk, in the same order
        _distribution_figures(figs, samples, n)
    return figs.out


def batch_calibrated_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` (typed choice/score results) as ``logitjudge evaluate --debias batch`` gives them:
    each row's stored ``question`` becomes the engine question the run asked, the stored
    distribution its answer, and :func:`logitjudge.rubrics.debias.batch_calibrated` adjusts them;
    each adjusted result is scored again by the library's scorer, so choice, expected level,
    label and confidence follow the new distribution. Rows without a stored question (runs from
    before it was kept) are left as answered."""
    from logitjudge.convert import question_to_engine
    from logitjudge.engine.types import Answer, EngineResult, Usage
    from logitjudge.rubrics.items import parse_typed_question
    from logitjudge.rubrics.scoring import Answered, score_typed_question

    answered: list[tuple[int, list[Any], EngineResult | None]] = []
    for i, rec in enumerate(rows):
        res = rec["results"]["typed_question"]
        if not rec.get("question"):
            answered.append((i, [None], None))
            continue
        q = question_to_engine(parse_typed_question(rec["question"]))
        probs = res["answer"]["probabilities"]
        answer = Answer(q.type, tuple(probs[o.name] for o in q.options), res["answer"].get("x_option_mass", 1.0))
        answered.append((i, [q], EngineResult((answer,), Usage(0))))
    defn = default_registry().evaluators["typed_question"]
    out = list(rows)
    adjusted, _ = batch_calibrated(answered)
    for (i, questions, response), (_, _, before) in zip(adjusted, answered, strict=True):
        if isinstance(response, EngineResult) and response is not before:
            threshold = float(rows[i]["results"]["typed_question"].get("threshold", 0.5))
            scored = score_typed_question(defn, [Answered(questions[0], response.answers[0])], threshold)
            out[i] = {**rows[i], "results": {"typed_question": scored.model_dump(mode="json", exclude_none=True)}}
    return out


def _typed_figures(
    rows: Sequence[Mapping[str, Any]],
    qtype: str,
    resamples: int,
    seed: int,
    raw: Sequence[Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """Figures of typed answers; with ``raw`` (the same rows as answered, when ``rows`` are
    rescored) also ``accuracy_minus_raw``, paired on the same items and resamples."""
    samples = [s for s in samples_from_rows(rows) if s.type == qtype]
    figs = _Figures(np.asarray([item_group(s.id) for s in samples]), resamples, seed)
    n = len(samples)
    if not n:
        return figs.out
    top_label = qtype != "noul"  # choice questions of 2 and more options are pooled (multi-class)
    arr = sample_arrays(samples, top_label=top_label)
    figs.add("accuracy", arr["hit"].mean(), _mean(arr["hit"].astype(float)), n)
    if raw is not None:
        before = sample_arrays([s for s in samples_from_rows(raw) if s.type == qtype], top_label=top_label)["hit"]
        gain = arr["hit"].astype(float) - before.astype(float)
        figs.add("accuracy_minus_raw", gain.mean(), _mean(gain), n)
    chance = np.asarray([1.0 / len(s.probs) for s in samples])
    figs.add("chance_accuracy", chance.mean(), _mean(chance), n)
    _distribution_figures(figs, samples, n, top_label=top_label)
    if qtype == "score":
        err = np.asarray([abs(sum(i * p for i, p in enumerate(s.probs)) - s.gold) for s in samples])
        figs.add("mae_level", err.mean(), _mean(err), n)
    return figs.out


# -- metric rows -------------------------------------------------------------------------------


def _group_key(record: Mapping[str, Any], name: str) -> str:
    res = record["results"][name]
    if name == "typed_question" and res.get("answer"):
        return f"{name}:{res['answer']['type']}"
    return name


def group_metrics(
    set_name: str, records: list[dict[str, Any]], *, resamples: int = 1000, seed: int = 0
) -> list[dict[str, Any]]:
    """Metric rows of one set: one per (evaluator or typed question type, kind of label).

    Kinds: ``binary``, ``three_way``, ``choice``, ``score``, ``pairwise`` (see the module
    docstring). Each row holds ``figures`` (name -> value, n, lo, hi, resamples[, direction])
    and, flat for older readers (``benchmarks/quality/rotations.py``), ``accuracy``, ``auroc``,
    ``brier``, ``ece``, ``nll`` and ``length_baseline``.
    """
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for rec in records:
        for name, res in rec.get("results", {}).items():
            groups[_group_key(rec, name)].append({**rec, "results": {name: res}})
            for suffix, field in RESCORED.items():  # the same run, scored another way
                if res.get(field) is not None:
                    p = float(res[field])
                    rescored = {**res, "score": p, "passed": p >= float(res.get("threshold", 0.5))}
                    groups[f"{name}:{suffix}"].append({**rec, "results": {name: rescored}})
    for key in ("typed_question:choice", "typed_question:score"):
        if key in groups:  # the same answers with each question's prior divided out
            groups[f"{key}:{BATCH_CALIBRATED}"] = batch_calibrated_rows(groups[key])
    out = []
    for key, rows in groups.items():
        name = key.split(":")[0]
        kinds: list[tuple[str, dict[str, Any]]] = []
        if key.startswith(("typed_question:choice", "typed_question:score")):
            qtype = key.split(":")[1]
            raw = groups[f"{name}:{qtype}"] if key.endswith(BATCH_CALIBRATED) else None
            kinds.append((qtype, _typed_figures(rows, qtype, resamples, seed, raw)))
        elif name == "chunk_support":
            kinds.append(("three_way", _chunk_figures(name, rows, resamples, seed)))
        else:
            kinds.append(("binary", _binary_figures(_binary_units(name, rows), resamples, seed)))
            kinds.append(("pairwise", _pair_figures(_pair_units(name, rows), resamples, seed)))
        ref = REFERENCES.get((set_name, name))
        tokens = sum(r.get("usage", {}).get("input_tokens", 0) for r in rows)
        summary = summarize(rows)[name]
        unknown = summary.value("gold_unknown")
        if not any(figs for _, figs in kinds):  # said in a note under the tables, not dropped
            kinds = [("unscored", {})]
        for kind, figs in kinds:
            if not figs and kind != "unscored":
                continue

            def v(metric: str, figs: dict[str, Any] = figs) -> float | None:
                return figs[metric]["value"] if metric in figs else None

            length = figs.get("length_baseline_auroc") or figs.get("length_baseline_pairwise_accuracy") or {}
            out.append(
                {
                    "set": set_name,
                    "group": key,
                    "kind": kind,
                    "n": max((f["n"] for f in figs.values()), default=0),
                    "rows": len(rows),
                    "figures": figs,
                    "accuracy": v("accuracy") if kind != "three_way" else v("chunk_accuracy"),
                    "auroc": v("auroc"),
                    "brier": v("brier"),
                    "ece": v("ece"),
                    "nll": v("nll"),
                    "length_baseline": length.get("value"),
                    "length_direction": length.get("direction"),
                    "gold_unknown": int(unknown) if unknown else 0,
                    "errors": summary.errors,
                    "reference": ref[0] if ref and kind == "pairwise" else None,
                    "reference_source": ref[1] if ref and kind == "pairwise" else None,
                    "tokens_per_item": round(tokens / max(1, len(rows)), 1),
                    "summary": summary.model_dump(mode="json"),
                }
            )
    return out


# -- running -----------------------------------------------------------------------------------


def _read_rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_set(
    judge: Any,
    path: Path,
    limit: int | None,
    batch_size: int,
    seed: int = 0,
    registry: Registry | None = None,
    types: frozenset[str] | None = None,
    exclude: frozenset[str] = frozenset(),
) -> tuple[list[dict[str, Any]], float]:
    """Evaluate one set; returns the result rows (as ``logitjudge evaluate`` writes them) and seconds.

    ``exclude``: source items (:func:`~logitjudge.rubrics.samples.item_group`) whose rows are left
    out before sampling (``--exclude``: the items a calibration was fitted on).
    """
    kept = [r for r in _read_rows(path) if item_group(str(r.get("id"))) not in exclude]
    rows = select_rows(kept, limit, seed, types)
    t0 = time.perf_counter()
    run = evaluate(judge, rows, "auto", batch_size=batch_size, registry=registry)
    elapsed = time.perf_counter() - t0
    records = []
    for raw, res in zip(rows, run.results, strict=True):
        rec = res.model_dump(mode="json", exclude_none=True)
        rec["id"] = raw["id"]
        rec["evaluator"] = raw.get("evaluator")
        rec["gold"] = gold_of(raw).model_dump(mode="json")
        rec["x_lengths"] = text_lengths(raw)
        if raw.get("question") is not None:
            rec["question"] = raw["question"]  # the typed question, for batch calibration's groups
        records.append(rec)
    return records, elapsed


def hardware(engine: Mapping[str, Any]) -> dict[str, Any]:
    """CPU model and cores, and the GPU's name and memory when the engine runs on CUDA."""
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    out: dict[str, Any] = {"cpu": cpu or "unknown", "cpu_cores": os.cpu_count(), "device": engine.get("device")}
    if str(engine.get("device", "")).startswith("cuda"):
        import torch

        dev = torch.device(str(engine["device"]))
        props = torch.cuda.get_device_properties(dev.index or 0)
        out["gpu"] = props.name
        out["gpu_memory_gib"] = round(props.total_memory / 2**30, 1)
    return out


def _fmt(x: float | None, digits: int = 3) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def _cell(fig: Mapping[str, Any] | None, *, direction: bool = False) -> str:
    """``0.562 [0.41, 0.71]``, with a dagger under SMALL_N and the baseline's direction."""
    if not fig or fig.get("value") is None:
        return "–"
    text = _fmt(fig["value"]) + ("†" if fig["n"] < SMALL_N else "")
    if fig.get("lo") is not None:
        text += f" [{fig['lo']:.2f}, {fig['hi']:.2f}]"
    if direction and fig.get("direction"):
        text += f" {fig['direction']}"
    return text


TABLES: list[tuple[str, str, str, list[tuple[str, str, bool]]]] = [
    (
        "binary",
        "Binary labels",
        "AUROC: of P(pass) (the result's 0..1 score; typed yes/no: P(yes)) against the gold label. "
        "Length baseline: AUROC of the judged text's length (the output; the context for retrieval "
        "evaluators) as a score, in its better direction (shorter / longer passes). Δ: AUROC minus "
        "the length baseline on the same items and resamples (> 0 with the interval above 0: beats "
        "it). Accuracy: passed vs gold at the evaluator's threshold (typed yes/no: P(yes) ≥ 0.5). "
        "Best-threshold accuracy: at the threshold best on these same items (optimistic). "
        "Brier, ECE (10 equal-width bins): of P(pass). ECE floor: the ECE a perfectly calibrated "
        "predictor with the same scores shows on average at this n (labels drawn from its own "
        "probabilities; Roelofs et al. 2022): an ECE near it is as low as n items can show.",
        [
            ("AUROC", "auroc", False),
            ("length baseline AUROC", "length_baseline_auroc", True),
            ("Δ AUROC − length", "auroc_minus_length_baseline", False),
            ("accuracy", "accuracy", False),
            ("best-threshold accuracy", "best_threshold_accuracy", False),
            ("Brier", "brier", False),
            ("ECE", "ece", False),
            ("ECE floor", "ece_floor", False),
        ],
    ),
    (
        "three_way",
        "Three-way chunk support (supports / contradicts / unrelated), per chunk",
        "Accuracy: the chunk label equals gold. Macro-F1 over the three labels. Majority baseline: "
        "accuracy of always answering the most frequent gold label. NLL of the gold label, "
        "multi-class Brier (Σₖ (pₖ − yₖ)²) and top-label ECE of the 3-way distribution; ECE floor: "
        "the ECE a perfectly calibrated predictor shows at this n.",
        [
            ("3-way accuracy", "chunk_accuracy", False),
            ("macro-F1", "chunk_macro_f1", False),
            ("majority baseline", "majority_baseline_accuracy", False),
            ("NLL", "nll", False),
            ("Brier", "brier", False),
            ("ECE", "ece", False),
            ("ECE floor", "ece_floor", False),
        ],
    ),
    (
        "choice|score",
        "Choice and score questions (typed), exact answer",
        "Accuracy: the most probable option (level) is the gold one. Chance: mean 1/k over the "
        "items. NLL of the gold option, multi-class Brier, top-label ECE. MAE: |Σᵢ i·pᵢ − gold level| "
        "(scores only); ECE floor: the ECE a perfectly calibrated predictor shows at this n. Items "
        "whose gold is 'unknown' (jevbench) are left out. `:batch_calibrated`: the same answers with "
        f"each question's prior (its mean answer over the rows asking it, at least {MIN_BATCH}) divided out "
        "(`logitjudge evaluate --debias batch`); Δ: its accuracy minus the answers' as given, paired.",
        [
            ("accuracy", "accuracy", False),
            ("chance", "chance_accuracy", False),
            ("NLL", "nll", False),
            ("Brier", "brier", False),
            ("ECE", "ece", False),
            ("ECE floor", "ece_floor", False),
            ("MAE (levels)", "mae_level", False),
            ("Δ accuracy vs as answered", "accuracy_minus_raw", False),
        ],
    ),
    (
        "pairwise",
        "Pairs (WikiEval, RAGAS protocol), per pair",
        "Pairwise accuracy: share of pairs whose preferred item scores higher (ties 1/2). Length "
        "baseline: the same for 'the shorter (or longer) text is preferred', in its better direction. "
        "Δ: pairwise accuracy minus the baseline on the same pairs and resamples. Published: RAGAS "
        "paper (gpt-3.5), for orientation only (other model, other protocol details).",
        [
            ("pairwise accuracy", "pairwise_accuracy", False),
            ("length baseline", "length_baseline_pairwise_accuracy", True),
            ("Δ pairwise − length", "pairwise_minus_length_baseline", False),
        ],
    ),
]
"""(kinds, title, definitions, columns: (header, figure name, show direction))."""


def header(record: Mapping[str, Any]) -> str:
    """Model, fingerprint, dtype, device and hardware, sample and interval settings."""
    cfg, env = record["config"], record["environment"]
    eng, hw = env.get("engine", {}), env.get("hardware", {})
    where = f"{eng.get('device', '?')}"
    if hw.get("gpu"):
        where += f" ({hw['gpu']}, {hw.get('gpu_memory_gib', '?')} GiB)"
    if hw.get("cpu"):
        where += f"; CPU {hw['cpu']} ({hw.get('cpu_cores', '?')} cores)"
    sample = (
        f"**--limit {cfg['limit']} rows per set**, seed {cfg.get('seed', 0)} (stratified by question type, "
        "gold and source; WikiEval: whole pairs)"
        if cfg["limit"]
        else "every row"
    )
    return (
        f"Model `{eng.get('model', '?')}` (fingerprint `{str(eng.get('fingerprint', '?'))[:16]}`), "
        f"dtype {eng.get('dtype', '?')} (precision {eng.get('precision', eng.get('dtype', '?'))}), prompt {eng.get('prompt_version', '?')}, on {where}; "
        f"torch {env.get('torch', '?')}, rotations {cfg['rotations']}, "
        f"calibration {_calibration_of(eng, cfg)}. Sample: {sample}. Intervals: 95% percentile bootstrap "
        f"over source items, {cfg.get('resamples', 1000)} resamples, seed {cfg.get('seed', 0)}. "
        f"† = fewer than {SMALL_N} items (pairs, chunks) behind the figure: an anecdote, not a measurement."
    )


def _calibration_of(eng: dict[str, Any], cfg: dict[str, Any]) -> str:
    """The calibration that ran: the engine's origin and digest, else ``none``."""
    if eng.get("calibration"):
        return f"{eng.get('calibration_origin') or cfg.get('calibration')} ({eng['calibration']})"
    return "none"


def markdown_table(record: Mapping[str, Any]) -> str:
    """The header, one table per kind of label (one metric per column), and the speed table."""
    lines = [header(record), ""]
    for kinds, title, definitions, cols in TABLES:
        rows = [m for m in record["metrics"] if m["kind"] in kinds.split("|")]
        if not rows:
            continue
        heads = [h for h, _, _ in cols] + (["published"] if kinds == "pairwise" else [])
        lines += [
            f"**{title}.** {definitions}",
            "",
            "| set | evaluator | n | " + " | ".join(heads) + " |",
            "|---|---|---:|" + "---:|" * len(heads),
        ]
        for m in rows:
            cells = [_cell(m["figures"].get(f), direction=d) for _, f, d in cols]
            if kinds == "pairwise":
                cells.append(_fmt(m["reference"], 2))
            n = f"{m['n']}{'†' if m['n'] < SMALL_N else ''}"
            lines.append(f"| {m['set']} | {m['group']} | {n} | " + " | ".join(cells) + " |")
        lines.append("")
    left: dict[tuple[str, str], str] = {}
    for m in record["metrics"]:
        if m["kind"] == "unscored" or m["gold_unknown"] or m["errors"]:
            left[m["set"], m["group"]] = ", ".join(
                ([f"all {m['rows']} unscored"] if m["kind"] == "unscored" else [])
                + ([f"{m['gold_unknown']} with gold 'unknown'"] if m["gold_unknown"] else [])
                + ([f"{m['errors']} failed"] if m["errors"] else [])
            )
    if left:
        said = "; ".join(f"{s} {g}: {why}" for (s, g), why in left.items())
        lines += [f"Left out of the figures above: {said}.", ""]
    lines += [
        "**Speed.** Items per second of the whole set (all its evaluators), input tokens per item.",
        "",
        "| set | items | seconds | items/s | tokens/item |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, s in record["sets"].items():
        tokens = s["input_tokens"] / max(1, s["n_items"])
        lines.append(
            f"| {name} | {s['n_items']} | {_fmt(s['elapsed_s'], 1)} | {_fmt(s['items_per_s'], 2)} | {tokens:.0f} |"
        )
    return "\n".join(lines) + "\n"


def with_questions(record: dict[str, Any], data: Path = DATA) -> None:
    """Attach each stored row's typed ``question`` from its set's ``dev.jsonl`` (by id), for
    runs stored before rows kept it; rows of a set whose file is absent are left as they are."""
    for name, rows in record["items"].items():
        path = data / name / "dev.jsonl"
        if any("question" not in r for r in rows) and path.exists():
            by_id = {str(r["id"]): r.get("question") for r in _read_rows(path)}
            for r in rows:
                if by_id.get(str(r["id"])) is not None:
                    r.setdefault("question", by_id[str(r["id"])])


def _all_metrics(record: Mapping[str, Any]) -> list[dict[str, Any]]:
    cfg = record["config"]
    return [
        m
        for name, rows in record["items"].items()
        for m in group_metrics(name, rows, resamples=cfg.get("resamples", 1000), seed=cfg.get("seed", 0))
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--model",
        default=None,
        help="model dir, .gguf, alias (smollm2-135m, qwen2.5-coder-1.5b), or cached id (default: LOGITJUDGE_MODEL, else the main model)",
    )
    ap.add_argument("--dtype", default="auto", choices=("auto", "mixed", "float32", "bfloat16", "float16"))
    ap.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1")
    ap.add_argument("--limit", type=int, default=None, help="rows per set (stratified sample); default all")
    ap.add_argument("--seed", type=int, default=0, help="seed of the sample and of the bootstrap")
    ap.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples per figure")
    ap.add_argument("--rotations", type=int, default=1, help="option-order rotations for choice/score (1 = off)")
    ap.add_argument(
        "--calibration",
        default="shipped",
        help="shipped (default: the one shipped for this engine, if any, as users get it), none (raw "
        "distributions: what `logitjudge calibrate` fits on), or a calibration file",
    )
    ap.add_argument(
        "--prompt-version", default=None, help="prompt template (lj-prompt-1.1 default, lj-prompt-2 the lean one)"
    )
    ap.add_argument(
        "--variants",
        default=None,
        metavar="JSON",
        help="a JSON list of evaluator definitions replacing the catalogue's of the same name "
        "(a wording or method to measure; e.g. benchmarks/variants/faithfulness-claims.json)",
    )
    ap.add_argument(
        "--adapters",
        default="shipped",
        metavar="shipped|none|DIR[,DIR]",
        help="branch adapters: shipped (default: those shipped for the model), none, or folders from "
        "`logitjudge fit --adapter`; an evaluator with one bound to its version reads it",
    )
    ap.add_argument("--sets", default=None, help="comma-separated set names (default: every set)")
    ap.add_argument(
        "--types",
        default=None,
        help="comma-separated question types or evaluators to keep before sampling (choice, noul, score, "
        "faithfulness, ...; default: all rows)",
    )
    ap.add_argument("--tag", default=None, help="suffix of the output file names")
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument(
        "--exclude",
        nargs="+",
        default=None,
        metavar="JSON",
        help="earlier runs of this script: every row of their source items is left out before sampling "
        "(figures on items a calibration fitted on them never saw)",
    )
    ap.add_argument("--data", default=str(DATA), help="folder of <set>/dev.jsonl")
    ap.add_argument("--out-dir", default=str(RESULTS))
    ap.add_argument(
        "--rebuild",
        default=None,
        metavar="JSON",
        help="recompute metrics and the tables of an earlier run from its stored items (no model)",
    )
    args = ap.parse_args(argv)
    if args.rebuild:
        path = Path(args.rebuild)
        record = json.loads(path.read_text())
        with_questions(record, Path(args.data))
        record["metrics"] = _all_metrics(record)
        path.write_text(json.dumps(record, indent=1, allow_nan=False) + "\n")
        path.with_suffix(".md").write_text(markdown_table(record))
        print(markdown_table(record))
        return 0

    wanted = set(args.sets.split(",")) if args.sets else None
    paths = sorted(p for p in Path(args.data).glob("*/dev.jsonl") if wanted is None or p.parent.name in wanted)
    if wanted and len(paths) != len(wanted):
        ap.error(f"unknown sets: {sorted(wanted - {p.parent.name for p in paths})}")
    types = frozenset(args.types.split(",")) if args.types else None
    if types is not None:
        paths = [p for p in paths if any(select_rows(_read_rows(p), None, types=types))]
        if not paths:
            ap.error(f"--types {args.types}: no rows of these types in the chosen sets")

    excluded: set[str] = set()
    for name in args.exclude or ():
        try:
            earlier = json.loads(Path(name).read_text())
            excluded.update(item_group(str(r["id"])) for rows in earlier["items"].values() for r in rows)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            ap.error(f"--exclude {name}: not a result JSON of this script ({exc})")
    exclude = frozenset(excluded)

    from logitjudge.judge import Judge

    registry = default_registry().with_variants(args.variants) if args.variants else None
    judge = Judge.load(
        args.model,
        device=args.device,
        dtype=args.dtype,
        default_rotations=args.rotations,
        calibration=args.calibration,
        prompt_version=args.prompt_version,
        adapters=args.adapters,
    )
    engine = json.loads(json.dumps(judge.describe(), default=str))
    stem = f"quality-{engine['model']}" + (f"-{args.tag}" if args.tag else "")
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    hw = hardware(engine)
    record: dict[str, Any] = {
        "command": " ".join(["python", "benchmarks/quality/quality.py", *(sys.argv[1:] if argv is None else argv)]),
        "header": {
            "model": engine.get("model"),
            "fingerprint": engine.get("fingerprint"),
            "dtype": engine.get("dtype"),
            "device": engine.get("device"),
            "prompt_version": engine.get("prompt_version"),
            "cpu": hw.get("cpu"),
            "gpu": hw.get("gpu"),
        },
        "config": {
            "model": args.model,
            "dtype": args.dtype,
            "device": args.device,
            "limit": args.limit,
            "seed": args.seed,
            "resamples": args.resamples,
            "rotations": args.rotations,
            "calibration": args.calibration,
            "prompt_version": args.prompt_version,
            "adapters": args.adapters,
            "batch_size": args.batch_size,
            "variants": None if registry is None else json.loads(Path(args.variants).read_text()),
            "sets": [p.parent.name for p in paths],
            "types": sorted(types) if types else None,
            "exclude": args.exclude,
            "excluded_items": len(exclude),
        },
        "environment": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "hardware": hw,
            "engine": engine,
            **{
                m: getattr(sys.modules[m], "__version__", "?")
                for m in ("torch", "transformers", "sklearn")
                if m in sys.modules
            },
        },
        "sets": {},
        "metrics": [],
        "items": {},
        "metadata": run_metadata(device=str(engine.get("device", "cpu"))),
    }
    for path in paths:
        name = path.parent.name
        records, elapsed = run_set(judge, path, args.limit, args.batch_size, args.seed, registry, types, exclude)
        record["sets"][name] = {
            "n_items": len(records),
            "elapsed_s": round(elapsed, 2),
            "items_per_s": round(len(records) / elapsed, 4) if elapsed > 0 else None,
            "seconds_per_item": round(elapsed / len(records), 3) if records else None,
            "input_tokens": sum(r.get("usage", {}).get("input_tokens", 0) for r in records),
        }
        record["metrics"] += group_metrics(name, records, resamples=args.resamples, seed=args.seed)
        record["items"][name] = records
        print(f"{name}: {len(records)} items in {elapsed:.0f} s", file=sys.stderr, flush=True)
        (out_dir / f"{stem}.json").write_text(json.dumps(record, indent=1, allow_nan=False) + "\n")
        (out_dir / f"{stem}.md").write_text(markdown_table(record))
    print(markdown_table(record))
    print(f"wrote {out_dir / (stem + '.json')} and .md", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
