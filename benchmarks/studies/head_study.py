"""Trained heads for chunk_support: which layer, linear or MLP, how many rows, and does it transfer?

::

    python benchmarks/studies/head_study.py --cache /path/to/feature-cache

The training examples are those of ``logitjudge fit`` on the three chunk_support training sets
(``../shared/data/train``: vitaminc_support, snli_support, mnli_support; the same seeded stratified
sample of ``--train-sample`` rows and the same held-out split), so with the fit's ``--cache`` their
features are read back, not recomputed. Evaluated on:

- ``held-out``: the fit's held-out groups (in distribution: the same three sources);
- ``anli``: ANLI dev (``../shared/data/anli``, 300 rows; never trained on: the transfer test);
- ``vitaminc-dev``: VitaminC dev (``../shared/data/vitaminc``, 100 rows; the same distribution as
  vitaminc_support, no shared page: in distribution);
- ``cases``: the page's chunks, its variation and the plain negations / changed numbers of
  ``tests/rubrics/test_chunk_support_head.py`` (each a claim and a chunk, gold written by hand).

For every layer choice (each tapped layer, and all concatenated), a linear head (multinomial
logistic regression, C chosen by 3-fold grouped CV on the training part) trained on 300, 1,000
and all training-part rows; on the layer choice with the best held-out log loss, an MLP (one
hidden layer of 256, scikit-learn's ``MLPClassifier``, early stopping) at the same sizes; then
per source (train on one source, on all three). Metrics: 3-way accuracy
with a cluster-bootstrap 95% interval, macro-F1, the share predicted "supports" against gold, and
the zero-shot label readout of the same question on the same rows. Writes
``benchmarks/results/head-study-<model>.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.append(str(Path(__file__).resolve().parents[1]))
from _results import DATA, RESULTS, run_metadata  # noqa: E402

from logitjudge.engine.core import Engine  # noqa: E402
from logitjudge.fit import Example, Features, classification_report, extract, head_examples  # noqa: E402
from logitjudge.rubrics.dataio import read_rows  # noqa: E402
from logitjudge.rubrics.registry import default_registry  # noqa: E402
from logitjudge.rubrics.samples import stratified_sample  # noqa: E402
from logitjudge.settings import MAIN_MODEL  # noqa: E402

TRAIN_SETS = ("vitaminc_support", "snli_support", "mnli_support")
PAGE = "Jev is billed per input token at $0.042 per million; output tokens are free."


def cases() -> list[dict]:
    """The hand-written rows: the page's chunks (per claim of its output) and the tests' pairs."""
    sys.path.append(str(Path(__file__).resolve().parents[2] / "tests" / "rubrics"))
    from test_chunk_support_head import CHANGED_NUMBERS, NEGATIONS, UNSETTLED

    rows = []
    for k, (claim, neg) in enumerate(NEGATIONS):
        rows += [_row(f"neg{k}", claim, neg, "contradicts"), _row(f"neg{k}s", claim, claim, "supports")]
    rows += [_row(f"num{k}", c, x, "contradicts") for k, (c, x) in enumerate(CHANGED_NUMBERS)]
    rows += [_row(f"uns{k}", c, x, "unrelated") for k, (c, x) in enumerate(UNSETTLED)]
    rows += [
        _row(
            "page1a",
            "Jev is billed per input token at $0.042 per million",
            "Price: $42 per billion input tokens. Output tokens are free.",
            "supports",
        ),
        _row(
            "page1b",
            "output tokens are free.",
            "Price: $42 per billion input tokens. Output tokens are free.",
            "supports",
        ),
        _row("page2", "output tokens are free.", "Founded in 2024.", "unrelated"),
        _row("page3", "output tokens are free.", "Output billed at $8/M on the legacy v0 endpoint.", "contradicts"),
        _row(
            "explicit", "Output tokens are free.", "Output tokens are billed at $8 per million tokens.", "contradicts"
        ),
        _row("time", "The train to Paris leaves at 10:15.", "The train to Paris leaves at 11:40.", "contradicts"),
    ]
    return rows


def _row(rid: str, claim: str, chunk: str, label: str) -> dict:
    return {"id": f"cases:{rid}", "output": claim, "context": [chunk], "gold": {"per_chunk": [label], "label": label}}


def _model(kind: str, c: float):
    from sklearn.linear_model import LogisticRegression
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    if kind == "linear":
        return make_pipeline(StandardScaler(), LogisticRegression(C=c, max_iter=3000))
    return make_pipeline(
        StandardScaler(),
        MLPClassifier(hidden_layer_sizes=(256,), alpha=1.0, early_stopping=True, max_iter=200, random_state=0),
    )


def _cols(f: Features, choice: str) -> np.ndarray:
    if choice == "all":
        return f.states.reshape(len(f.states), -1)
    return f.states[:, f.layers.index(int(choice[1:])), :]


def _probs(model, X: np.ndarray, options: list[str]) -> np.ndarray:
    p = model.predict_proba(X)
    order = [list(model.classes_).index(o) for o in options]
    return p[:, order]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", required=True, help="the feature cache (the fit's --cache)")
    ap.add_argument("--train-sample", type=int, default=3000)
    ap.add_argument("--layers", default="14,20,24,28")
    ap.add_argument("--eval-limit", type=int, default=300, help="rows of ANLI dev")
    ap.add_argument("--vitaminc-limit", type=int, default=100, help="rows of VitaminC dev")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", default=MAIN_MODEL)
    args = ap.parse_args()
    from sklearn.model_selection import GroupKFold, GroupShuffleSplit

    t0 = time.perf_counter()
    defn = default_registry().get("chunk_support")
    options = [o.name for o in defn.options or ()]
    layers = tuple(int(x) for x in args.layers.split(","))
    train_rows = [r for s in TRAIN_SETS for r in read_rows(DATA / "train" / s / "train.jsonl")]
    train_rows = stratified_sample(train_rows, args.train_sample, seed=args.seed)
    sets: dict[str, list[Example]] = {"train": head_examples(defn, train_rows)}
    sets["anli"] = head_examples(defn, read_rows(DATA / "anli" / "dev.jsonl", limit=args.eval_limit))
    sets["vitaminc-dev"] = head_examples(defn, read_rows(DATA / "vitaminc" / "dev.jsonl", limit=args.vitaminc_limit))
    sets["cases"] = head_examples(defn, cases())
    engine = Engine.load(args.model)
    feats: dict[str, Features] = {}
    for name, exs in sets.items():
        t = time.perf_counter()
        feats[name] = extract(engine, exs, layers=layers, cache=args.cache, batch_size=16)
        print(
            f"{name}: {len(exs)} examples, {feats[name].computed} computed, {time.perf_counter() - t:.0f} s", flush=True
        )
    ex = sets["train"]
    y = np.array([e.label for e in ex])
    groups = np.array([e.group for e in ex])
    idx = np.arange(len(ex))
    train, test = next(GroupShuffleSplit(n_splits=1, test_size=0.2, random_state=args.seed).split(idx, y, groups))
    rng = np.random.default_rng(args.seed)
    evals = {
        "held-out": (feats["train"], test, ex),
        "anli": (feats["anli"], np.arange(len(sets["anli"])), sets["anli"]),
        "vitaminc-dev": (feats["vitaminc-dev"], np.arange(len(sets["vitaminc-dev"])), sets["vitaminc-dev"]),
        "cases": (feats["cases"], np.arange(len(sets["cases"])), sets["cases"]),
    }

    def measure(model, choice: str) -> dict:
        out = {}
        for name, (f, rows, exs) in evals.items():
            p = _probs(model, _cols(f, choice)[rows], options)
            out[name] = classification_report([exs[i].label for i in rows], p, options, [exs[i].group for i in rows])
        return out

    record: dict = {
        "layers": list(layers),
        "train_rows": len(train),
        "held_out_rows": len(test),
        "grid": [],
        "zero_shot": {},
    }
    for name, (f, rows, exs) in evals.items():
        record["zero_shot"][name] = classification_report(
            [exs[i].label for i in rows], f.label_probs[rows], options, [exs[i].group for i in rows]
        )
    choices = [f"L{x}" for x in layers] + ["all"]
    best_c: dict[str, float] = {}
    from sklearn.metrics import log_loss

    def run(choice: str, kind: str, n: int) -> None:
        X = _cols(feats["train"], choice)
        sub = np.sort(rng.permutation(train)[:n]) if n < len(train) else train
        t = time.perf_counter()
        m = _model(kind, best_c[choice]).fit(X[sub], y[sub])
        entry = {
            "layers": choice,
            "model": kind,
            "rows": int(n),
            "c": best_c[choice] if kind == "linear" else None,
            "fit_s": round(time.perf_counter() - t, 1),
            **measure(m, choice),
        }
        record["grid"].append(entry)
        print(
            f"{choice:>4} {kind:>6} {n:>5}: held-out {entry['held-out']['accuracy']:.3f} "
            f"anli {entry['anli']['accuracy']:.3f} (supports {entry['anli']['predicted_share']['supports']:.2f}) "
            f"vitc {entry['vitaminc-dev']['accuracy']:.3f} cases {entry['cases']['accuracy']:.3f}",
            flush=True,
        )

    sizes = sorted({min(n, len(train)) for n in (300, 1000, len(train))})
    for choice in choices:  # linear heads: C by 3-fold grouped CV on the training part, then 300 / 1k / all rows
        X = _cols(feats["train"], choice)
        losses = {}
        for c in (0.003, 0.01, 0.03):
            ls = []
            for tr, va in GroupKFold(n_splits=3).split(train, y[train], groups[train]):
                m = _model("linear", c).fit(X[train[tr]], y[train[tr]])
                ls.append(log_loss(y[train[va]], m.predict_proba(X[train[va]]), labels=m.classes_))
            losses[c] = float(np.mean(ls))
        best_c[choice] = min(losses, key=lambda k: losses[k])
        for n in sizes:
            run(choice, "linear", n)
    full = [g for g in record["grid"] if g["rows"] == len(train)]
    top = min(full, key=lambda g: g["held-out"]["log_loss"])["layers"]  # chosen on held-out, not on ANLI
    for n in sizes:  # an MLP on the best linear layer choice
        run(top, "mlp", n)
    # per source: the best linear layer choice on held-out, trained on one source at a time
    best = max(
        (g for g in record["grid"] if g["model"] == "linear" and g["rows"] == len(train)),
        key=lambda g: g["held-out"]["log_loss"] * -1,
    )
    record["per_source"] = []
    X = _cols(feats["train"], best["layers"])
    for src in (*TRAIN_SETS, "all"):
        sub = train if src == "all" else np.array([i for i in train if ex[i].source == src])
        m = _model("linear", best_c[best["layers"]]).fit(X[sub], y[sub])
        entry = {"train_source": src, "rows": int(len(sub)), "layers": best["layers"], **measure(m, best["layers"])}
        held = {
            s: classification_report(
                [ex[i].label for i in test if ex[i].source == s],
                _probs(m, X[[i for i in test if ex[i].source == s]], options),
                options,
                [ex[i].group for i in test if ex[i].source == s],
            )
            for s in TRAIN_SETS
        }
        entry["held_out_by_source"] = held
        record["per_source"].append(entry)
        print(
            f"train {src}: anli {entry['anli']['accuracy']:.3f} "
            + " ".join(f"{s} {h['accuracy']:.3f}" for s, h in held.items()),
            flush=True,
        )
    record["command"] = "python benchmarks/studies/head_study.py " + " ".join(sys.argv[1:])
    record["seconds"] = round(time.perf_counter() - t0, 1)
    record["metadata"] = run_metadata(device="cpu")
    slug = engine.name.replace("-instruct", "")
    (RESULTS / f"head-study-{slug}.json").write_text(json.dumps(record, indent=2) + "\n")
    (RESULTS / f"head-study-{slug}.md").write_text(markdown(record))
    print(markdown(record))


def markdown(r: dict) -> str:
    def acc(rep: dict) -> str:
        ci = rep.get("accuracy_interval")
        return f"{rep['accuracy']:.2f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")

    lines = [
        "# Trained heads for chunk_support (default model, fp32, CPU)",
        "",
        f"{r['train_rows']} training examples (vitaminc/snli/mnli, seeded stratified sample), {r['held_out_rows']} held out by group. "
        "3-way accuracy [95% cluster-bootstrap CI]; `sup` = share predicted supports (gold: held-out "
        f"{r['zero_shot']['held-out']['gold_share']['supports']:.2f}, ANLI {r['zero_shot']['anli']['gold_share']['supports']:.2f}).",
        "",
        "| layers | head | rows | held-out | ANLI dev | ANLI macro-F1 | ANLI sup | VitaminC dev | cases |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    zs = r["zero_shot"]
    lines.append(
        f"| (label tokens) | zero-shot | 0 | {acc(zs['held-out'])} | {acc(zs['anli'])} | {zs['anli']['macro_f1']:.2f} | "
        f"{zs['anli']['predicted_share']['supports']:.2f} | {acc(zs['vitaminc-dev'])} | {acc(zs['cases'])} |"
    )
    for g in r["grid"]:
        lines.append(
            f"| {g['layers']} | {g['model']} | {g['rows']} | {acc(g['held-out'])} | {acc(g['anli'])} | {g['anli']['macro_f1']:.2f} | "
            f"{g['anli']['predicted_share']['supports']:.2f} | {acc(g['vitaminc-dev'])} | {acc(g['cases'])} |"
        )
    lines += [
        "",
        "Per training source (linear, the best layer choice):",
        "",
        "| trained on | rows | ANLI dev | VitaminC dev | cases | held-out vitaminc | held-out snli | held-out mnli |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for e in r.get("per_source", []):
        h = e["held_out_by_source"]
        lines.append(
            f"| {e['train_source']} | {e['rows']} | {acc(e['anli'])} | {acc(e['vitaminc-dev'])} | {acc(e['cases'])} | "
            f"{h['vitaminc_support']['accuracy']:.2f} | {h['snli_support']['accuracy']:.2f} | {h['mnli_support']['accuracy']:.2f} |"
        )
    lines += ["", f"Measured {r['metadata'].get('date')} at {r['metadata'].get('git_sha')}; {r['seconds']} s."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
