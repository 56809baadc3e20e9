"""The hosted evaluators' pages, as acceptance tests on the default model (Qwen2.5-Coder-1.5B).

Each page's own example must give the page's verdict, and a change that should flip the verdict
must flip it. The requests are the pages' exact ones (``POST /api/v1/evaluate`` bodies); the
verdicts are the pages' words:

- chunk_relevance: "Chunks 1 and 4 relevant, 2 and 3 not: precision 2/4."
- chunk_support: "Chunk 1 supports, chunk 2 unrelated, chunk 3 contradicts (legacy billing)."
- answer_relevancy: "Level 2: answers, then pads." (fails at the 75% threshold)
- context_entity_recall: "Level 3: both entities present."

The model is the main one (``make test`` installs it): these are behaviour tests, which the
embedded 135M is too small to pass.
"""

from __future__ import annotations

import pytest

from logitjudge.settings import MAIN_MODEL

PRICING_CHUNKS = [
    "Price: $42 per billion input tokens. Output tokens are free.",
    "Rate limits: 1,200 rpm.",
    "Founded in 2024.",
    "Output billed at $8/M on the legacy v0 endpoint, deprecated.",
]


@pytest.fixture(scope="module")
def main_judge():
    from logitjudge import Judge

    judge = Judge.load(MAIN_MODEL)
    yield judge
    judge.close()


def _one(judge, item, evaluator):
    run = judge.evaluate([item], [evaluator])
    return run.results[0].results[evaluator.split("@")[0]]


def test_chunk_relevance_page(main_judge):
    item = {"input": "How is Jev priced, and are output tokens billed?", "output": "…", "context": PRICING_CHUNKS}
    res = _one(main_judge, item, "chunk_relevance")
    assert [d.passed for d in res.details] == [True, False, False, True]
    assert res.score == 0.5 and res.label == "50% yes" and res.passed is True
    assert res.probabilities == {"yes": 0.5, "no": 0.5}
    assert res.x_warning is None  # the engine its coefficients were fitted on


def test_chunk_relevance_irrelevant_chunks_are_not_relevant(main_judge):
    item = {
        "input": "How is Jev priced, and are output tokens billed?",
        "context": [
            "Rate limits: 1,200 requests per minute.",
            "The company was founded in 2024.",
            "Headquarters: San Francisco, California.",
            "The logo is a blue circle with a white J.",
        ],
    }
    res = _one(main_judge, item, "chunk_relevance")
    assert [d.passed for d in res.details] == [False] * 4
    assert res.score == 0.0 and res.passed is False


KNOWN_GAP = (
    "a known gap of the default model, measured: docs/reference/evaluators.md (strict: a pass means update this)"
)


def test_chunk_support_page(main_judge):
    item = {
        "output": "Jev is billed per input token at $0.042 per million; output tokens are free.",
        "context": [
            "Price: $42 per billion input tokens. Output tokens are free.",
            "Founded in 2024.",
            "Output billed at $8/M on the legacy v0 endpoint.",
        ],
    }
    res = _one(main_judge, item, "chunk_support")
    assert [d.label for d in res.details] == ["supports", "unrelated", "contradicts"]
    assert res.label == "contradicts" and res.passed is False
    assert set(res.probabilities) == {"supports", "contradicts", "unrelated"}


def test_chunk_support_an_explicit_contradiction_contradicts(main_judge):
    item = {
        "output": "Output tokens are free.",
        "context": ["Output tokens are billed at $8 per million tokens.", "Output tokens are free of charge."],
    }
    res = _one(main_judge, item, "chunk_support")
    assert [d.label for d in res.details] == ["contradicts", "supports"]


NODE_QUESTION = "What is the minimum Node version for the SDK?"
PADDED = (
    "Node 20 or newer. As background, the SDK ships ESM and CommonJS builds, includes TypeScript "
    "declarations, and many teams also use pnpm."
)


