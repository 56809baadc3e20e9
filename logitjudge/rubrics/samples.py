"""Labelled samples: choosing representative rows, labelled distributions, metrics with intervals.

Three parts, used by ``benchmarks/quality/quality.py`` and ``logitjudge calibrate``:

1. **Choosing rows** (:func:`stratified_sample`): a seeded sample of a labelled set, stratified
   by (question type, gold value, source) with proportional allocation, so that the sample's
   shares of each type, gold value and source are those of the file within about one row.
   :func:`item_group` names the source item a row belongs to (the right and the hallucinated
   answer of one HaluEval question, the questions of one jevbench case, the items of one
   WikiEval question): splits and bootstrap resamples keep a group together.
2. **Labelled distributions** (:class:`Sample`, :func:`samples_from_rows`).
3. **Metrics and intervals**: :func:`sample_metrics`, :func:`bootstrap_interval` (percentile
   interval over resampled source items), :func:`auroc` and the two-sided length baselines
   (:func:`length_baseline_auroc`, :func:`length_baseline_pairwise`).

A :class:`Sample` is one engine distribution over a question's options with the index of the
gold option: what calibration is fitted on and what Brier and ECE are measured on. They are read
from ``logitjudge evaluate`` result rows (``{"results": {...}, "gold": {...}}``, see
:mod:`logitjudge.rubrics.aggregate`):

=================== ============================================ ==============================
result              distribution                                 gold option
=================== ============================================ ==============================
faithfulness-like   ``probabilities`` yes/no of a yes/no         0 (true) when ``gold.passed``
(probability)       evaluator (noul)
chunk_support       each chunk's ``probabilities`` (choice, 3)   the chunk's gold label
chunk_relevance     each chunk's ``probability`` (noul)          0 when the chunk is relevant
typed_question      the System One answer (noul, choice, score)  ``gold.answer``
rubric              its score ``(s, 1 - s)``, s = E[level]/(L-1), 0 (true) when ``gold.passed``
(answer_correctness, with ``levels`` = the level distribution
context_recall)
=================== ============================================ ==============================

A rubric evaluator judged against a binary label gives a **score-level** sample only (what its
evaluator scaling is fitted on), never a sample of the score question's engine bucket: a yes/no
label does not say which of the 4 levels was right.

Metrics (all on the distributions exactly as given):
- ``nll``: mean ``-log p[gold]``;
- ``brier``: two options: ``(p_0 - y_0)^2`` (the usual binary Brier score, as scikit-learn's
  ``brier_score_loss``); more options: ``sum_k (p_k - y_k)^2`` (Brier 1950, multi-class);
- ``ece``: two options: ECE of ``p_0`` against ``y_0`` (what :func:`aggregate._classification`
  reports for P(pass)); more options: top-label ECE (confidence = max p, hit = argmax is gold).
  10 equal-width bins (Guo et al. 2017), via :func:`aggregate.expected_calibration_error`;
- ``auroc``: two options: AUROC of ``p_0`` against ``y_0`` (discrimination, which a temperature
  cannot change); more options: AUROC of the top-label confidence against "argmax is gold".

Bootstrap (:func:`bootstrap_interval`): a percentile interval (Efron & Tibshirani 1993, ch. 13)
from ``resamples`` draws, with replacement, of whole source items (a cluster bootstrap: items of
one group are not independent, so resampling rows would make the interval too narrow). Draws
where the statistic is undefined (AUROC of a one-class draw) are dropped; fewer than half
defined gives no interval.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import rankdata

from logitjudge.engine.answers import noul_distribution
from logitjudge.engine.question_types import QUESTION_TYPES
from logitjudge.rubrics.aggregate import expected_calibration_error
from logitjudge.rubrics.scoring import rubric_score

__all__ = [
    "Sample",
    "samples_from_row",
    "samples_from_rows",
    "sample_metrics",
    "sample_arrays",
    "item_group",
    "stratum_of",
    "allocate",
    "stratified_sample",
    "auroc",
    "bootstrap_interval",
    "length_baseline_auroc",
    "length_baseline_pairwise",
]

# -- choosing rows -----------------------------------------------------------------------------


def item_group(item_id: str) -> str:
    """The source item of a row id: its first two ``:`` fields.

    The shared data ids are ``<set>:<source item>[:<variant>...]``: ``halueval_qa:12:right`` and
    ``halueval_qa:12:hallucinated`` (one question), ``jevbench:customer_support-037:<question>``
    (one case), ``wikieval:0:ff:answer`` (one WikiEval question, all three pair kinds),
    ``truthfulqa:150:correct``; ``qags_xsum:3`` and ``vitaminc:90`` are items of their own.
    """
    return ":".join(str(item_id).split(":")[:2])


def _gold_value(row: Mapping[str, Any]) -> str:
    gold = row.get("gold") or {}
    if "pair" in gold:
        return "pair"  # pairs are sampled whole; preferred and not-preferred come together
    if gold.get("unknown") is True or gold.get("answer") == "unknown":
        return "unknown"
    for key in ("faithful", "correct", "recall", "label", "answer"):
        if key in gold:
            return str(gold[key])
    return "-"


def stratum_of(row: Mapping[str, Any]) -> tuple[str, str, str]:
    """(question type, gold value, source) of a shared-data row.

    Type: ``question.type`` (typed rows: noul, choice, score), else the evaluator. Gold: the
    value of the first of ``faithful``, ``correct``, ``recall``, ``label``, ``answer`` (``unknown``
    for jevbench's unknown answers, ``pair`` for pairwise rows). Source: ``meta.split`` (QAGS:
    cnndm / xsum), ``meta.domain`` (jevbench, sys1bench), ``meta.answer_model`` (EVOUNA's five
    systems), else the id's first field.
    """
    qtype = (row.get("question") or {}).get("type") or row.get("evaluator") or "-"
    meta = row.get("meta") or {}
    source = meta.get("split") or meta.get("domain") or meta.get("answer_model")
    if not source:
        source = str(row.get("id", "-")).split(":")[0]
    return str(qtype), _gold_value(row), str(source)


def allocate(sizes: Mapping[tuple[Hashable, ...], int], n: int) -> dict[tuple[Hashable, ...], int]:
    """Proportional allocation of ``n`` draws over strata of ``sizes`` (largest remainder).

    Each stratum first gets ``floor(n * size / total)``; the remaining draws go one at a time to
    the stratum with the largest unmet quota, counting its own remainder plus the unmet quota of
    each of its key's components (type, gold, source), so the margins are rounded as well as the
    cells. Ties go to the larger stratum, then the smaller key. A stratum whose quota is at least
    1 always gets a draw; no stratum gets more draws than rows.
    """
    total = sum(sizes.values())
    if n >= total:
        return dict(sizes)
    quota = {k: n * size / total for k, size in sizes.items()}
    alloc = {k: math.floor(q) for k, q in quota.items()}
    margin_quota: dict[tuple[int, Hashable], float] = defaultdict(float)
    margin_alloc: dict[tuple[int, Hashable], int] = defaultdict(int)
    for k, q in quota.items():
        for level, value in enumerate(k):
            margin_quota[level, value] += q
            margin_alloc[level, value] += alloc[k]

    def need(k: tuple[Hashable, ...]) -> tuple[float, int]:
        margins = sum(margin_quota[lv, v] - margin_alloc[lv, v] for lv, v in enumerate(k))
        return (quota[k] - alloc[k] + margins, sizes[k])

    for _ in range(n - sum(alloc.values())):
        open_ = sorted((k for k in sizes if alloc[k] < sizes[k]), key=repr)
        best = max(open_, key=need)  # the first of equals: the smallest key
        alloc[best] += 1
        for level, value in enumerate(best):
            margin_alloc[level, value] += 1
    return alloc


def stratified_sample(
    rows: Sequence[Mapping[str, Any]], limit: int | None, *, seed: int = 0
) -> list[Mapping[str, Any]]:
    """``limit`` rows of a labelled set, stratified by :func:`stratum_of`; all rows when None.

    Rows sharing ``gold.pair`` are one unit (a pair is taken whole, so ``limit`` is rounded to
    whole pairs). Units are allocated to strata by :func:`allocate`; inside a stratum a seeded
    shuffle (``numpy.random.default_rng(seed)``) decides which. Returns rows in file order.
    Deterministic for a seed; another seed gives another sample with the same shares.
    """
    if limit is None or limit >= len(rows):
        return list(rows)
    units: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        pair = (r.get("gold") or {}).get("pair")
        units.setdefault(f"pair:{pair}" if pair is not None else f"row:{i}", []).append(i)
    unit_list = list(units.values())
    n_units = max(1, round(limit * len(unit_list) / len(rows)))
    strata: dict[tuple[str, str, str], list[int]] = defaultdict(list)
    order = np.random.default_rng(seed).permutation(len(unit_list))
    for u in order:  # each stratum's units in shuffled order
        strata[stratum_of(rows[unit_list[u][0]])].append(int(u))
    alloc = allocate({k: len(v) for k, v in strata.items()}, n_units)
    keep = sorted(i for k, us in strata.items() for u in us[: alloc[k]] for i in unit_list[u])
    return [rows[i] for i in keep]


# -- labelled distributions --------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    """One labelled distribution.

    Attributes:
        id: the item id (several samples share it for per-chunk evaluators).
        source: the evaluator that produced it.
        type: the engine question type (``noul``, ``choice``, ``score``).
        probs: probabilities in option order (noul: ``(p_true, p_false)``).
        gold: index of the gold option.
        contrast: the distribution is a contrast score of two engine answers (a result with
            ``x_p_yes_without_context``), not one engine answer: calibration fits no engine
            bucket on it, only its evaluator's scaling.
        score_level: the distribution is a ``probability`` or ``rubric`` evaluator's own score (what an
            evaluator scaling of :class:`~logitjudge.engine.calibration.Calibration` applies to).
        version: the evaluator definition's version (``results[name].version``), for
            evaluator scalings, which hold for one version.
        levels: for a rubric evaluator's score, the score question's level distribution it was
            computed from (``probs`` = ``(s, 1 - s)``, s = sum_i i p_i / (L-1)): not one engine
            noul answer, so, like a contrast score, it takes part in no engine bucket's fit.
    """

    id: str
    source: str
    type: str
    probs: tuple[float, ...]
    gold: int
    contrast: bool = False
    score_level: bool = False
    version: str = ""
    levels: tuple[float, ...] | None = None


def _typed_sample(rid: str, name: str, answer: Mapping[str, Any], gold: Any) -> Sample | None:
    """A System One answer's labelled distribution, read by its question type's record
    (:attr:`~logitjudge.engine.question_types.QuestionTypeDef.read_gold`)."""
    spec = QUESTION_TYPES.get(str(answer.get("type")))
    if spec is None or spec.read_gold is None:
        return None
    labelled = spec.read_gold(answer, gold)
    return Sample(rid, name, spec.name, *labelled) if labelled is not None else None


def _level_distribution(probs: Any) -> tuple[float, ...] | None:
    """A rubric result's level probabilities ``{"0": p0, ..., "L-1": p}`` in level order, or None
    unless they are exactly levels 0..L-1 (L >= 2), finite, non-negative and sum to 1 (within 1e-3)."""
    if not isinstance(probs, Mapping) or len(probs) < 2 or set(probs) != {str(i) for i in range(len(probs))}:
        return None
    values = [probs[str(i)] for i in range(len(probs))]
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0 for v in values):
        return None
    levels = tuple(float(v) for v in values)
    return levels if abs(sum(levels) - 1.0) <= 1e-3 else None


def samples_from_row(row: Mapping[str, Any]) -> list[Sample]:
    """The labelled distributions of one result row (see the module docstring)."""
    gold = row.get("gold") or {}
    rid = str(row.get("id"))
    out: list[Sample] = []
    for name, res in (row.get("results") or {}).items():
        if res.get("status") != "ok":
            continue
        details = res.get("details")
        chunk_gold = (gold.get("chunks") or {}).get(name)
        if details and chunk_gold and len(chunk_gold) == len(details):
            for d, g in zip(details, chunk_gold):
                if d.get("probabilities"):  # choice per chunk (chunk_support)
                    keys = list(d["probabilities"])
                    if g in keys:
                        probs = tuple(float(d["probabilities"][k]) for k in keys)
                        out.append(Sample(rid, name, "choice", probs, keys.index(g)))
                elif d.get("probability") is not None:  # noul per chunk (chunk_relevance)
                    p = float(d["probability"])
                    out.append(Sample(rid, name, "noul", noul_distribution(p), 0 if g == "relevant" else 1))
            continue
        if res.get("answer") is not None:
            if gold.get("answer") is not None and not gold.get("unknown"):
                s = _typed_sample(rid, name, res["answer"], gold["answer"])
                if s is not None:
                    out.append(s)
            continue
        yes_no = res.get("probabilities") or {}
        passed = (gold.get("passed") or {}).get(name)
        if details is None and res.get("legend") is not None and isinstance(passed, bool):  # a rubric's score
            levels = _level_distribution(yes_no)
            if levels is not None:
                version = str(res.get("version") or "")
                yes_no_score = noul_distribution(rubric_score(levels))
                out.append(Sample(rid, name, "noul", yes_no_score, 0 if passed else 1, False, True, version, levels))
            continue
        if details is None and res.get("legend") is None and set(yes_no) == {"yes", "no"} and isinstance(passed, bool):
            p = float(yes_no["yes"])
            contrast = res.get("x_p_yes_without_context") is not None
            version = str(res.get("version") or "")
            out.append(Sample(rid, name, "noul", noul_distribution(p), 0 if passed else 1, contrast, True, version))
    return out


def samples_from_rows(rows: Iterable[Mapping[str, Any]]) -> list[Sample]:
    """Every labelled distribution of ``rows``, in row order."""
    return [s for row in rows for s in samples_from_row(row)]


def sample_arrays(samples: Sequence[Sample], *, top_label: bool = False) -> dict[str, np.ndarray]:
    """Per-sample terms of :func:`sample_metrics`, so that resampled metrics are means over them.

    Returns ``{"nll", "brier", "hit", "score", "truth"}``, each of shape ``(N,)``: ``score`` and
    ``truth`` are what ECE and AUROC use (two options: ``p_0`` and "gold is option 0"; more:
    the top-label confidence and ``hit``).

    With ``top_label`` every sample is measured as a multi-class one (multi-class Brier, top-label
    confidence and hit), so choice questions of 2 and of more options can be pooled.

    Raises:
        ValueError: two-option samples mixed with samples of more options (without ``top_label``).
    """
    counts = {len(s.probs) for s in samples}
    if 2 in counts and len(counts) > 1 and not top_label:
        raise ValueError(f"samples mix option counts {sorted(counts)}; measure two-option samples apart")
    nlls, briers, hits, conf = [], [], [], []
    for s in samples:
        p = np.asarray(s.probs, dtype=float)  # (K,)
        y = np.zeros_like(p)
        y[s.gold] = 1.0
        nlls.append(-math.log(min(1.0, max(1e-12, p[s.gold]))))
        briers.append((p[0] - y[0]) ** 2 if len(p) == 2 and not top_label else float(((p - y) ** 2).sum()))
        hits.append(int(p.argmax()) == s.gold)
        conf.append(float(p.max()))
    if counts == {2} and not top_label:
        scores, truth = [s.probs[0] for s in samples], [s.gold == 0 for s in samples]
    else:
        scores, truth = conf, hits
    return {
        "nll": np.asarray(nlls, dtype=float),
        "brier": np.asarray(briers, dtype=float),
        "hit": np.asarray(hits, dtype=bool),
        "score": np.asarray(scores, dtype=float),
        "truth": np.asarray(truth, dtype=bool),
    }


def sample_metrics(samples: Sequence[Sample]) -> dict[str, float | int | None]:
    """``n``, ``accuracy``, ``nll``, ``brier``, ``ece``, ``auroc`` of samples (see the module docstring).

    Two-option samples may not be pooled with others; choice questions with different option
    counts (all above two) are pooled: multi-class Brier and top-label ECE are defined per sample.

    Raises:
        ValueError: two-option samples mixed with samples of more options.
    """
    if not samples:
        return {"n": 0, "accuracy": None, "nll": None, "brier": None, "ece": None, "auroc": None}
    arr = sample_arrays(samples)
    return {
        "n": len(samples),
        "accuracy": float(arr["hit"].mean()),
        "nll": float(arr["nll"].mean()),
        "brier": float(arr["brier"].mean()),
        "ece": expected_calibration_error(arr["score"].tolist(), arr["truth"].tolist()),
        "auroc": auroc(arr["truth"], arr["score"]),
    }


# -- metrics with intervals --------------------------------------------------------------------


def auroc(truth: Sequence[bool] | np.ndarray, scores: Sequence[float] | np.ndarray) -> float | None:
    """Area under the ROC curve of ``scores`` for ``truth`` (ties count 1/2); None for one class.

    The Mann-Whitney form ``(sum of positive ranks - n+(n+ + 1)/2) / (n+ n-)``: equal to
    scikit-learn's ``roc_auc_score`` (tested) and faster (0.3 ms against 7 ms for 300 items on
    this project's shared CPU), which matters inside 1000 bootstrap draws per figure.
    """
    y = np.asarray(truth, dtype=bool)
    n_pos = int(y.sum())
    n_neg = len(y) - n_pos
    if n_pos == 0 or n_neg == 0:
        return None
    ranks = rankdata(np.asarray(scores, dtype=float))  # (N,) average ranks for ties
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def bootstrap_interval(
    statistic: Callable[[np.ndarray], float | None],
    groups: Sequence[str],
    *,
    resamples: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> dict[str, float | int] | None:
    """Percentile bootstrap interval of ``statistic`` over resampled source items.

    Args:
        statistic: maps an index array into the units (rows, chunks, pairs) to a value, or to
            None / NaN where undefined for that draw.
        groups: one source-item label per unit (:func:`item_group`); a draw takes as many
            groups as there are, with replacement, and every unit of each drawn group.
        resamples: draws (seeded: ``numpy.random.default_rng(seed)``).
        level: coverage of the interval.

    Returns:
        ``{"lo", "hi", "resamples"}`` (the number of draws where the statistic was defined),
        or None when fewer than half were (or there are no units).
    """
    labels, inverse = np.unique(np.asarray(groups, dtype=object).astype(str), return_inverse=True)
    if len(labels) == 0:
        return None
    members = [np.flatnonzero(inverse == g) for g in range(len(labels))]
    rng = np.random.default_rng(seed)
    values = []
    for _ in range(resamples):
        picks = rng.integers(len(labels), size=len(labels))
        v = statistic(np.concatenate([members[g] for g in picks]))
        if v is not None and math.isfinite(v):
            values.append(v)
    if len(values) < resamples / 2:
        return None
    lo, hi = np.percentile(values, [50 * (1 - level), 50 * (1 + level)])
    return {"lo": float(lo), "hi": float(hi), "resamples": len(values)}


def length_baseline_auroc(truth: Sequence[bool], lengths: Sequence[float]) -> tuple[float, str] | None:
    """The length baseline in its better direction: ``(max(a, 1 - a), direction)``.

    ``a`` is the AUROC of the text length as a score for ``truth`` ("the longer text passes");
    the direction is ``"longer"`` when ``a >= 0.5``, else ``"shorter"`` (value ``1 - a``). Choosing
    the direction on the data being measured makes the baseline a little optimistic, which is
    the safe side for a claim that a judge beats it. None when ``truth`` has one class.
    """
    a = auroc(truth, lengths)
    if a is None:
        return None
    return (a, "longer") if a >= 0.5 else (1.0 - a, "shorter")


def length_baseline_pairwise(pairs: Sequence[tuple[float, float]]) -> tuple[float, str] | None:
    """Pairwise length baseline in its better direction, from ``(preferred, other)`` lengths.

    ``s`` = share of pairs whose preferred text is the shorter (ties 1/2); returns
    ``(s, "shorter")`` when ``s >= 0.5``, else ``(1 - s, "longer")``. None without pairs.
    """
    if not pairs:
        return None
    shorter = float(np.mean([1.0 if a < b else 0.5 if a == b else 0.0 for a, b in pairs]))
    return (shorter, "shorter") if shorter >= 0.5 else (1.0 - shorter, "longer")
