"""Fitting a head on the features: scikit-learn, standardised features, multinomial logistic
regression (L2).

The layer (each tapped layer alone, or all of them concatenated) and the inverse regularisation
``C`` are chosen by grouped K-fold cross-validation on the training part (mean log loss; rows of
one group, e.g. one claim's edits or one premise, never straddle folds); a held-out part
(``holdout`` of the groups, seeded) is never seen by the choice or the fit and gives the report:
accuracy, macro-F1, predicted vs gold shares, log loss, with a cluster-bootstrap interval, beside
the majority class and the evaluator's zero-shot label readout on the same rows. The
standardisation is folded into the saved weights (``W' = W / s``, ``b' = b - W' m``), so the head
is one linear map.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from logitjudge.engine.heads import Head
from logitjudge.fit.examples import Example
from logitjudge.fit.features import Features
from logitjudge.rubrics.definitions import EvaluatorDef

DEFAULT_C_GRID = (0.003, 0.01, 0.03, 0.1)
"""Inverse L2 strengths tried by cross-validation (on standardised features of ~1.5k dims)."""


def _columns(features: Features, choice: str) -> np.ndarray:
    """(N, D) the features of a layer choice: ``"L<l>"`` one layer, ``"all"`` every tapped one."""
    if choice == "all":
        return features.states.reshape(len(features.states), -1)
    return features.states[:, features.layers.index(int(choice[1:])), :]


def _model(c: float, balance: bool = False) -> Any:
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    weight = "balanced" if balance else None
    return make_pipeline(StandardScaler(), LogisticRegression(C=c, max_iter=3000, class_weight=weight))


def _fold_losses(
    X: np.ndarray,
    y: np.ndarray,
    train: np.ndarray,
    valid: np.ndarray,
    c_grid: Sequence[float],
    balance: bool = False,
) -> dict[float, float]:
    """Validation log loss of one CV fold for every ``C`` of ``c_grid``: the model of
    :func:`_model`, fitted along the grid from the strongest regularisation up, each fit starting
    from the previous one's coefficients (the same convex optimum, reached in fewer iterations).
    With ``balance``, the fit and the loss weigh each class by the inverse of its share."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import log_loss
    from sklearn.preprocessing import StandardScaler
    from sklearn.utils.class_weight import compute_sample_weight

    scaler = StandardScaler().fit(X[train])
    x_train, x_valid = scaler.transform(X[train]), scaler.transform(X[valid])
    lr = LogisticRegression(max_iter=3000, warm_start=True, class_weight="balanced" if balance else None)
    weight = compute_sample_weight("balanced", y[valid]) if balance else None
    out = {}
    for c in sorted(c_grid):
        lr.set_params(C=c).fit(x_train, y[train])
        out[c] = float(log_loss(y[valid], lr.predict_proba(x_valid), labels=lr.classes_, sample_weight=weight))
    return out


def classification_report(
    gold: Sequence[str], probs: np.ndarray, options: Sequence[str], groups: Sequence[str], *, seed: int = 0
) -> dict[str, Any]:
    """Accuracy (with a 95% cluster-bootstrap interval over ``groups``), macro-F1, log loss,
    per-option F1 and the gold and predicted shares of ``probs`` (N, C in ``options`` order); for
    two options also the AUROC of the first option's probability (a noul: P(true)) with its
    interval (``auroc``, ``auroc_interval``; ``None`` when the rows hold one class)."""
    from sklearn.metrics import accuracy_score, f1_score, log_loss

    from logitjudge.rubrics.samples import auroc, bootstrap_interval

    probs = np.clip(np.asarray(probs, dtype=np.float64), 1e-9, 1.0)
    probs = probs / probs.sum(1, keepdims=True)
    pred = [options[k] for k in probs.argmax(1)]
    hit = np.array([p == g for p, g in zip(pred, gold)], dtype=float)
    found = bootstrap_interval(lambda i: float(hit[i].mean()), list(groups), seed=seed)
    interval = (found["lo"], found["hi"]) if found else None
    ranking: dict[str, Any] = {}
    if len(options) == 2:
        first = np.array([g == options[0] for g in gold])
        area = auroc(first, probs[:, 0])
        found = bootstrap_interval(lambda i: auroc(first[i], probs[i, 0]), list(groups), seed=seed)
        ranking = {"auroc": area, "auroc_interval": [found["lo"], found["hi"]] if found and area is not None else None}
    return {
        "rows": len(gold),
        "accuracy": float(accuracy_score(gold, pred)),
        "accuracy_interval": list(interval) if interval else None,
        "macro_f1": float(f1_score(gold, pred, labels=list(options), average="macro", zero_division=0)),
        "f1": dict(zip(options, map(float, f1_score(gold, pred, labels=list(options), average=None, zero_division=0)))),
        # scikit-learn reads the columns in sorted label order
        "log_loss": float(log_loss(gold, probs[:, np.argsort(list(options))], labels=sorted(options))),
        "gold_share": {o: float(np.mean([g == o for g in gold])) for o in options},
        "predicted_share": {o: float(np.mean([p == o for p in pred])) for o in options},
        **ranking,
    }


