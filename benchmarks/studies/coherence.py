"""Coherence: are choice and score answers stable under option reordering and menu changes, per
debiasing method, at what accuracy and what token cost? Every method side by side in one run.

    nice -n 15 .venv/bin/python benchmarks/studies/coherence.py --model smollm2-135m --coherence-items 6 --orders 4
    nice -n 15 .venv/bin/python benchmarks/studies/coherence.py --skip-engine --harness --harness-out harness.json
    nice -n 15 .venv/bin/python benchmarks/studies/coherence.py --skip-engine \
        --reuse benchmarks/results/coherence-smollm2-135m-instruct.json --harness-from harness.json

(the committed result: the engine figures, then the harnesses, then both merged; or all at once
with ``--harness``).

Methods (each a way to turn one question into option probabilities):

- ``rot1``: the question asked once, options in request order (``--rotations 1``);
- ``rotK-mean``: K cyclic rotations of the option order as branches over the shared state
  prefix, the K distributions averaged per option (``--rotations K``); ``full``: K = the option count;
- ``rotK-prior``: the same K branches, the per-position label prior divided out (PriDe, Zheng et
  al. 2024, "Large Language Models Are Not Robust Multiple Choice Selectors", estimated per
  request from its own rotations: with every cyclic rotation this is the normalised geometric
  mean of the K distributions);
- ``per-option``: letter-free; each option asked alone as a yes/no question ("is this the
  answer?"), P(yes) normalised over the options (Luce's rule: order and menu cannot matter).

All methods are read from ONE forward per request (the rotations' branches and the per-option
branches of a question share the state prefix; ``rot1`` is rotation 0 of the same run, which the
engine's isolation guarantees equals asking it alone).

Measured, on the model given:

- *coherence*: on the typed choice rows of the dev sets (``--coherence-items`` of them, 4 to 6
  options): the argmax flip rate and total variation (TV) under ``--orders`` seeded permutations
  and the reversal (krite-bench's invariance runner measures the same), under one cyclic
  rotation, and jevbench's three choice-set relations (an off-topic option added, each option
  removed in turn, as many pairs alone as there are options, seeded), each passed when the TV between the renormalised
  distributions is at most 0.05 (jevbench's fixed tolerance);
- *accuracy*: exact accuracy of the typed choice and score rows of ``jevbench`` and
  ``sys1bench_canary`` (``../shared/data``, every row);
- *tokens*: tokens per request of the speed benchmark's requests (``benchmarks/speed/speed.py``'s
  question mix, the shapes of ``speed_limit.py``), as a ratio to ``rot1``.

``--harness`` also runs the third-party harnesses against ``logitjudge serve --strict-wire`` with
``--rotations 1`` (today's behaviour) and with the new default (no flag), one after the other:
``jevbench eval --suite examples`` and ``krite-bench invariance`` (24 orders plus the reverse on
``--krite-invariance-n`` canary ``queue`` cases), through ``benchmarks/harnesses/run_harnesses.py``'s
helpers (``.venv-harness``, ``make harness-env``).

Writes ``benchmarks/results/coherence-<model>.json`` (configuration, every figure, per-item rows,
``metadata`` from ``_results.py``) and ``.md``. Seconds are not reported: the machine is shared.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.append(str(Path(__file__).resolve().parents[1]))  # benchmarks/: _results
sys.path.append(str(Path(__file__).resolve().parents[1] / "speed"))  # the speed benchmark's requests
sys.path.append(str(Path(__file__).resolve().parents[1] / "harnesses"))
from _results import DATA, RESULTS, ROOT, run_metadata  # noqa: E402

from logitjudge.convert import question_to_engine  # noqa: E402
from logitjudge.engine.core import Engine  # noqa: E402
from logitjudge.engine.types import EngineRequest, Option, Question  # noqa: E402
from logitjudge.rubrics.items import parse_typed_question  # noqa: E402

SETS = ("jevbench", "sys1bench_canary")
TOLERANCE = 0.05  # jevbench's fixed tolerance on TV
IRRELEVANT = (  # jevbench's off-topic options (relations/cho.py)
    "The text is a recipe for baking sourdough bread",
    "The text describes the migration of humpback whales",
    "The text is a poem about autumn leaves",
)
SHAPES = ((266, 6), (2000, 16), (2000, 4), (2000, 64))  # speed_limit.py's shapes (state tokens x questions)


# -- reading the model ------------------------------------------------------------------------


def view_distributions(engine: Engine, requests: Sequence[EngineRequest]) -> dict[tuple[int, int], np.ndarray]:
    """Per (request, question): (views, options) probabilities, each view softmaxed over its own
    labels (the readout's first step, before views are combined). One engine call."""
    plans = [engine.plan(r) for r in requests]
    scores, labels = engine.label_log_probs(plans)
    scores = scores.float().cpu()
    groups: dict[tuple[int, int, int], list[int]] = defaultdict(list)
    for k, t in enumerate(labels):
        groups[(t.request, t.question, t.view)].append(k)
    n_views = {(r, q): len(qp.views) for r, p in enumerate(plans) for q, qp in enumerate(p.questions)}
    n_opts = {(r, q): qp.n_options for r, p in enumerate(plans) for q, qp in enumerate(p.questions)}
    out = {key: np.zeros((n_views[key], n_opts[key])) for key in n_views}
    for (r, q, v), idx in groups.items():
        p = torch.softmax(scores[idx], 0).double().numpy()
        out[(r, q)][v, [labels[k].option for k in idx]] = p
    return out


def combine(views: np.ndarray, method: str) -> np.ndarray:
    """One distribution from a question's views (rotation r is row r) under ``method``."""
    if method == "rot1":
        return views[0]
    k = views.shape[0] if method.startswith("rotfull") else int(method[3:].split("-")[0])
    v = views[:k]
    if method.endswith("-mean"):
        return v.mean(0)
    logp = np.log(np.clip(v, 1e-12, 1.0)).mean(0)
    e = np.exp(logp - logp.max())
    return e / e.sum()


def per_option_questions(q: Question) -> list[Question]:
    """The letter-free method's yes/no questions: one per option, each seeing only that option."""
    head = q.instructions if isinstance(q.instructions, str) and q.instructions else "Which option fits the state best?"
    out = []
    for o in q.options:
        text = o.name if q.type == "choice" else o.description
        if q.type == "choice" and o.description is not None:
            text = f"{o.name}: {o.description}"
        out.append(
            Question(
                "noul",
                f"{head}\nCandidate answer: {text}\nIs this candidate the right answer?",
                (Option("true"), Option("false")),
            )
        )
    return out


def luce(p_yes: Sequence[float]) -> np.ndarray:
    a = np.asarray(p_yes, dtype=float)
    return a / a.sum()


# -- data -------------------------------------------------------------------------------------


def typed_rows(data: Path) -> list[dict[str, Any]]:
    """Typed choice and score rows of the dev sets: state, engine question, gold option index."""
    rows = []
    for name in SETS:
        path = data / name / "dev.jsonl"
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            raw = json.loads(line)
            qraw = raw.get("question") or {}
            if qraw.get("type") not in ("choice", "score"):
                continue
            q = question_to_engine(parse_typed_question(qraw))
            gold = raw["gold"]["answer"]
            if q.type == "choice":
                names = [o.name for o in q.options]
                if gold not in names:
                    continue
                gold_i = names.index(gold)
            elif isinstance(gold, int) and 0 <= gold < len(q.options):
                gold_i = gold
            else:  # "unknown": no gold level
                continue
            state = raw["input"] + ("\n\n" + "\n".join(raw["context"]) if raw.get("context") else "")
            rows.append({"id": raw["id"], "set": name, "type": q.type, "state": state, "question": q, "gold": gold_i})
    return rows


def rotated(q: Question, k: int) -> Question:
    return Question(q.type, q.instructions, q.options, rotations=k, calibrated=q.calibrated)


# -- measurements ----------------------------------------------------------------------------


METHODS = ("rot1", "rot2-mean", "rotfull-mean", "rotfull-prior", "per-option")


def answer_all(
    engine: Engine, state: str, questions: Sequence[Question], batch: int = 24
) -> list[dict[str, np.ndarray]]:
    """Every method's distribution for each question over ``state`` (questions in chunks of ``batch``
    per request; branches are isolated, so chunking does not change an answer)."""
    out: list[dict[str, np.ndarray]] = []
    # a per-option branch sees its one option only: the same question in another menu or order is
    # the same branch, so it is asked once per state (exactly what a repeat would give)
    p_yes: dict[Question, float] = {}
    for i in range(0, len(questions), batch):
        chunk = questions[i : i + batch]
        new = list(dict.fromkeys(x for q in chunk for x in per_option_questions(q) if x not in p_yes))
        qs = [rotated(q, len(q.options)) for q in chunk] + new
        views = view_distributions(engine, [EngineRequest(state, tuple(qs))])
        for j, x in enumerate(new):
            p_yes[x] = float(views[(0, len(chunk) + j)][0, 0])
        for j, q in enumerate(chunk):
            res = {m: combine(views[(0, j)], m) for m in METHODS if m != "per-option"}
            res["per-option"] = luce([p_yes[x] for x in per_option_questions(q)])
            out.append(res)
    return out


def tv(a: np.ndarray, b: np.ndarray) -> float:
    return float(0.5 * np.abs(a - b).sum())


def coherence(engine: Engine, rows: list[dict[str, Any]], n_items: int, n_orders: int, seed: int) -> dict[str, Any]:
    """Order and menu relations on ``n_items`` choice rows (4 to 6 options), every method."""
    rng = random.Random(seed)
    pool = [r for r in rows if r["type"] == "choice" and 4 <= len(r["question"].options) <= 6]
    rng.shuffle(pool)
    items = pool[:n_items]
    per_item = []
    for row in items:
        q: Question = row["question"]
        n = len(q.options)
        names = [o.name for o in q.options]
        variants: list[tuple[str, Any, Question]] = [("base", None, q)]
        orders = set()
        while len(orders) < n_orders:
            order = list(range(n))
            rng.shuffle(order)
            if order != list(range(n)):
                orders.add(tuple(order))
        for order in sorted(orders) + [tuple(reversed(range(n)))]:
            kind = "reverse" if list(order) == list(reversed(range(n))) else "permutation"
            variants.append((kind, order, Question(q.type, q.instructions, tuple(q.options[i] for i in order))))
        cyc = tuple((i + 1) % n for i in range(n))
        variants.append(("cyclic", cyc, Question(q.type, q.instructions, tuple(q.options[i] for i in cyc))))
        pos = rng.randrange(n + 1)
        extra = Option("irrelevant_option", rng.choice(IRRELEVANT))
        variants.append(
            ("irrelevant", pos, Question(q.type, q.instructions, (*q.options[:pos], extra, *q.options[pos:])))
        )
        for drop in range(n):
            variants.append(
                (
                    "remove",
                    drop,
                    Question(q.type, q.instructions, tuple(o for i, o in enumerate(q.options) if i != drop)),
                )
            )
        pairs = list(itertools.combinations(range(n), 2))
        for a, b in sorted(rng.sample(pairs, min(len(pairs), n))):
            variants.append(("pair", (a, b), Question(q.type, q.instructions, (q.options[a], q.options[b]))))
        answers = answer_all(engine, row["state"], [v[2] for v in variants])
        base = answers[0]
        rec: dict[str, Any] = {"id": row["id"], "options": n, "methods": {}}
        for m in METHODS:
            b = base[m]
            flips, tvs, checks = [], [], defaultdict(list)
            for (kind, param, _vq), got in zip(variants[1:], answers[1:], strict=True):
                d = got[m]
                if kind in ("permutation", "reverse", "cyclic"):
                    back = np.zeros(n)
                    back[list(param)] = d  # displayed position i shows option param[i]
                    t = tv(back, b)
                    checks[kind].append(t)
                    if kind != "cyclic":
                        flips.append(int(np.argmax(back) != np.argmax(b)))
                        tvs.append(t)
                elif kind == "irrelevant":
                    kept = np.delete(d, param)
                    checks[kind].append(tv(kept / kept.sum(), b))
                elif kind == "remove":
                    ref = np.delete(b, param)
                    checks[kind].append(tv(d, ref / ref.sum()))
                else:
                    ref = b[list(param)]
                    checks[kind].append(tv(d, ref / ref.sum()))
            rec["methods"][m] = {
                "flip_rate": float(np.mean(flips)),
                "mean_tv_permutation": float(np.mean(tvs)),
                "max_tv_permutation": float(np.max(tvs)),
                "flip_reverse": flips[-1],
                "tv_cyclic": checks["cyclic"][0],
                **{f"tv_{k}": [round(x, 6) for x in v] for k, v in checks.items() if k != "cyclic"},
            }
        rec["answer_names"] = {m: names[int(np.argmax(base[m]))] for m in METHODS}
        per_item.append(rec)
    summary = {}
    for m in METHODS:
        rs = [r["methods"][m] for r in per_item]
        s: dict[str, Any] = {
            "flip_rate": float(np.mean([r["flip_rate"] for r in rs])),
            "reverse_flip_rate": float(np.mean([r["flip_reverse"] for r in rs])),
            "mean_tv_permutation": float(np.mean([r["mean_tv_permutation"] for r in rs])),
            "max_tv_cyclic": float(np.max([r["tv_cyclic"] for r in rs])),
        }
        for k in ("permutation", "irrelevant", "remove", "pair"):
            vals = [x for r in rs for x in r[f"tv_{k}"]]
            s[f"pass_{k}"] = float(np.mean([x <= TOLERANCE for x in vals]))
            s[f"mean_tv_{k}"] = float(np.mean(vals))
        summary[m] = s
    return {"items": len(items), "orders": n_orders, "summary": summary, "rows": per_item}


def accuracy(engine: Engine, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Exact accuracy of every method on every typed choice and score row."""
    per_row = []
    for row in rows:
        got = answer_all(engine, row["state"], [row["question"]])[0]
        per_row.append(
            {
                "id": row["id"],
                "set": row["set"],
                "type": row["type"],
                "gold": row["gold"],
                "answers": {m: int(np.argmax(got[m])) for m in METHODS},
                "p_gold": {m: round(float(got[m][row["gold"]]), 6) for m in METHODS},
            }
        )
    groups: dict[str, Any] = {}
    for (s, t), rs in itertools.groupby(
        sorted(per_row, key=lambda r: (r["set"], r["type"])), key=lambda r: (r["set"], r["type"])
    ):
        rs = list(rs)
        groups[f"{s}:{t}"] = {
            "n": len(rs),
            **{m: float(np.mean([r["answers"][m] == r["gold"] for r in rs])) for m in METHODS},
            **{f"nll_{m}": float(np.mean([-np.log(max(r["p_gold"][m], 1e-12)) for r in rs])) for m in METHODS},
        }
    return {"groups": groups, "rows": per_row}


def tokens(engine: Engine) -> dict[str, Any]:
    """Tokens per request of the speed benchmark's requests, per method, and the ratio to rot1."""
    from speed import questions, state_of

    out = {}
    for st, nq in SHAPES:
        state = state_of(engine, st)
        qs = questions(nq)
        row: dict[str, Any] = {}
        row["rot1"] = engine.count_tokens(EngineRequest(state, qs))
        row["rot2-mean"] = engine.count_tokens(
            EngineRequest(state, tuple(q if q.type == "noul" else rotated(q, 2) for q in qs))
        )
        full = engine.count_tokens(
            EngineRequest(state, tuple(q if q.type == "noul" else rotated(q, len(q.options)) for q in qs))
        )
        row["rotfull-mean"] = row["rotfull-prior"] = full
        row["per-option"] = engine.count_tokens(
            EngineRequest(state, tuple(x for q in qs for x in ([q] if q.type == "noul" else per_option_questions(q))))
        )
        out[f"{st}x{nq}"] = {m: {"tokens": row[m], "ratio": round(row[m] / row["rot1"], 3)} for m in METHODS}
    return out


# -- the harnesses ---------------------------------------------------------------------------


def harnesses(model: str, work: Path, invariance_n: int, configs: dict[str, list[str]]) -> dict[str, Any]:
    """jevbench ``examples`` and krite-bench ``invariance`` against ``logitjudge serve --strict-wire``
    with each configuration's extra flags, one server at a time."""
    import run_harnesses as rh

    rh.ensure_harness_venv()
    out: dict[str, Any] = {"versions": rh.installed_versions()}
    for name, flags in configs.items():
        w = work / name
        w.mkdir(parents=True, exist_ok=True)
        port = rh.free_port()
        with rh.serve(model, port, w / "serve.log", strict=True, extra=flags) as server:
            jb = str(rh.harness_bin("jevbench"))
            target = ["--url", f"{server['url']}/v1/systemone", "--model", rh.MODEL_ALIAS]
            report = w / "jevbench-examples.json"
            step = rh.run_step(
                "jevbench-examples",
                [jb, "eval", *target, "--suite", "examples", "--no-cache", "--out", str(report)],
                w,
            )
            krite_root = w / "krite"
            engines = {
                "logitjudge": rh.krite_engine(
                    port, server["healthz"]["model"], f"logitjudge serve --model {model} --port {port} --strict-wire"
                )
            }
            suites, _ = rh.krite_suites(rh.canary_rows(), 40, 0)
            rh.write_krite_workspace(krite_root, engines, {"canary-queue": suites["canary-queue"]})
            krite = rh.run_krite(krite_root, "logitjudge", ["canary-queue"], "canary-queue", invariance_n)
        out[name] = {
            "server": server["command"],
            "flags": flags,
            "jevbench_examples": rh.jevbench_summary(report),
            "jevbench_step": step,
            "krite_quality": krite["quality"],
            "krite_invariance": krite["invariance"],
            "krite_steps": krite["steps"],
        }
    return out


# -- report ----------------------------------------------------------------------------------


def _f(x: Any, d: int = 3) -> str:
    return "-" if x is None else f"{x:.{d}f}"


def markdown(rec: dict[str, Any]) -> str:
    meta = rec["metadata"]
    lines = [
        f"# Coherence of choice and score answers: {rec['model']}",
        "",
        f"Written by `{rec['command']}` (`benchmarks/studies/coherence.py`). Run {meta['date']} at commit "
        f"`{str(meta.get('git_sha'))[:12]}`{' (uncommitted changes)' if meta.get('git_dirty') else ''}, "
        f"logitjudge {meta.get('logitjudge')}, torch {meta.get('torch')}, {meta.get('device')}.",
        "",
        "Methods: `rot1` one order (`--rotations 1`); `rot2-mean` two cyclic rotations averaged; `rotfull-mean` every "
        "cyclic rotation averaged; `rotfull-prior` every cyclic rotation, the per-position prior divided out (PriDe, "
        "normalised geometric mean); `per-option` each option asked alone as yes/no, normalised (Luce).",
        "",
        f"## Order and menu coherence ({rec['coherence']['items']} choice items, {rec['coherence']['orders']} "
        "seeded orders plus the reverse each; pass = TV <= 0.05)",
        "",
        "| method | flip rate (perm.) | flip (reverse) | mean TV (perm.) | max TV (one rotation) | pass perm. | pass irrelevant option | pass remove one | pass pair |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for m, s in rec["coherence"]["summary"].items():
        lines.append(
            f"| {m} | {_f(s['flip_rate'])} | {_f(s['reverse_flip_rate'])} | {_f(s['mean_tv_permutation'])} | "
            f"{s['max_tv_cyclic']:.1e} | {_f(s['pass_permutation'])} | {_f(s['pass_irrelevant'])} | "
            f"{_f(s['pass_remove'])} | {_f(s['pass_pair'])} |"
        )
    if rec["coherence"].get("note"):
        lines += ["", rec["coherence"]["note"] + "."]
    lines += ["", "## Accuracy (every typed choice and score row; exact)", ""]
    if rec["accuracy"].get("note"):
        lines += [rec["accuracy"]["note"] + ".", ""]
    lines += ["| set:type | n | " + " | ".join(METHODS) + " |", "|---|--:|" + "--:|" * len(METHODS)]
    for g, s in rec["accuracy"]["groups"].items():
        lines.append(f"| {g} | {s['n']} | " + " | ".join(_f(s[m]) for m in METHODS) + " |")
    lines += ["", "## Tokens per request (the speed benchmark's requests; ratio to rot1)", ""]
    lines += ["| shape | rot1 tokens | " + " | ".join(METHODS[1:]) + " |", "|---|--:|" + "--:|" * (len(METHODS) - 1)]
    for shape, s in rec["tokens"].items():
        lines.append(
            f"| {shape} | {s['rot1']['tokens']} | " + " | ".join(f"{s[m]['ratio']:.2f}x" for m in METHODS[1:]) + " |"
        )
    h = rec.get("harnesses")
    if h:
        lines += ["", "## Third-party harnesses, before and after (`logitjudge serve --strict-wire`)", ""]
        lines += [
            "| server flags | jevbench examples REP | REP.equivariance | CHO | CHO.conditioning | krite flip rate | krite reverse flip | krite max change |",
            "|---|--:|--:|--:|--:|--:|--:|--:|",
        ]
        for name, r in h.items():
            if name == "versions":
                continue
            j = r["jevbench_examples"]
            dims, groups = j.get("dimensions") or {}, j.get("groups") or {}
            inv = (r["krite_invariance"] or [{}])[0]
            lines.append(
                f"| `{' '.join(r['flags']) or '(default)'}` | {_f(dims.get('REP'))} | {_f(groups.get('REP.equivariance'))} | "
                f"{_f(dims.get('CHO'))} | {_f(groups.get('CHO.conditioning'))} | {_f(inv.get('full_permutation_flip_rate'))} | "
                f"{_f(inv.get('reverse_flip_rate'))} | {_f(inv.get('max_prob_dev'))} |"
            )
        lines += ["", "jevbench relations per configuration:", ""]
        for name, r in h.items():
            if name == "versions":
                continue
            rel = r["jevbench_examples"].get("relations") or {}
            keep = {
                k: v
                for k, v in rel.items()
                if k
                in (
                    "option_permutation",
                    "option_rename",
                    "irrelevant_option",
                    "remove_option_iia",
                    "pairwise_iia",
                    "option_clone",
                )
            }
            lines.append(
                f"- `{' '.join(r['flags']) or '(default)'}`: "
                + ", ".join(
                    f"{k} {_f(v if not isinstance(v, dict) else v.get('score'))}" for k, v in sorted(keep.items())
                )
            )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--coherence-items", type=int, default=12)
    ap.add_argument("--orders", type=int, default=6, help="seeded permutations per coherence item (plus the reverse)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--accuracy-limit", type=int, default=None, help="typed rows for accuracy (default all)")
    ap.add_argument("--harness", action="store_true", help="also run jevbench examples and krite-bench invariance")
    ap.add_argument("--krite-invariance-n", type=int, default=4)
    ap.add_argument("--skip-engine", action="store_true", help="no engine figures (keep those of --reuse, if given)")
    ap.add_argument("--reuse", type=Path, default=None, help="a previous result whose engine figures to keep")
    ap.add_argument("--harness-out", type=Path, default=None, help="write the harness figures here, not the result")
    ap.add_argument("--harness-from", type=Path, default=None, help="harness figures written by --harness-out")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    started = time.monotonic()
    rec: dict[str, Any] = {
        "command": "python benchmarks/studies/coherence.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "metadata": run_metadata("cpu"),
        "methods": list(METHODS),
    }
    if args.skip_engine:
        old = json.loads(args.reuse.read_text()) if args.reuse else {"model": args.model}
        for k in ("model", "engine", "coherence", "accuracy", "tokens"):
            if k in old:
                rec[k] = old[k]
    else:
        engine = Engine.load(args.model, device="cpu", dtype="float32")
        rec["model"] = engine.name
        rec["engine"] = engine.describe()
        rows = typed_rows(DATA)
        rec["tokens"] = tokens(engine)
        print(json.dumps(rec["tokens"], indent=1), flush=True)
        rec["coherence"] = coherence(engine, rows, args.coherence_items, args.orders, args.seed)
        print(json.dumps(rec["coherence"]["summary"], indent=1), flush=True)
        acc_rows = rows if args.accuracy_limit is None else rows[: args.accuracy_limit]
        rec["accuracy"] = accuracy(engine, acc_rows)
        print(json.dumps(rec["accuracy"]["groups"], indent=1), flush=True)
        del engine
    if args.harness:
        work = ROOT / "out" / "coherence" / args.model
        rec["harnesses"] = harnesses(
            args.model, work, args.krite_invariance_n, {"before": ["--rotations", "1"], "after": []}
        )
        if args.harness_out:
            args.harness_out.write_text(json.dumps(rec["harnesses"], indent=1, default=float) + "\n")
            return 0
    if args.harness_from:
        rec["harnesses"] = json.loads(args.harness_from.read_text())
    rec["total_wall_s"] = round(time.monotonic() - started, 1)
    name = f"coherence-{rec['model']}"
    (RESULTS / f"{name}.json").write_text(json.dumps(rec, indent=1, default=float) + "\n")
    (RESULTS / f"{name}.md").write_text(markdown(rec))
    print(markdown(rec))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
