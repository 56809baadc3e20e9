"""Fitting trained heads: labelled rows -> the evaluator's questions -> hidden states through the
engine -> a regularised linear map -> a head folder that ``evaluate``/``serve --heads`` load.

::

    examples = head_examples(registry.get("chunk_support"), rows)     # one per chunk with a gold label
    features = extract(engine, examples, layers=(16, 20, 24, 28), cache=".cache/heads")
    result = fit_head(defn, examples, features, out="heads/")          # CV, held-out report, files

**What is fitted.** Each example is one engine request: the state the evaluator asks over (for
``chunk_head`` evaluators the chunk alone, ``"Passage: <chunk>"``) and the evaluator's own
question (:func:`logitjudge.rubrics.questions.head_question`), so the head reads at serving time
exactly the states it was trained on. The features are the hidden states of the tapped layers at
the answer position (:meth:`logitjudge.engine.core.Engine.answer_states`, one packed pass per
batch, nothing generated), cached on disk by the engine's fingerprint, dtype and prompt version,
the layer and the example's content (so a re-run, or a head on other layers already tapped,
reads them back instead of running the model).

**How.** scikit-learn: standardised features, multinomial logistic regression (L2). The layer
(each tapped layer alone, or all of them concatenated) and the inverse regularisation ``C`` are
chosen by grouped K-fold cross-validation on the training part (mean log loss; rows of one group,
e.g. one claim's edits or one premise, never straddle folds); a held-out part (``holdout`` of the
groups, seeded) is never seen by the choice or the fit and gives the report: accuracy, macro-F1,
predicted vs gold shares, log loss, with a cluster-bootstrap interval, beside the majority class
and the evaluator's zero-shot label readout on the same rows. The standardisation is folded into
the saved weights (``W' = W / s``, ``b' = b - W' m``), so the head is one linear map.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from logitjudge.engine.heads import Head
from logitjudge.engine.types import EngineRequest, Question, render_text
from logitjudge.rubrics.api import to_item
from logitjudge.rubrics.definitions import EvaluatorDef

if TYPE_CHECKING:
    from logitjudge.engine.core import Engine

DEFAULT_C_GRID = (0.003, 0.01, 0.03, 0.1)
"""Inverse L2 strengths tried by cross-validation (on standardised features of ~1.5k dims)."""


@dataclass(frozen=True)
class Example:
    """One labelled engine request: a state, the evaluator's question, the gold option.

    Attributes:
        key: ``<row id>#<chunk>``, unique in a fit.
        group: rows of one group stay on one side of every split (a claim's edits, a premise).
        source: the data set the row comes from (per-source figures).
        label: the gold option's name.
    """

    key: str
    group: str
    source: str
    state: Any
    question: Question
    label: str


def _group_of(row: Mapping[str, Any], text: str) -> str:
    """The group of a row: ``meta.case_id`` / ``group`` / ``pairID`` / ``captionID`` / ``uid`` when present,
    else the source item of an id with three or more ``:`` fields (``halueval_qa:12:right``:
    :func:`~logitjudge.rubrics.samples.item_group`), else the text (rows sharing a passage)."""
    meta = row.get("meta") or {}
    for k in ("case_id", "group", "pairID", "captionID", "uid"):
        if isinstance(meta, Mapping) and meta.get(k):
            return f"{k}:{meta[k]}"
    rid = str(row.get("id") or "")
    if rid.count(":") >= 2:
        from logitjudge.rubrics.samples import item_group

        return "item:" + item_group(rid)
    return "text:" + hashlib.sha1(text.encode()).hexdigest()[:16]


def _gold_option(value: Any, question: Question) -> str | None:
    """The option a gold value names: a bool for a noul (``true``/``false``), an option name,
    or a level index (int or its string) for a score; None when it names none."""
    names = [str(o.name) for o in question.options]
    if isinstance(value, bool):
        return "true" if value else "false" if question.type == "noul" else None
    if isinstance(value, int) and question.type == "score":
        value = str(value)
    return str(value) if str(value) in names else None


def head_examples(defn: EvaluatorDef, rows: Iterable[Mapping[str, Any]], *, label_key: str = "label") -> list[Example]:
    """The training examples of the head an evaluator reads.

    - An evaluator whose definition names a ``head``: its scoring kind's labelled questions
      (:meth:`~logitjudge.rubrics.kinds.base.ScoringKind.head_examples`): for ``chunk_head``
      (``chunk_support``) per chunk with a gold label (``gold.per_chunk[i]``, or ``gold.label``
      for a one-chunk row), the chunk as the state and the question about the whole output; for
      ``entity_recall`` (``context_entity_recall``) per entity the rules leave to the model,
      labelled by ``gold.entities`` and ``gold.present``.
    - An evaluator of one question over the whole item (:func:`~logitjudge.rubrics.head_plan.reads_own_head`:
      ``probability`` or ``rubric`` scoring, e.g. ``faithfulness``): the item's state and the
      evaluator's question, labelled by ``gold[label_key]`` (a bool for a yes/no question, an
      option name, or a level index). Rows without that label are skipped.

    Raises:
        ValueError: the evaluator cannot read a head, or a gold label names no option (named).
    """
    from logitjudge.rubrics.head_plan import reads_own_head
    from logitjudge.rubrics.questions import build_questions

    if defn.head is None and not reads_own_head(defn):
        raise ValueError(
            f"{defn.name}@{defn.version} is not read by a trained head (no `head` in its definition, and not one "
            "question over the whole item)"
        )
    from logitjudge.rubrics.kinds import kind_of

    kind = kind_of(defn)
    out: list[Example] = []
    for n, row in enumerate(rows):
        item = to_item(row, index=n)
        gold = row.get("gold") or {}
        source = str(row.get("id", "")).split(":", 1)[0] or "rows"
        rid = row.get("id", n)
        if defn.head is None:
            if not all(item.has(f) for f in defn.required) or not isinstance(gold, Mapping):
                continue
            (question,) = build_questions(defn, item).values()
            label = _gold_option(gold.get(label_key), question)
            if label_key in gold and label is None:
                raise ValueError(f"row {rid!r}: gold.{label_key} = {gold[label_key]!r} names no option")
            if label is not None:
                state = render_text(item.state())
                out.append(Example(f"{rid}", _group_of(row, state), source, item.state(), question, label))
            continue
        if not isinstance(gold, Mapping) or not all(item.has(f) for f in defn.required):
            continue
        try:
            found = kind.head_examples(defn, item, gold) or []
        except ValueError as e:
            raise ValueError(f"row {rid!r}: {e}") from None
        for ex in found:
            group = _group_of(row, render_text(ex.state))
            out.append(Example(f"{rid}{ex.key}", group, source, ex.state, ex.question, ex.label))
    return out


def _digest(engine_id: Mapping[str, Any], ex: Example) -> str:
    blob = json.dumps(
        [
            engine_id,
            render_text(ex.state),
            render_text(ex.question.instructions or ""),
            [o.name for o in ex.question.options],
        ],
        ensure_ascii=False,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


@dataclass
class Features:
    """Tapped states of every example and its zero-shot label readout.

    Attributes:
        states: (N, K, H) fp32, K = ``len(layers)``.
        layers: the tapped layers, in order.
        label_probs: (N, C) the label readout of each example's question (option order).
        computed: examples that ran through the model (the rest came from the cache).
        seconds: wall time of the extraction.
    """

    states: np.ndarray
    layers: tuple[int, ...]
    label_probs: np.ndarray
    computed: int = 0
    seconds: float = 0.0


def default_layers(n: int) -> list[int]:
    """The layers ``logitjudge fit`` taps by default on an ``n``-layer model: N/2, 5N/7, 6N/7 and
    N (1-based; the polarity of a support question shows in the late layers)."""
    return sorted({max(1, n // 2), max(1, round(5 * n / 7)), max(1, round(6 * n / 7)), n})


def extract(
    engine: Engine,
    examples: Sequence[Example],
    *,
    layers: Sequence[int],
    cache: str | Path | None = None,
    batch_size: int = 8,
    progress: Callable[[int], None] | None = None,
) -> Features:
    """Hidden states of ``layers`` at each example's answer position, through ``engine``.

    Args:
        engine: a loaded :class:`~logitjudge.engine.core.Engine` (transformers backend).
        batch_size: requests per engine call; the examples over one state are one request
            (its questions packed over it).
        cache: a folder; each example's states are stored per layer as
            ``<fingerprint>/<prompt version>-<precision>/<digest>.L<layer>.npy`` (digest of the state
            and the question; precision ``float32`` or ``mixed``) and read back on a later call.
        progress: called with the number of examples done after each batch.

    Returns:
        :class:`Features` in ``examples`` order.
    """
    d = engine.describe()
    engine_id = {k: d.get(k) for k in ("fingerprint", "prompt_version", "dtype")}  # the folder holds the precision
    folder = None
    if cache is not None:
        precision = d.get("precision") or d.get("dtype")
        folder = Path(cache) / str(d.get("fingerprint"))[:16] / f"{d.get('prompt_version')}-{precision}"
        folder.mkdir(parents=True, exist_ok=True)
    layers = tuple(int(x) for x in layers)
    n = len(examples)
    states: list[np.ndarray | None] = [None] * n
    probs: list[np.ndarray | None] = [None] * n
    todo: list[int] = []
    for i, ex in enumerate(examples):
        if folder is not None:
            base = folder / _digest(engine_id, ex)
            files = [base.with_name(f"{base.name}.L{x}.npy") for x in layers]
            zero = base.with_name(f"{base.name}.labels.npy")
            if all(f.is_file() for f in files) and zero.is_file():
                states[i] = np.stack([np.load(f) for f in files])
                probs[i] = np.load(zero)
                continue
        todo.append(i)
    if progress is not None and n - len(todo):
        progress(n - len(todo))
    # examples over one state go in one request: the state is read once and its questions,
    # isolated from each other, share it (the engine's packing, as in serving)
    by_state: dict[str, list[int]] = {}
    for i in todo:
        by_state.setdefault(render_text(examples[i].state), []).append(i)
    t0 = time.perf_counter()
    groups = list(by_state.values())
    for start in range(0, len(groups), batch_size):
        batch = groups[start : start + batch_size]
        got = engine.answer_states(
            [EngineRequest(examples[g[0]].state, tuple(examples[i].question for i in g)) for g in batch], layers
        )
        for g, (st, zero_shot) in zip(batch, got):
            for q, i in enumerate(g):
                s_i, p_i = st[q].numpy(), np.asarray(zero_shot[q], dtype=np.float64)
                states[i], probs[i] = s_i, p_i
                if folder is not None:
                    base = folder / _digest(engine_id, examples[i])
                    for k, x in enumerate(layers):
                        np.save(base.with_name(f"{base.name}.L{x}.npy"), s_i[k])
                    np.save(base.with_name(f"{base.name}.labels.npy"), p_i)
        if progress is not None:
            progress(sum(len(g) for g in batch))
    return Features(
        np.stack(states),  # type: ignore[arg-type]
        layers,
        np.stack(probs),  # type: ignore[arg-type]
        computed=len(todo),
        seconds=time.perf_counter() - t0,
    )


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


def card(result: FitResult, *, timing: Mapping[str, Any] | None = None, data: Sequence[str] = ()) -> str:
    """The head's card (``CARD.md``): what it reads, what it was trained on, what it measured."""
    head, held = result.head, result.held_out
    trained = dict(head.meta.get("trained", {}))

    def pct(x: Any) -> str:
        return "n/a" if x is None else f"{100 * x:.1f}%"

    lines = [
        f"# Head `{head.name}` for {head.binding.get('model')}",
        "",
        f"- evaluator: `{head.meta.get('evaluator')}`; question type `{head.question_type}`, options "
        + ", ".join(f"`{o}`" for o in head.options),
        f"- reads layers {list(head.layers)} at the answer position (the question's last token), "
        f"a linear map (multinomial logistic regression, C={result.c}, standardisation folded in"
        + (", classes weighted to equal priors)" if trained.get("balanced") else ")"),
        f"- bound to fingerprint `{head.binding.get('fingerprint')}` and prompt `{head.binding.get('prompt_version')}`",
        f"- trained on {trained.get('rows')} examples from {', '.join(trained.get('sources', []))}"
        + (f" ({', '.join(data)})" if data else ""),
        f"- chosen by {trained.get('cv_folds')}-fold grouped cross-validation (mean log loss) among "
        + ", ".join(sorted({k.split(" C=")[0] for k in result.cv})),
    ]
    if timing:
        lines.append(
            f"- features: {timing.get('examples_computed')} examples through the model, "
            f"{timing.get('examples_cached')} from the cache, {timing.get('features_s')} s; "
            f"total {timing.get('total_s')} s"
        )
    if held:
        ranked = int("auroc" in held)  # two options: the AUROC of the first option's probability
        lines += [
            "",
            f"## Held out ({held['rows']} examples, groups never seen by the fit)",
            "",
            "| readout | accuracy [95% CI] | macro-F1 | log loss | predicted share |" + (" AUROC [95% CI] |" * ranked),
            "|---|---|---|---|---|" + "---|" * ranked,
        ]
        for name, rep in (("this head", held), ("zero-shot labels", held["zero_shot"]), ("majority", held["majority"])):
            share = ", ".join(f"{o} {pct(v)}" for o, v in rep["predicted_share"].items())
            line = (
                f"| {name} | {pct(rep['accuracy'])}{_ci(rep.get('accuracy_interval'), pct)} | {rep['macro_f1']:.3f} | "
                f"{rep['log_loss']:.3f} | {share} |"
            )
            if ranked:
                area = rep.get("auroc")
                line += (
                    f" {'-' if area is None else f'{area:.3f}'}{_ci(rep.get('auroc_interval'), lambda x: f'{x:.3f}')} |"
                )
            lines.append(line)
        lines.append("")
        lines.append("gold share: " + ", ".join(f"{o} {pct(v)}" for o, v in held["gold_share"].items()))
        lines += ["", "| source | rows | accuracy | macro-F1 |", "|---|---|---|---|"]
        for src, rep in held.get("per_source", {}).items():
            lines.append(f"| {src} | {rep['rows']} | {pct(rep['accuracy'])} | {rep['macro_f1']:.3f} |")
    return "\n".join(lines) + "\n"


def _ci(interval: Sequence[float] | None, fmt: Callable[[float], str]) -> str:
    return f" [{fmt(interval[0])}, {fmt(interval[1])}]" if interval else ""


def write_head(
    result: FitResult, out: str | Path, *, timing: Mapping[str, Any] | None = None, data: Sequence[str] = ()
) -> Path:
    """Write ``<out>/<head name>/``: the head's files, ``CARD.md`` and ``report.json`` (the CV
    losses, the held-out reports and the timing). Returns the head's folder."""
    folder = result.head.save(Path(out) / result.head.name)
    (folder / "CARD.md").write_text(card(result, timing=timing, data=data), encoding="utf-8")
    report = {"cv_log_loss": result.cv, "held_out": result.held_out, "timing": dict(timing or {}), "data": list(data)}
    (folder / "report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return folder