@dataclass
class FitResult:
    """A fitted head and what was measured on the way."""

    head: Head
    layer_choice: str
    c: float
    cv: dict[str, float] = field(default_factory=dict)
    """Mean grouped-CV log loss per ``"<layer choice> C=<c>"``."""
    held_out: dict[str, Any] = field(default_factory=dict)
    """:func:`classification_report` of the head on the held-out rows, with ``majority`` and
    ``zero_shot`` (the label readout's) reports beside it, and ``per_source``."""
    held_out_index: tuple[int, ...] = ()
    """The held-out examples' indices in the examples given (to compare other readouts on them)."""


def fit_head(
    defn: EvaluatorDef,
    examples: Sequence[Example],
    features: Features,
    engine: Mapping[str, Any],
    *,
    holdout: float = 0.2,
    folds: int = 5,
    c_grid: Sequence[float] = DEFAULT_C_GRID,
    layer_choices: Sequence[str] | None = None,
    seed: int = 0,
    n_jobs: int = -1,
    balance: bool = False,
) -> FitResult:
    """Choose the layer and ``C`` by grouped CV, fit on the training part, report the held-out part.

    Args:
        engine: the ``describe()`` of the engine the features came from (the head's binding).
        holdout: share of the groups held out (0: none; the report is then empty).
        layer_choices: ``"L<l>"`` per tapped layer and ``"all"`` (default: each layer alone and all).
        n_jobs: processes for the cross-validation (joblib; -1: one per core).
        balance: weigh each class by the inverse of its share of the training examples
            (scikit-learn's ``class_weight="balanced"``), and each validation example of the CV
            log loss by the inverse of its class's share in that fold, so the head's
            probabilities assume equal priors and 0.5 does not assume the training set's share
            of each option.

    Raises:
        ValueError: an option without training rows, or too few groups for ``folds``.
    """
    from sklearn.model_selection import GroupShuffleSplit

    question = examples[0].question
    options = [str(o.name) for o in question.options]
    y = np.array([ex.label for ex in examples])
    groups = np.array([ex.group for ex in examples])
    idx = np.arange(len(examples))
    if holdout > 0:
        train, test = next(GroupShuffleSplit(n_splits=1, test_size=holdout, random_state=seed).split(idx, y, groups))
    else:
        train, test = idx, idx[:0]
    absent = [o for o in options if o not in set(y[train])]
    if absent:
        raise ValueError(f"no training row is labelled {absent}: every option needs examples")
    choice, c, cv = _choose_by_cv(features, y, train, groups[train], folds, c_grid, layer_choices, n_jobs, balance)
    X = _columns(features, choice)
    model = _model(c, balance).fit(X[train], y[train])
    scaler, lr = model[0], model[1]
    coef, intercept = lr.coef_, lr.intercept_
    if coef.shape[0] == 1:  # two classes: scikit-learn keeps one row, for classes_[1]; softmax([0, z]) = sigmoid(z)
        coef, intercept = np.vstack([np.zeros_like(coef), coef]), np.concatenate([[0.0], intercept])
    order = [list(lr.classes_).index(o) for o in options]
    w = coef[order] / scaler.scale_  # (C, D)
    b = intercept[order] - w @ scaler.mean_
    import torch

    layers = features.layers if choice == "all" else (int(choice[1:]),)
    meta = {
        "evaluator": f"{defn.name}@{defn.version}",
        "trained": {
            "rows": int(len(train)),
            "held_out_rows": int(len(test)),
            "sources": sorted({ex.source for ex in examples}),
            "c": c,
            "layer_choice": choice,
            "cv_folds": folds,
            "seed": seed,
            "balanced": balance,
        },
    }
    head = Head(
        name=defn.head.name if defn.head is not None else defn.name,
        question_type=question.type,
        options=tuple(options),
        layers=tuple(layers),
        weights=((torch.tensor(w, dtype=torch.float32), torch.tensor(b, dtype=torch.float32)),),
        binding={
            "model": engine.get("model"),
            "fingerprint": engine.get("fingerprint"),
            "prompt_version": engine.get("prompt_version"),
        },
        meta=meta,
    )
    held = _held_out(head, X, y, train, test, groups, examples, features, seed) if len(test) else {}
    if held:
        meta["held_out"] = {k: held[k] for k in ("rows", "accuracy", "accuracy_interval", "macro_f1")}
    return FitResult(head, choice, c, cv, held, tuple(int(i) for i in test))


