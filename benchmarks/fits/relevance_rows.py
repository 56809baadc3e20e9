"""Training rows for the head of ``chunk_relevance``: a seeded sample of ``squad_relevance`` by paragraph.

    python benchmarks/fits/relevance_rows.py --out .cache/relevance_rows.jsonl [--paragraphs 300]
    logitjudge fit .cache/relevance_rows.jsonl --evaluator chunk_relevance --out heads/

``chunk_relevance`` asks over each chunk alone, so a paragraph is one state and every question
asked about it (as its own paragraph: relevant; as a negative: not) shares that state's pass.
This script takes ``--paragraphs`` paragraphs at random (seed 20251205) and every row whose chunk
is one of them, so a fit's features cost one pass per paragraph, not per row. ``meta.group`` is
the article: the fit's held-out part is articles it never saw (the same question also appears
on another article's paragraph only as a negative). The rows are ``squad_relevance``'s own
(SQuAD 1.1 dev, CC BY-SA 4.0), unchanged apart from ``meta.group``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _results
from _results import DATA  # noqa: E402

SEED = 20251205


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="the JSONL file to write")
    ap.add_argument("--paragraphs", type=int, default=300, help="paragraphs to sample (default 300)")
    args = ap.parse_args(argv)
    path = DATA / "train" / "squad_relevance" / "train.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    chunks = sorted({r["context"][0] for r in rows})
    picked = set(random.Random(SEED).sample(chunks, args.paragraphs))
    out = [{**r, "meta": {**r["meta"], "group": r["meta"]["title"]}} for r in rows if r["context"][0] in picked]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        for r in out:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    relevant = sum(r["gold"]["per_chunk"][0] for r in out)
    print(
        f"{len(out)} rows over {len(picked)} paragraphs: {relevant} relevant, {len(out) - relevant} not -> {args.out}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
