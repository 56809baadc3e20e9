"""Training rows for the head of ``context_entity_recall``, derived from ``squad_relevance``.

    python benchmarks/fits/entity_recall_rows.py --out .cache/entity_recall_rows.jsonl [--contexts 700 --extra 300]
    logitjudge fit .cache/entity_recall_rows.jsonl --evaluator context_entity_recall --balance-classes --out heads/

The evaluator asks the model only about the entities of ``expected`` that the rules cannot find
verbatim in the context (:mod:`logitjudge.rubrics.entities`), so its head must tell an entity
that the context states *in another form* from one it does not state at all. Neither kind of
row exists in the training folder, so this script derives them, deterministically (seeds
20251205 and 20251206), from the SQuAD paragraphs of ``../shared/data/train/squad_relevance``
(CC BY-SA 4.0; the rows are the same licence).

First family (``--contexts`` rows):

- **context**: 1 to 6 paragraphs of one SQuAD article as chunks (``"Title: paragraph"``, the
  form of the evaluation sets), so contexts run from ~150 to ~1,500 tokens;
- **present, another form**: an entity of the context rewritten by one of these rules: a date
  reordered or its month shortened (``21 March 1873`` -> ``March 21, 1873``), a number in another
  scale (``1,378,000`` -> ``1.378 million``), a name of 3-4 capitalised words to its acronym, a
  percent sign in words, an ordinal century spelled out (a number in words, ``twelve``, or a
  dotted initial is no entity to the extraction, so rows drawing one are dropped);
- **absent**: an entity of another paragraph (same article: on topic; or another article) that
  the context does not state, none of its distinctive words (4+ letters) in the context either,
  half of them rewritten by the same rules so the form is no cue;
- **absent, changed figure**: a number or date of the context with its value changed.

Second family (``--extra`` rows), the other direction and the extraction's own spans:

- **present, the context rewritten**: a number or date of a paragraph written another way in
  the context (``12`` -> ``twelve``, ``1,500,000`` -> ``1.5 million``, ``21 March 1873`` ->
  ``March 21, 1873``), the entity as it was;
- **"<Word> of <entity>"**, the span the extraction makes of "Revenue of Acme Corp grew ...":
  present when the word is in the entity's paragraph, absent when the context never uses it;
- one absent entity of another paragraph.

Each row has 2-4 such entities (plus, for some first-family rows, one entity found verbatim,
which the rules settle and the model is not asked), ``expected`` lists them (``"A; B; C."``),
and ``gold = {"entities", "present", "level"}`` as in ``hotpotqa_entity_recall_derived``; a row
whose entities the evaluator's extraction (:func:`~logitjudge.rubrics.entities.entities_of`)
does not read back one for one is dropped. ``meta.group`` is the article, so the fit's held-out
part is articles it never saw. Nothing here comes from an evaluation set.
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

from logitjudge.rubrics.entities import check_entities, entities_of, find_in, normalise
from logitjudge.rubrics.results import level_of_share

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _results
from _results import DATA  # noqa: E402

SEED = 20251205
MONTHS = [
    "January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
    "November", "December",
]  # fmt: skip
WORDS = [
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
    "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty",
]  # fmt: skip
ORDINALS = {
    "1st": "first", "2nd": "second", "3rd": "third", "4th": "fourth", "5th": "fifth", "6th": "sixth",
    "7th": "seventh", "8th": "eighth", "9th": "ninth", "10th": "tenth", "11th": "eleventh", "12th": "twelfth",
    "13th": "thirteenth", "14th": "fourteenth", "15th": "fifteenth", "16th": "sixteenth", "17th": "seventeenth",
    "18th": "eighteenth", "19th": "nineteenth", "20th": "twentieth", "21st": "twenty-first",
}  # fmt: skip
STOP = {"with", "from", "that", "this", "which", "their", "there", "were", "have", "been", "into", "also", "other"}


def variants(entity: str) -> list[str]:
    """Other forms of ``entity`` under the rules of the module docstring (may be empty)."""
    out = []
    month = "|".join(MONTHS)
    m = re.fullmatch(rf"(\d{{1,2}}) ({month}),? (\d{{4}})", entity)
    if m:
        out += [f"{m[2]} {m[1]}, {m[3]}", f"{m[2][:3]}. {m[1]}, {m[3]}"]
    m = re.fullmatch(rf"({month}) (\d{{1,2}}),? (\d{{4}})", entity)
    if m:
        out += [f"{m[2]} {m[1]} {m[3]}", f"{m[2]} {m[1][:3]}. {m[3]}"]
    m = re.fullmatch(rf"({month}) (\d{{4}})", entity)
    if m and len(m[1]) > 4:
        out.append(f"{m[1][:3]}. {m[2]}")
    m = re.fullmatch(r"(\d{1,2})", entity)
    if m and 2 <= int(m[1]) <= 20:
        out.append(WORDS[int(m[1])])
    m = re.fullmatch(r"(\d{1,3}(?:,\d{3})+|\d{4,})", entity)
    if m:
        v = int(m[1].replace(",", ""))
        if v >= 1_000_000 and v % 1000 == 0:
            out.append(f"{v / 1e6:g} million")
        elif v >= 10_000 and v % 100 == 0 and not (1000 <= v <= 2100):
            out.append(f"{v / 1e3:g} thousand")
    m = re.fullmatch(r"(\d+(?:\.\d+)?) (million|billion)", entity)
    if m:
        v = float(m[1]) * (1e6 if m[2] == "million" else 1e9)
        if v == int(v):
            out.append(f"{int(v):,}")
    m = re.fullmatch(r"(\d+(?:\.\d+)?)%", entity)
    if m:
        out.append(f"{m[1]} percent")
    m = re.fullmatch(r"(\d{1,2}(?:st|nd|rd|th))[- ]century", entity)
    if m and m[1] in ORDINALS:
        out.append(f"{ORDINALS[m[1]]} century")
    words = entity.split()
    if 2 <= len(words) <= 4 and all(re.fullmatch(r"[A-Z][a-z]{2,}", w) for w in words):
        # "F. Ratzel": the evaluator's extraction splits a dotted initial off, so a row holding
        # one fails the read-back check below and is dropped (kept: the draws depend on it)
        out.append(" ".join(f"{w[0]}." for w in words[:-1]) + " " + words[-1])
        if len(words) >= 3:
            out.append("".join(w[0] for w in words))
    return out


def changed(entity: str, rng: random.Random) -> str | None:
    """``entity`` with its first number changed (a year by 2-40, other values scaled), or None."""
    m = re.search(r"\d[\d,]*", entity)
    if not m:
        return None
    raw = m.group(0).rstrip(",")
    v = int(raw.replace(",", ""))
    if 1000 <= v <= 2100 and "," not in raw:
        new = v + rng.choice([-1, 1]) * rng.randint(2, 40)
        text = str(new)
    else:
        new = max(2, round(v * rng.choice([0.4, 0.6, 1.5, 2.5, 3])))
        text = f"{new:,}" if "," in raw else str(new)
    return None if new == v else entity[: m.start()] + text + entity[m.start() + len(raw) :]


def distinctive_absent(entity: str, context: str) -> bool:
    """No word of ``entity`` of 4+ letters (not a stop-word) and no number of it is in ``context``."""
    norm = normalise(context)
    for w in normalise(entity).split():
        if (len(w) >= 4 and w not in STOP) or w.isdigit():
            if f" {w} " in norm:
                return False
    return True


def named(chunk: str) -> list[str]:
    """The entities of a chunk's paragraph worth asking about: several words, a number of two or
    more digits, or one capitalised word that is not a sentence's first."""
    text = chunk.split(": ", 1)[-1]
    out = []
    for e in entities_of(text):
        digits = sum(ch.isdigit() for ch in e)
        if digits == 1 or (digits == 0 and " " not in e and not re.search(rf"[a-z,] {re.escape(e)}\b", text)):
            continue
        out.append(e)
    return out