def _choose_by_cv(
    features: Features,
    y: np.ndarray,
    train: np.ndarray,
    groups: np.ndarray,
    folds: int,
    c_grid: Sequence[float],
    layer_choices: Sequence[str] | None,
    n_jobs: int,
    balance: bool = False,
) -> tuple[str, float, dict[str, float]]:
    """The layer choice and ``C`` with the least mean held-out log loss over grouped folds of
    the training rows ``train`` (``groups``: their groups), one joblib job per choice and fold.

    Returns:
        ``(choice, C, {"<choice> C=<C>": mean log loss})``.
    """
    from joblib import Parallel, delayed
    from sklearn.model_selection import GroupKFold

    choices = list(layer_choices or [f"L{x}" for x in features.layers] + (["all"] if len(features.layers) > 1 else []))
    splits = list(GroupKFold(n_splits=folds).split(train, y[train], groups))
    jobs = [(choice, k) for choice in choices for k in range(len(splits))]
    per_fold = Parallel(n_jobs=n_jobs)(
        delayed(_fold_losses)(_columns(features, choice), y, train[tr], train[va], c_grid, balance)
        for choice, (tr, va) in ((choice, splits[k]) for choice, k in jobs)
    )
    cv: dict[str, float] = {}
    for choice in choices:
        losses = [fold for (ch, _), fold in zip(jobs, per_fold) if ch == choice]
        for c in c_grid:
            cv[f"{choice} C={c}"] = float(np.mean([fold[c] for fold in losses]))
    best = min(cv, key=lambda k: cv[k])
    return best.split(" C=")[0], float(best.split(" C=")[1]), cv


def _held_out(
    head: Head,
    X: np.ndarray,
    y: np.ndarray,
    train: np.ndarray,
    test: np.ndarray,
    groups: np.ndarray,
    examples: Sequence[Example],
    features: Features,
    seed: int,
) -> dict[str, Any]:
    """The head's report on the held-out rows ``test``, beside the training majority class and
    the zero-shot label readout, overall and per source (:func:`classification_report`)."""
    import torch

    options = list(head.options)
    probs = head.probabilities(torch.tensor(X[test])).numpy()
    gold, grp = list(y[test]), list(groups[test])
    held = classification_report(gold, probs, options, grp, seed=seed)
    majority = max(options, key=lambda o: float(np.sum(y[train] == o)))
    onehot = np.array([[1.0 if o == majority else 0.0 for o in options] for _ in test])
    held["majority"] = classification_report(gold, onehot * 0.98 + 0.01 / len(options), options, grp, seed=seed)
    held["zero_shot"] = classification_report(gold, features.label_probs[test], options, grp, seed=seed)
    held["per_source"] = {}
    for src in sorted({examples[i].source for i in test}):
        sel = [k for k, i in enumerate(test) if examples[i].source == src]
        held["per_source"][src] = classification_report(
            [gold[k] for k in sel], probs[sel], options, [grp[k] for k in sel], seed=seed
        )
    return held
