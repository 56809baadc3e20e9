"""Training rows for the head of ``answer_relevancy``, derived from ``squad_relevance``.

    python benchmarks/fits/answer_relevancy_rows.py --out rows.jsonl [--questions 300] [--rows-version 1]
    logitjudge fit rows.jsonl --evaluator answer_relevancy@1 --label-key level --balance-classes --out heads/

The evaluator rates how directly and completely ``output`` answers ``input`` on the page's four
levels. The training folder holds no such rows, so this script derives them, deterministically
(seed 20251207), from the SQuAD questions and paragraphs of
``../shared/data/train/squad_relevance`` (CC BY-SA 4.0; the rows are the same licence). For each
question drawn (its own paragraph, with its gold answer strings), four outputs, one per level,
written from the levels' own words:

- **3, "directly and completely, no padding"**: the paragraph's sentence that holds a gold answer
  (the first such), or, for one question in four, the answer string alone as a sentence;
- **2, "addresses the question with some redundant or off-topic content"**: that answer followed
  (one in four: preceded) by 1-3 sentences of another paragraph of the same article, on its topic
  but holding no gold answer (the page's "answers, then pads");
- **1, "partially related but misses the main point"**: 1-3 sentences of the same article that
  hold no gold answer and share a content word (5+ letters) with the question, so they are on its
  subject without answering it;
- **0, "does not address the question at all"**: 1-3 sentences of another article.

The outputs are the paragraphs' own sentences: no template text, so neither the level nor the
evaluation sets' wording is given away by a phrase. Those are the first rows
(``--rows-version 1``). The second (the default, written after a head on the first was measured
on WikiEval, so not blind to it) keeps their draws and changes two levels: the padding of level 2
is drawn again from the sentences that share no content word with the question (off the
question, not only off the paragraph) where there are three or more such; and 7 in 10 of the
level-3 answers that are a sentence go on with one or two more sentences of the paragraph the
question was asked on (the ones after it first, then those before it, nearest first; 40-300
characters), so a complete answer may be longer than one sentence. Level 2 pads that answer.
``benchmarks/studies/answer_relevancy_head.py`` measures heads on both.

``gold = {"level": k}``; ``meta.group`` is the article, so the fit's held-out part is articles it
never saw. Nothing here comes from an evaluation set.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from logitjudge.rubrics.questions import split_sentences

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _results
from _results import DATA  # noqa: E402

SEED = 20251207
STOP = {"what", "which", "when", "where", "does", "that", "this", "with", "from", "have", "were", "there", "their"}


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z]{5,}", text.lower()) if w not in STOP}


def _has_answer(sentence: str, answers: list[str]) -> bool:
    low = sentence.lower()
    return any(a.lower() in low for a in answers)


def _join(sentences: list[str]) -> str:
    return " ".join(s.strip() for s in sentences)


def build(rows: list[dict[str, Any]], n_questions: int, seed: int = SEED, version: int = 2) -> list[dict[str, Any]]:
    """Four levelled rows per drawn question (the module docstring's rules); questions whose
    paragraph lacks what a level needs are skipped."""
    paragraphs: dict[str, dict[str, str]] = defaultdict(dict)  # article -> paragraph id -> text
    questions = []
    for r in rows:
        meta = r["meta"]
        text = r["context"][0].split(": ", 1)[-1]
        paragraphs[meta["title"]][str(meta["paragraph_index"])] = text
        if meta["kind"] == "positive_own_paragraph":
            questions.append(r)
    sentences = {t: {p: split_sentences(x) for p, x in ps.items()} for t, ps in paragraphs.items()}
    rng = random.Random(seed)
    rng.shuffle(questions)
    extra = random.Random(seed + 1)
    out: list[dict[str, Any]] = []
    used = 0
    for q in questions:
        if used >= n_questions:
            break
        meta = q["meta"]
        title, own, answers = meta["title"], str(meta["paragraph_index"]), meta["answers"]
        own_sents = sentences[title][own]
        answer_sents = [s for s in own_sents if _has_answer(s, answers)]
        others = [
            s
            for p, ss in sentences[title].items()
            if p != own
            for s in ss
            if not _has_answer(s, answers) and 40 <= len(s) <= 300
        ]
        topical = [
            s
            for ss in sentences[title].values()
            for s in ss
            if not _has_answer(s, answers) and _words(s) & _words(q["input"]) and 40 <= len(s) <= 300
        ]
        elsewhere = [t for t in sentences if t != title]
        if not answer_sents or len(others) < 3 or not topical or len(answer_sents[0]) > 400:
            continue
        used += 1
        short = answers[0].strip().rstrip(".")
        direct = f"{short[0].upper()}{short[1:]}." if rng.random() < 0.25 and short else answer_sents[0]
        pad = rng.sample(others, rng.randint(1, 3))
        padded_first = rng.random() >= 0.75
        partial = rng.sample(topical, min(len(topical), rng.randint(1, 3)))
        far_title = rng.choice(elsewhere)
        far = [s for ss in sentences[far_title].values() for s in ss if 40 <= len(s) <= 300]
        off = rng.sample(far, min(len(far), rng.randint(1, 3)))
        # version 2 of the rows (a second stream, so the draws above stay those of version 1):
        # padding is off the question (no content word of it), and most level-3 answers go on
        # about what was asked (the sentences after the answer in the paragraph it was asked on)
        if version >= 2:
            asked = _words(q["input"])
            off_question = [s for s in others if not _words(s) & asked]
            if len(off_question) >= 3:
                pad = extra.sample(off_question, len(pad))
            at = own_sents.index(answer_sents[0])
            near = [s for s in own_sents[at + 1 :] + own_sents[:at][::-1] if 40 <= len(s) <= 300]
            if near and direct == answer_sents[0] and extra.random() < 0.7:
                direct = _join([answer_sents[0], *near[: extra.randint(1, 2)]])
        padded = [*pad, direct] if padded_first else [direct, *pad]
        for level, parts in ((3, [direct]), (2, padded), (1, partial), (0, off)):
            out.append(
                {
                    "id": f"answer_relevancy_rows:{meta['squad_id']}:{level}",
                    "evaluator": "answer_relevancy",
                    "input": q["input"],
                    "output": _join(parts),
                    "context": [],
                    "expected": None,
                    "gold": {"level": level},
                    "meta": {
                        "group": title,
                        "source": "derived from squad_relevance (SQuAD 1.1 dev, CC BY-SA 4.0)",
                        "squad_id": meta["squad_id"],
                        "off_topic_article": far_title if level == 0 else None,
                    },
                }
            )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--questions", type=int, default=300, help="questions drawn (4 rows each)")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--rows-version", type=int, default=2, choices=(1, 2), help="1: the first rows (see above)")
    args = ap.parse_args(argv)
    src = DATA / "train" / "squad_relevance" / "train.jsonl"
    rows = [json.loads(line) for line in src.open()]
    out = build(rows, args.questions, args.seed, args.rows_version)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w") as f:
        for r in out:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    articles = len({r["meta"]["group"] for r in out})
    print(f"{len(out)} rows ({len(out) // 4} questions, {articles} articles) -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