def test_answer_relevancy_page(main_judge):
    """The page's padded answer fails; the same answer without padding passes and scores higher;
    a reply of pleasantries fails and scores lower."""
    res = _one(main_judge, {"input": NODE_QUESTION, "output": PADDED}, "answer_relevancy")
    assert res.passed is False and res.version == "2"
    direct = _one(main_judge, {"input": NODE_QUESTION, "output": "Node 20 or newer."}, "answer_relevancy")
    assert direct.passed is True and direct.score > res.score
    fluff = _one(
        main_judge,
        {
            "input": NODE_QUESTION,
            "output": "Great question! Thanks for reaching out, we love hearing from you. Have a wonderful day!",
        },
        "answer_relevancy",
    )
    assert fluff.passed is False and fluff.score < res.score


def test_answer_relevancy_page_expected_level_rounds_to_2(main_judge):
    """The padded answer's expected level is nearer 2 than 1 or 3 (1.5 <= E[level] < 2.5) and it
    fails. The levels behind it are split, not level 2: on the default model most of the mass is
    on level 1 with the rest on level 3 (docs/reference/evaluators.md), so the label, floored to
    one decimal, reads 1.6 or 1.7 where the page shows 2.2 (the strict xfail below)."""
    res = _one(main_judge, {"input": NODE_QUESTION, "output": PADDED}, "answer_relevancy")
    expected = sum(int(level) * p for level, p in res.probabilities.items())
    assert 1.5 <= expected < 2.5 and res.passed is False


@pytest.mark.xfail(strict=True, reason=f"answer_relevancy@2 rates the padded answer 1.6 / 3; {KNOWN_GAP}")
def test_answer_relevancy_page_level_is_2(main_judge):
    res = _one(main_judge, {"input": NODE_QUESTION, "output": PADDED}, "answer_relevancy")
    assert res.label.startswith("2.")  # "Level 2: answers, then pads."


def test_context_entity_recall_page(main_judge):
    item = {
        "expected": "$0.042 per million input tokens; output tokens are free.",
        "context": ["Price: $42 per billion input tokens ($0.042 per million). Output tokens are free."],
        "output": "…",
    }
    res = _one(main_judge, item, "context_entity_recall")
    assert res.label == "3.0 / 3" and res.passed is True


def test_context_entity_recall_a_context_without_the_price_fails(main_judge):
    item = {
        "expected": "$0.042 per million input tokens; output tokens are free.",
        "context": ["Output tokens are free."],
    }
    low = _one(main_judge, item, "context_entity_recall")
    assert low.passed is False and low.label == "0.0 / 3"
    assert [d.label for d in low.details] == ['"$0.042": no number in the context']


def test_context_entity_recall_counts_an_entity_written_differently(main_judge):
    """Q3 / third quarter: not the same string, the same entity (the model's branch decides)."""
    item = {
        "expected": "Revenue of Acme Corp grew in Q3 2024.",
        "context": ["Acme Corp reported that revenue grew in the third quarter of 2024."],
    }
    res = _one(main_judge, item, "context_entity_recall")
    q3 = [d for d in res.details if '"Q3' in d.label]
    assert q3 and all(d.passed for d in q3)
    assert res.passed is True
    other = _one(
        main_judge,
        dict(item, context=["Acme Corp reported that revenue grew in the first quarter of 2021."]),
        "context_entity_recall",
    )
    assert other.score < res.score


# Variations of the pages' examples: the same verdicts on other wordings, orders and domains,
# so a pass above is the method's, not the example's.