def paragraphs() -> dict[str, list[str]]:
    """SQuAD chunks (``"Title: paragraph"``) by article, in paragraph order."""
    seen: dict[str, dict[int, str]] = defaultdict(dict)
    with open(DATA / "train" / "squad_relevance" / "train.jsonl", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            meta = row["meta"]
            if meta["kind"] == "positive_own_paragraph":
                seen[meta["title"]][meta["paragraph_index"]] = row["context"][0]
    return {t: [p[k] for k in sorted(p)] for t, p in sorted(seen.items())}


def make_row(n: int, title: str, arts: dict[str, list[str]], rng: random.Random) -> dict[str, Any] | None:
    """One row: a context of the article ``title`` and 2-4 asked entities (+ maybe one verbatim)."""
    paras = arts[title]
    k = min(len(paras), rng.choice([1, 1, 2, 2, 3, 4, 6]))
    start = rng.randrange(len(paras) - k + 1)
    chunks = paras[start : start + k]
    context = "\n".join(chunks)
    inside = [e for c in chunks for e in named(c) if find_in(e, context)]
    others = [p for i, p in enumerate(paras) if not start <= i < start + k]
    if rng.random() < 0.3 or not others:
        others = arts[rng.choice([t for t in arts if t != title])]
    outside = [e for p in rng.sample(others, min(4, len(others))) for e in named(p)]
    outside = [e for e in outside if not find_in(e, context) and distinctive_absent(e, context)]
    forms = [v for e in inside for v in variants(e) if not find_in(v, context)]
    numbered = [e for e in inside if any(ch.isdigit() for ch in e)]
    picked: list[tuple[str, bool]] = []
    n_present = min(len(set(forms)), rng.choice([0, 1, 2, 2, 3]))
    wanted = n_present + rng.randint(1, 2)
    for t in range(6 * wanted):
        if len(picked) == wanted:
            break
        kind = (
            "present"
            if t < 3 * n_present and sum(p for _, p in picked) < n_present
            else rng.choice(["absent", "absent", "changed"])
        )
        value = None
        if kind == "present" and forms:
            value = rng.choice(forms)
        elif kind == "absent" and outside:
            e = rng.choice(outside)
            other = variants(e)
            value = rng.choice(other) if other and rng.random() < 0.5 else e
        elif kind == "changed" and numbered:
            value = changed(rng.choice(numbered), rng)
            if value and not distinctive_absent(re.sub(r"[^\d ]", " ", value), context):
                value = None  # the changed number is stated elsewhere in the context
        if value and all(normalise(value) != normalise(v) for v, _ in picked):
            if kind == "present" or not find_in(value, context):
                picked.append((value, kind == "present"))
    if rng.random() < 0.3 and inside:
        picked.append((rng.choice(inside), True))  # found verbatim: the rules settle it
    rng.shuffle(picked)
    if len(picked) < 2:
        return None
    expected = "; ".join(v for v, _ in picked) + "."
    got = [normalise(e) for e in entities_of(expected)]
    if got != [normalise(v) for v, _ in picked]:
        return None
    checks = check_entities(expected, context)
    for (value, present), check in zip(picked, checks):
        if (check.status == "verbatim") != (present and find_in(value, context)):
            return None
    present = [v for v, p in picked if p]
    level = level_of_share(len(present), len(picked), 3)
    return {
        "id": f"entity_recall_train:{n}",
        "evaluator": "context_entity_recall",
        "input": None,
        "output": None,
        "context": chunks,
        "expected": expected,
        "gold": {"entities": [v for v, _ in picked], "present": present, "level": level},
        "meta": {"group": title, "source": "derived from squad_relevance (SQuAD 1.1 dev, CC BY-SA 4.0)"},
    }


def rewritten(chunks: list[str], rng: random.Random) -> tuple[list[str], str] | None:
    """The chunks with one number or date of a paragraph written another way, and the entity as
    it was written (``12`` -> ``twelve``, ``1,500,000`` -> ``1.5 million``, ``21 March 1873`` ->
    ``March 21, 1873``): the context, not the entity, carries the other form."""
    month = "|".join(MONTHS)
    found = []
    for i, c in enumerate(chunks):
        head, text = c.split(": ", 1) if ": " in c else ("", c)
        for m in re.finditer(rf"\b(\d{{1,2}}) ({month}) (\d{{4}})\b", text):
            found.append((i, head, text, m.span(), m.group(0), f"{m[2]} {m[1]}, {m[3]}"))
        for m in re.finditer(r"(?<![\d.,$])\b(\d{1,2})\b(?![\d%.,])", text):
            if 2 <= int(m[1]) <= 20:
                found.append((i, head, text, m.span(), m[1], WORDS[int(m[1])]))
        for m in re.finditer(r"(?<![\d.,])\b(\d{1,3}(?:,\d{3}){2,})\b(?![\d.,])", text):
            v = int(m[1].replace(",", ""))
            if v % 10_000 == 0:
                found.append((i, head, text, m.span(), m[1], f"{v / 1e6:g} million"))
    if not found:
        return None
    i, head, text, (a, b), entity, form = rng.choice(found)
    out = list(chunks)
    out[i] = (f"{head}: " if head else "") + text[:a] + form + text[b:]
    return (out, entity) if not find_in(entity, "\n".join(out)) else None


def joined(chunks: list[str], inside: list[str], rng: random.Random) -> tuple[str, bool] | None:
    """``"<Word> of <entity>"``, the span the evaluator's extraction makes of a sentence such as
    "Revenue of Acme Corp grew": the entity is in the context; present when the word is in the
    same paragraph too, absent when it is a word the context never uses."""
    context = normalise("\n".join(chunks))
    for _ in range(10):
        e = rng.choice(inside)
        para = next((c for c in chunks if find_in(e, c)), None)
        if para is None or any(ch.isdigit() for ch in e):
            continue
        words = [w for w in re.findall(r"\b[a-z]{5,}\b", para) if w not in STOP]
        if not words:
            continue
        if rng.random() < 0.5:
            return f"{rng.choice(words).title()} of {e}", True
        other = [
            w
            for w in ("income", "profits", "deaths", "founder", "budget", "anthem", "museum", "rivals")
            if f" {w} " not in context
        ]
        return (f"{rng.choice(other).title()} of {e}", False) if other else None
    return None


def make_extra_row(n: int, title: str, arts: dict[str, list[str]], rng: random.Random) -> dict[str, Any] | None:
    """One row of the second family (``--extra``): a context with a number or date rewritten
    (:func:`rewritten`, present) and a ``"<Word> of <entity>"`` span (:func:`joined`), plus one
    absent entity of another paragraph."""
    paras = arts[title]
    k = min(len(paras), rng.choice([1, 2, 3, 4, 6]))
    start = rng.randrange(len(paras) - k + 1)
    chunks = paras[start : start + k]
    picked: list[tuple[str, bool]] = []
    got = rewritten(chunks, rng)
    if got is not None:
        chunks, entity = got
        picked.append((entity, True))
    context = "\n".join(chunks)
    inside = [e for c in chunks for e in named(c) if find_in(e, context) and " " in e]
    if inside:
        span = joined(chunks, inside, rng)
        if span is not None and not find_in(span[0], context):
            picked.append(span)
    others = [p for i, p in enumerate(paras) if not start <= i < start + k] or arts[rng.choice(sorted(arts))]
    outside = [e for p in rng.sample(others, min(3, len(others))) for e in named(p)]
    outside = [e for e in outside if not find_in(e, context) and distinctive_absent(e, context)]
    if outside:
        picked.append((rng.choice(outside), False))
    rng.shuffle(picked)
    if len(picked) < 2 or len({normalise(v) for v, _ in picked}) < len(picked):
        return None
    expected = "; ".join(v for v, _ in picked) + "."
    if [normalise(e) for e in entities_of(expected)] != [normalise(v) for v, _ in picked]:
        return None
    if any(c.status != "ask" for c in check_entities(expected, context)):
        return None
    present = [v for v, p in picked if p]
    return {
        "id": f"entity_recall_train:x{n}",
        "evaluator": "context_entity_recall",
        "input": None,
        "output": None,
        "context": chunks,
        "expected": expected,
        "gold": {
            "entities": [v for v, _ in picked],
            "present": present,
            "level": level_of_share(len(present), len(picked), 3),
        },
        "meta": {"group": title, "source": "derived from squad_relevance (SQuAD 1.1 dev, CC BY-SA 4.0)"},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="the JSONL file to write")
    ap.add_argument("--contexts", type=int, default=700, help="rows of the first family (default 700)")
    ap.add_argument("--extra", type=int, default=300, help="rows of the second family (default 300)")
    args = ap.parse_args(argv)
    arts = paragraphs()
    rng = random.Random(SEED)
    rows: list[dict[str, Any]] = []
    n = 0
    while len(rows) < args.contexts:
        row = make_row(n, rng.choice(sorted(arts)), arts, rng)
        n += 1
        if row is not None:
            rows.append(row)
    rng = random.Random(SEED + 1)
    extra = 0
    while extra < args.extra:
        row = make_extra_row(n, rng.choice(sorted(arts)), arts, rng)
        n += 1
        if row is not None:
            rows.append(row)
            extra += 1
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    asked = [
        (row, c)
        for row in rows
        for c in check_entities(row["expected"], "\n".join(row["context"]))
        if c.status == "ask"
    ]
    pos = sum(normalise(c.entity) in {normalise(p) for p in row["gold"]["present"]} for row, c in asked)
    print(
        f"{len(rows)} rows ({n} tried), {len(asked)} asked entities: {pos} present in another form, "
        f"{len(asked) - pos} absent -> {args.out}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
