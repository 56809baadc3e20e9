"""Calibration fitting and its report: split by source item, fit, refuse what does not help.

The logic behind ``logitjudge calibrate`` (the command: :mod:`logitjudge.cli.calibrate`).

::

    # rows in the shared data row shape: the model is run on them first (uncalibrated)
    logitjudge calibrate ../shared/data/vitaminc/dev.jsonl --out calib.json --report reliability.png
    # our result rows with gold (``logitjudge evaluate --out``), or benchmarks/quality/quality.py JSON files
    logitjudge calibrate results.jsonl quality-smollm2-135m-instruct.json --out calib.json
    # evaluator scalings only, on top of the shipped file's buckets (raw runs of the same engine)
    logitjudge calibrate quality-...-halueval_qa_recall_derived-raw.json --base shipped --out calib.json

Steps:

1. read every labelled distribution (:mod:`logitjudge.rubrics.samples`);
2. split by **source item** (:func:`~logitjudge.rubrics.samples.item_group`: the right and the
   hallucinated answer of one question, the questions of one case, stay on one side; sklearn
   ``GroupShuffleSplit``, seeded) into a fitting part and a held-out part (``--holdout``, the
   share of source items held out, default 0.5);
3. fit per bucket on the fitting part (:func:`logitjudge.engine.calibration.fit`), which keeps a
   scaling only when it lowers the cross-validated NLL; contrast scores (faithfulness v2) and
   rubric scores (context_recall) are not one engine answer and take no part in it. Then, on top
   of the buckets kept, a scaling of each ``probability`` and ``rubric`` evaluator's score
   (:func:`fit_evaluators`: Platt scaling; for a contrast or rubric score the only scaling that
   can move its threshold crossing), kept on the same terms. With ``--base`` (a calibration file,
   or ``shipped``) step 3 keeps the base's buckets and fits only these evaluator scalings;
4. **refuse** every scaling that does not lower the NLL of the held-out samples it applies to by
   :data:`~logitjudge.engine.calibration.MIN_NLL_GAIN` (that bucket stays uncalibrated); when
   nothing is left the command writes no file and exits 1, saying so;
5. report n, accuracy, AUROC, NLL, Brier and ECE (10 bins) on the held-out part before and after
   the fitted scaling, per bucket and per data set x evaluator, and on **imbalanced slices** of
   the two-option buckets (80/20 and 20/80 of the gold answer, subsampled from the held-out
   part): a temperature that flattens every P(yes) to about 0.5 looks well calibrated on a
   50/50 sample and is wrong on traffic with another base rate, which these rows show;
6. draw reliability diagrams (``--report``, PNG).

What the file is fitted for comes from the engine that produced the distributions: the quality
JSON's or the results' ``.summary.json`` ``environment.engine``, else the model loaded from the
model flags. Distributions produced under a calibration are refused (fit on raw ones).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from logitjudge.engine.answers import noul_distribution
from logitjudge.engine.calibration import (
    EVALUATOR_BIAS_RANGE,
    MIN_NLL_GAIN,
    MIN_SAMPLES,
    Calibration,
    LabelledDistribution,
    Scaling,
    bucket_of,
    evaluator_key,
    fit,
    fit_checked,
    nll_of,
)
from logitjudge.rubrics.aggregate import ece_noise_floor
from logitjudge.rubrics.samples import Sample, item_group, sample_arrays, sample_metrics
from logitjudge.rubrics.scoring import rubric_score

__all__ = [
    "split",
    "fit_and_report",
    "refuse_worse",
    "imbalanced_slice",
    "reliability_plot",
]

FLAT_TEMPERATURE = 5.0
"""A temperature at or above this squeezes a yes/no P = 0.8 into 0.57 or less: reported as
flattening (the model's probabilities carry little about the label)."""
IMBALANCED_SHARES = (0.8, 0.2)
"""Shares of gold option 0 (yes) in the imbalanced held-out slices of two-option buckets."""


def split(samples: Sequence[Sample], fraction: float, seed: int = 0) -> tuple[list[Sample], list[Sample]]:
    """(fitting part, held-out part) by source item: every sample of one
    :func:`~logitjudge.rubrics.samples.item_group` falls on the same side.

    ``fraction`` of the groups is held out (sklearn ``GroupShuffleSplit``, ``random_state=seed``);
    0 holds nothing out, 1 everything. Order within each part is the input order.
    """
    if not samples or fraction <= 0:
        return list(samples), []
    if fraction >= 1:
        return [], list(samples)
    from sklearn.model_selection import GroupShuffleSplit

    groups = [item_group(s.id) for s in samples]
    if len(set(groups)) < 2:
        return list(samples), []
    splitter = GroupShuffleSplit(n_splits=1, test_size=fraction, random_state=seed)
    _, test = next(splitter.split(np.zeros((len(samples), 1)), groups=groups))
    held_idx = set(test.tolist())
    return (
        [s for i, s in enumerate(samples) if i not in held_idx],
        [s for i, s in enumerate(samples) if i in held_idx],
    )


def imbalanced_slice(samples: Sequence[Sample], share: float, seed: int = 0) -> list[Sample]:
    """The largest subsample of two-option ``samples`` with ``share`` of them gold option 0.

    The class in excess is subsampled at random (``numpy.random.default_rng(seed)``); the
    other is kept whole. Empty when a class is missing.
    """
    pos = [s for s in samples if s.gold == 0]
    neg = [s for s in samples if s.gold != 0]
    if not pos or not neg or not 0 < share < 1:
        return []
    n_pos = min(len(pos), math.floor(len(neg) * share / (1 - share) + 1e-9))  # 1e-9: 0.2 / 0.8 * 100 < 25
    n_neg = min(len(neg), math.floor(n_pos * (1 - share) / share + 1e-9))
    if n_pos == 0 or n_neg == 0:
        return []
    rng = np.random.default_rng(seed)
    keep = {id(pos[i]) for i in rng.choice(len(pos), n_pos, replace=False)}
    keep |= {id(neg[i]) for i in rng.choice(len(neg), n_neg, replace=False)}
    return [s for s in samples if id(s) in keep]


def _set_of(item_id: str) -> str:
    return item_id.split(":", 1)[0] if ":" in item_id else "-"


def _as_fit(samples: Sequence[Sample]) -> list[LabelledDistribution]:
    return [LabelledDistribution(s.type, s.probs, s.gold, item_group(s.id)) for s in samples]


def _engine_answer(s: Sample) -> bool:
    """The sample is one engine answer (not a contrast score, not a rubric's score)."""
    return not s.contrast and s.levels is None


def _as_answer(s: Sample) -> Sample:
    """The sample as the engine answers it: a contrast score is two noul answers, a rubric's
    score one score answer over its levels."""
    if s.levels is not None:
        return replace(s, type="score", probs=s.levels, gold=0)
    return replace(s, type="noul", probs=(0.5, 0.5)) if s.contrast else s


def _applied_key(cal: Calibration, s: Sample) -> str | None:
    """The scaling key :meth:`Calibration.scaling_for` resolves for ``s`` (None: left as is)."""
    own = bucket_of(s.type, len(s.probs))
    scaling = cal.scalings.get(own)
    if scaling is not None and (scaling.bias is None or len(scaling.bias) == len(s.probs)):
        return own
    return f"{s.type}:*" if f"{s.type}:*" in cal.scalings else None


def refuse_worse(cal: Calibration, held: Sequence[Sample]) -> tuple[Calibration, dict[str, str]]:
    """Drop every scaling that does not lower the NLL of the held-out samples it applies to.

    A scaling must take at least :data:`MIN_NLL_GAIN` nats per sample off; dropping a bucket's
    own scaling hands its samples to the type-wide one, so this repeats until nothing changes.
    A scaling that applies to no held-out sample is kept (its cross-validation stands).
    Contrast scores count as the engine makes them under the scaling (:func:`_engine_view`):
    a ``noul:2`` temperature fitted on typed questions also sharpens or flattens every contrast
    score, and must not make those worse in sum.

    Returns:
        The calibration left (possibly with no scalings: the identity) and ``{key: reason}``.
    """
    refused: dict[str, str] = {}
    scalings = dict(cal.scalings)
    while True:
        current = Calibration(cal.fitted_for, scalings, cal.meta)
        applied: dict[str, list[Sample]] = defaultdict(list)
        for s in held:
            if (key := _applied_key(current, _as_answer(s))) is not None:
                applied[key].append(s)
        worse = {}
        for key, group in applied.items():
            only = Calibration(cal.fitted_for, {key: scalings[key]})
            before, after = nll_of(_as_fit(group)), nll_of(_as_fit(_calibrated(only, group)))
            if after > before - MIN_NLL_GAIN:
                worse[key] = f"held-out NLL {before:.4f} -> {after:.4f} on {len(group)} samples: not lower"
        if not worse:
            return current, refused
        refused.update(worse)
        for key in worse:
            del scalings[key]


def _engine_view(cal: Calibration, s: Sample) -> tuple[float, ...]:
    """The distribution ``s`` becomes under ``cal``'s engine buckets, as the engine computes it.

    A contrast score ``sigmoid(logit p - logit p0)`` of two noul answers, each scaled by the
    bucket's ``softmax(log p / T + b)``, becomes ``sigmoid((logit p - logit p0) / T)``: the
    temperature alone (the bias cancels in the difference). A rubric's score is recomputed,
    ``E[level] / (L-1)``, from its levels as the score bucket scales them.
    """
    if s.levels is not None:
        return noul_distribution(rubric_score(cal.apply("score", s.levels)))
    if not s.contrast:
        return tuple(cal.apply(s.type, s.probs))
    scaling = cal.scaling_for("noul", 2)
    return s.probs if scaling is None else tuple(Scaling(scaling.temperature).apply(s.probs))


def _calibrated(cal: Calibration, samples: Sequence[Sample]) -> list[Sample]:
    """``samples`` as the engine buckets, then the evaluator scalings, of ``cal`` make them."""
    out = []
    for s in samples:
        probs = _engine_view(cal, s)
        scaling = cal.for_evaluator(s.source, s.version) if s.score_level else None
        if scaling is not None:
            probs = tuple(scaling.apply(probs))
        out.append(replace(s, probs=probs))
    return out


def fit_evaluators(
    cal: Calibration, fit_part: Sequence[Sample], held: Sequence[Sample]
) -> tuple[dict[str, Scaling], dict[str, Scaling], dict[str, Any], dict[str, str]]:
    """Fit a scaling of each ``probability`` or ``rubric`` evaluator's score on top of ``cal``'s buckets.

    Per evaluator and version (:attr:`Sample.score_level` samples, grouped by
    :func:`~logitjudge.engine.calibration.evaluator_key` of ``source`` and ``version``) with at least
    :data:`~logitjudge.engine.calibration.MIN_SAMPLES` fitting samples: temperature and bias
    (Platt scaling, see :mod:`logitjudge.engine.calibration`), kept only when it lowers the
    cross-validated NLL of the fitting part and the NLL of the held-out part by
    :data:`~logitjudge.engine.calibration.MIN_NLL_GAIN`.

    Returns:
        ``(fitted, kept, records, refused)``: the scalings by evaluator that passed the
        cross-validation, those that also lowered the held-out NLL, each fit's record, and
        ``{"evaluator:<name>@<version>": reason}`` for every one refused. An evaluator with no
        held-out sample keeps its cross-validated scaling untested on held-out data (as a bucket
        does).
    """
    by_source: dict[str, list[Sample]] = defaultdict(list)
    for s in _calibrated(cal, [s for s in fit_part if s.score_level]):
        by_source[evaluator_key(s.source, s.version)].append(s)
    held_by: dict[str, list[Sample]] = defaultdict(list)
    for s in _calibrated(cal, [s for s in held if s.score_level]):
        held_by[evaluator_key(s.source, s.version)].append(s)
    fitted: dict[str, Scaling] = {}
    kept: dict[str, Scaling] = {}
    records: dict[str, Any] = {}
    refused: dict[str, str] = {}
    for name, group in sorted(by_source.items()):
        if len(group) < MIN_SAMPLES:
            continue
        key = f"evaluator:{name}"
        scaling, records[key] = fit_checked(_as_fit(group), allow_bias=True, bias_range=EVALUATOR_BIAS_RANGE)
        if scaling is None:
            refused[key] = records[key]["refused"]
            continue
        fitted[name] = scaling
        h = _as_fit(held_by.get(name, []))
        if h:
            before, after = nll_of(h), nll_of(h, scaling)
            if after > before - MIN_NLL_GAIN:
                refused[key] = f"held-out NLL {before:.4f} -> {after:.4f} on {len(h)} samples: not lower"
                continue
        kept[name] = scaling
    return fitted, kept, records, refused


def _compare(groups: Mapping[str, list[Sample]], fitted: Calibration, kept: Calibration) -> dict[str, dict[str, Any]]:
    """Per group: metrics before, after the fitted scalings, whether they were kept, and the
    ECE a perfectly calibrated predictor with the "after" scores would show at this n
    (``ece_floor``, :func:`~logitjudge.rubrics.aggregate.ece_noise_floor`)."""
    out = {}
    for key, group in groups.items():
        keys = set().union(*(_applied_keys(fitted, s) for s in group)) if group else set()
        after = _calibrated(fitted, group)
        out[key] = {
            "before": sample_metrics(group),
            "after": sample_metrics(after),
            "ece_floor": ece_noise_floor(sample_arrays(after)["score"]) if after else None,
            "scalings": sorted(keys),
            "kept": bool(keys) and keys <= set(kept.scalings) | {f"evaluator:{k}" for k in kept.evaluators},
        }
    return out


def _applied_keys(cal: Calibration, s: Sample) -> set[str]:
    """Every scaling of ``cal`` that reaches ``s``: its engine bucket, its evaluator's scaling."""
    engine = _applied_key(cal, _as_answer(s))
    keys = {engine} if engine is not None else set()
    if s.score_level and cal.for_evaluator(s.source, s.version) is not None:
        keys.add(f"evaluator:{evaluator_key(s.source, s.version)}")
    return keys


def _flattening(fitted: Calibration) -> dict[str, str]:
    """Scalings that squeeze every distribution towards uniform (see FLAT_TEMPERATURE)."""
    out = {}
    for key, s in fitted.scalings.items():
        if s.temperature < FLAT_TEMPERATURE:
            continue
        count = key.split(":")[1]
        k = int(count) if count.isdigit() else 2 if key.startswith("noul") else None
        if k is None:  # "choice:*", "score:11+": option counts vary
            what = " every distribution towards uniform"
        else:
            top = Scaling(s.temperature).apply([0.8] + [0.2 / (k - 1)] * (k - 1))[0]
            what = f": a top probability of 0.80 becomes {top:.2f} (uniform: {1 / k:.2f})"
        out[key] = (
            f"T = {s.temperature:.2f}{' (clamped)' if s.clamped else ''} flattens{what}; the gain is the "
            "sample's base rate, not information (see AUROC" + (" and the imbalanced slices)" if k == 2 else ")")
        )
    return out


def fit_and_report(
    samples: Sequence[Sample],
    fitted_for: Mapping[str, Any],
    *,
    holdout: float = 0.5,
    seed: int = 0,
    meta: Mapping[str, Any] | None = None,
    types: Collection[str] | None = None,
    base: Calibration | None = None,
) -> tuple[Calibration, dict[str, Any]]:
    """Fit on the fitting part, refuse what does not help the held-out part, report both.

    With ``base`` (``logitjudge calibrate --base``), no engine bucket is fitted: ``base``'s
    buckets are kept as they are (every figure measured under them stays valid) and only
    evaluator scalings are fitted on top of them; an evaluator scaling kept replaces ``base``'s
    for the same evaluator, the others of ``base`` stay. The file's ``meta`` is ``base``'s, with
    this fit appended to ``meta["evaluator_refits"]`` (``meta``, ``base``: its digest, ``report``).

    ``types`` (``noul``, ``choice``, ``score``; default all) limits the engine buckets fitted to
    those question types; the others stay unscaled, and are still reported. An engine bucket
    scales every question of its type and option count, the evaluators' rubric questions
    included, so a bucket fitted on typed questions where the model is at chance (it "gains" by
    flattening them) also flattens an evaluator's score that does carry signal.

    Returns:
        The calibration to write (only the scalings kept; none = the identity; its
        ``meta.report`` holds the report) and the report: ``by_bucket``, ``by_set``
        (``"<set> <evaluator> <bucket>"``) and ``imbalanced`` (``"<bucket> <share>/<rest>"``) ->
        ``{"before", "after" (with the fitted scaling), "scalings", "kept"}``; ``fits`` (each
        candidate's fit record), ``refused`` (``{key: reason}``, cross-validation or held-out)
        and ``flattening`` (``{key: warning}``).
    """
    fit_part, held = split(samples, holdout, seed)
    if base is None:
        # engine buckets: one engine answer per sample (a contrast score is two: its evaluator's)
        engine = [s for s in fit_part if _engine_answer(s) and (types is None or s.type in types)]
        fitted = fit(_as_fit(engine), fitted_for)
        kept, refused_held = refuse_worse(fitted, held)
        refused = {k: r["refused"] for k, r in fitted.meta["fits"].items() if r.get("refused")}
        refused.update(refused_held)
    else:  # the base's buckets as they are
        fitted = kept = Calibration(base.fitted_for, dict(base.scalings), {"fits": {}})
        refused = {}
    fitted_evaluators, kept_evaluators, evaluator_fits, evaluator_refused = fit_evaluators(kept, fit_part, held)
    refused.update(evaluator_refused)
    if base is not None:
        fitted_evaluators = {**base.evaluators, **fitted_evaluators}
        kept_evaluators = {**base.evaluators, **kept_evaluators}
    # "after" in the report: the engine buckets as fitted, the evaluator scalings fitted over the kept ones
    fitted = replace(fitted, evaluators=fitted_evaluators)
    kept = replace(kept, evaluators=kept_evaluators)
    by_bucket: dict[str, list[Sample]] = defaultdict(list)
    by_set: dict[str, list[Sample]] = defaultdict(list)
    for s in held:
        b = bucket_of(s.type, len(s.probs))
        by_bucket[b].append(s)
        by_set[f"{_set_of(s.id)} {s.source} {b}"].append(s)
    imbalanced: dict[str, list[Sample]] = {}
    for b, group in sorted(by_bucket.items()):
        if b.endswith(":2"):
            for share in IMBALANCED_SHARES:
                sliced = imbalanced_slice(group, share, seed)
                if sliced:
                    imbalanced[f"{b} {round(100 * share)}/{round(100 * (1 - share))}"] = sliced
    report = {
        "holdout": holdout,
        "seed": seed,
        "split": "by source item (GroupShuffleSplit)",
        "n_fit": len(fit_part),
        "n_holdout": len(held),
        "groups_fit": len({item_group(s.id) for s in fit_part}),
        "groups_holdout": len({item_group(s.id) for s in held}),
        "by_bucket": _compare(dict(sorted(by_bucket.items())), fitted, kept),
        "by_set": _compare(dict(sorted(by_set.items())), fitted, kept),
        "imbalanced": _compare(imbalanced, fitted, kept),
        "fits": {**fitted.meta["fits"], **evaluator_fits},
        "refused": refused,
        "flattening": _flattening(fitted),
    }
    if base is None:
        out_meta = {**(meta or {}), "report": report}
    else:
        refit = {**(meta or {}), "base": base.digest, "report": report}
        out_meta = {**base.meta, "evaluator_refits": [*base.meta.get("evaluator_refits", []), refit]}
    cal = Calibration(kept.fitted_for, kept.scalings, out_meta, kept.evaluators)
    return cal, report


def reliability_plot(samples: Sequence[Sample], cal: Calibration, path: str | Path, *, title: str = "") -> None:
    """Reliability diagrams of held-out samples, one panel per bucket: before vs after.

    Two options: P(option 0) against its frequency; more: top-label confidence against accuracy.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from logitjudge.rubrics.aggregate import reliability_bins

    buckets: dict[str, list[Sample]] = defaultdict(list)
    for s in samples:
        buckets[bucket_of(s.type, len(s.probs))].append(s)
    names = sorted(buckets)
    fig, axes = plt.subplots(1, max(1, len(names)), figsize=(4 * max(1, len(names)), 4), squeeze=False)
    for ax, name in zip(axes[0], names):
        for label, group, style in (
            ("before", buckets[name], "o-"),
            ("after", _calibrated(cal, buckets[name]), "s-"),
        ):
            if len(group[0].probs) == 2:
                conf = [s.probs[0] for s in group]
                truth = [s.gold == 0 for s in group]
            else:
                conf = [max(s.probs) for s in group]
                truth = [max(range(len(s.probs)), key=s.probs.__getitem__) == s.gold for s in group]
            bins = reliability_bins(conf, truth)
            ece = sample_metrics(group)["ece"]
            ax.plot(
                [b["mean_score"] for b in bins],
                [b["frac_true"] for b in bins],
                style,
                label=f"{label} (ECE {ece:.3f})",
            )
        ax.plot([0, 1], [0, 1], "k:", lw=1)
        ax.set(
            xlim=(0, 1),
            ylim=(0, 1),
            title=f"{name} (n={len(buckets[name])} held out)",
            xlabel="predicted probability" if name.endswith(":2") else "top-label confidence",
            ylabel="observed frequency",
        )
        ax.legend(loc="upper left", fontsize=8)
    fig.suptitle(title or "reliability on the held-out part")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