RELEVANCE_VARIATIONS = [
    pytest.param(
        "How is Jev priced, and are output tokens billed?",
        [
            "Founded in 2024.",
            "Price: $42 per billion input tokens. Output tokens are free.",
            "Output billed at $8/M on the legacy v0 endpoint, deprecated.",
            "Rate limits: 1,200 rpm.",
        ],
        [False, True, True, False],
        id="page-reordered",
    ),
    pytest.param(
        "How is Jev priced, and are output tokens billed?",
        [
            "Pricing: input costs $0.042 per million tokens; there is no charge for output.",
            "Our office is in Berlin.",
            "API keys rotate every 90 days.",
            "Legacy endpoint: output tokens cost $8 per million.",
        ],
        [True, False, False, True],
        id="page-paraphrased",
    ),
    pytest.param(
        "What is the maximum upload size, and are videos accepted?",
        [
            "Uploads are limited to 2 GB per file.",
            "Support is available 24/7 by email.",
            "The app supports dark mode.",
            "Video files (MP4, MOV) are accepted.",
        ],
        [True, False, False, True],
        id="uploads",
    ),
    pytest.param(
        "What is the adult dose of ibuprofen, and can it be taken with food?",
        [
            "The clinic is open Monday to Friday.",
            "Adults may take 200-400 mg of ibuprofen every 4 to 6 hours.",
            "Ibuprofen can be taken with food or milk to reduce stomach upset.",
            "Parking is free for patients.",
        ],
        [False, True, True, False],
        id="medical",
    ),
]


@pytest.mark.parametrize(("question", "chunks", "relevant"), RELEVANCE_VARIATIONS)
def test_chunk_relevance_page_variations(main_judge, question, chunks, relevant):
    res = _one(main_judge, {"input": question, "output": "…", "context": chunks}, "chunk_relevance")
    assert [d.passed for d in res.details] == relevant
    assert res.score == sum(relevant) / len(relevant)


def test_chunk_support_page_pattern_on_a_changed_time(main_judge):
    """The page's pattern (supports, unrelated, contradicts) where the third chunk changes a value."""
    item = {
        "output": "The train to Paris leaves at 10:15.",
        "context": [
            "Departure to Paris: 10:15, platform 4.",
            "Tickets can be bought online.",
            "The train to Paris leaves at 11:40.",
        ],
    }
    res = _one(main_judge, item, "chunk_support")
    assert [d.label for d in res.details] == ["supports", "unrelated", "contradicts"]
    assert res.label == "contradicts" and res.passed is False


@pytest.mark.parametrize(
    ("question", "direct", "padded"),
    [
        pytest.param(
            "What is the minimum Python version for the library?",
            "Python 3.10 or newer.",
            "Python 3.10 or newer. As background, the library was first released in 2019, its logo is a "
            "snake, and it is popular with data teams.",
            id="python",
        ),
        pytest.param(
            "What is the capital of Australia?",
            "Canberra is the capital of Australia.",
            "Canberra is the capital of Australia. It is also known for kangaroos, the Great Barrier Reef "
            "and its beaches, and many tourists visit Sydney.",
            id="capital",
        ),
    ],
)
def test_answer_relevancy_page_variations(main_judge, question, direct, padded):
    """As the page: the direct answer passes, the same answer padded fails and scores lower."""
    bare = _one(main_judge, {"input": question, "output": direct}, "answer_relevancy")
    pads = _one(main_judge, {"input": question, "output": padded}, "answer_relevancy")
    assert bare.passed is True and pads.passed is False and bare.score > pads.score


def test_answer_relevancy_an_off_topic_answer_fails_below_the_padded_one(main_judge):
    off = _one(
        main_judge,
        {"input": NODE_QUESTION, "output": "Our SDK is available on GitHub under the MIT license."},
        "answer_relevancy",
    )
    padded = _one(main_judge, {"input": NODE_QUESTION, "output": PADDED}, "answer_relevancy")
    assert off.passed is False and off.score < padded.score


def test_context_entity_recall_page_variations(main_judge):
    """Every entity present, one written out in words (level 3); the height missing (fails)."""
    expected = "The Eiffel Tower is 330 metres tall and opened in 1889."
    words = _one(
        main_judge,
        {
            "expected": expected,
            "context": ["The Eiffel Tower opened in 1889. It is about three hundred and thirty metres tall."],
        },
        "context_entity_recall",
    )
    assert words.label == "3.0 / 3" and words.passed is True
    missing = _one(
        main_judge,
        {"expected": expected, "context": ["The Eiffel Tower opened in 1889 and has 1,665 steps."]},
        "context_entity_recall",
    )
    assert missing.passed is False and missing.score < words.score
