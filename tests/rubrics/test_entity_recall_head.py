"""context_entity_recall@3 on the default model: the shipped head reads whether a long context
states an entity that the rules cannot find verbatim.

The cases were written before the first head was trained and are not tuned one by one: entities
the context states in another form (a reordered date, a number in words or in another scale, an
acronym spelled out, a quarter in words) count as present; entities it does not state at all get
P(present) < 0.2 in a long context, the case where the label readout of version 2 said "yes". The
shipped head's second family of training rows (numbers and dates reworded, "<Word> of <entity>")
was added after the first head failed "12" and the page's "Revenue of Acme Corp", so those two
are no longer blind. The acronym is a known gap, marked as a strict xfail.
Without a head for the engine, version 2 answers and says so (``x_warning`` naming ``logitjudge fit``).
"""

from __future__ import annotations

import pytest

from logitjudge.rubrics.api import evaluate
from logitjudge.rubrics.entities import check_entities
from logitjudge.settings import MAIN_MODEL


@pytest.fixture(scope="module")
def main_judge():
    from logitjudge import Judge

    judge = Judge.load(MAIN_MODEL)
    yield judge
    judge.close()


LONG_CONTEXT = [
    "Millbrook: Millbrook is a river town in the northern valley, founded by timber merchants on March 21, "
    "1873. Its old quarter sits on both banks of the Tessel, joined by twelve bridges, most of them built of "
    "local granite in the decades after the founding.",
    "Millbrook economy: The town lives on tourism and light industry. It received about 1,500,000 visitors in "
    "the last census year, most of them in summer, and its largest employer makes pumps and valves for "
    "irrigation. Revenue of the regional tourism board grew in the third quarter of 2024 after a new rail line "
    "opened.",
    "Millbrook science: A field station of the National Aeronautics and Space Administration tracks weather "
    "balloons from the hills west of the town, and a small observatory run by volunteers opens to the public "
    "on clear Friday nights. The station employs 40 people.",
    "Millbrook culture: The town holds a music festival every August, with brass bands from the surrounding "
    "villages, and a market on Saturdays that sells cheese, honey and woollen goods. The festival began as a "
    "harvest fair and moved to the main square when the covered market was rebuilt.",
    "Millbrook geography: The Tessel floods in most springs; a levee built along the east bank protects the "
    "old quarter, and the meadows downstream are kept as a nature reserve for wading birds. The valley is "
    "narrow, and the town has grown along the river rather than up the hillsides.",
]

ACRONYM_GAP = pytest.mark.xfail(
    strict=True,
    reason="a known gap: the head gives an acronym spelled out in a long context P(present) < 0.1; "
    "its training rows hold no acronyms",
)


def _case(expected: str, entity: str, *marks: pytest.MarkDecorator):
    return pytest.param(expected, entity, id=entity, marks=marks)


EQUIVALENTS = [
    _case("Millbrook was founded on 21 March 1873.", "21 March 1873"),
    _case("Millbrook had 1.5 million visitors.", "1.5 million"),
    _case("Millbrook has 12 bridges.", "12"),
    _case("A NASA field station is near Millbrook.", "NASA", ACRONYM_GAP),
    _case("Tourism revenue grew in Q3 2024.", "Q3 2024"),
]

ABSENT = [
    _case("Millbrook is twinned with Hamburg.", "Hamburg"),
    _case("The observatory was opened by Marie Curie.", "Marie Curie"),
    _case("The levee was finished in 1987.", "1987"),
    _case("The rail line cost $3.2 billion.", "$3.2 billion"),
    _case("The pump maker belongs to Siemens Energy.", "Siemens Energy"),
    _case("The festival is sponsored by the Royal Philharmonic Society.", "Royal Philharmonic Society"),
]


def _asked(judge, expected: str, entity: str) -> tuple[float, object]:
    """The head's P(present) for ``entity`` of ``expected``: the one entity the rules leave to the
    model (any other is found verbatim)."""
    checks = check_entities(expected, "\n".join(LONG_CONTEXT))
    asked = [c.entity for c in checks if c.status == "ask"]
    assert asked == [entity] and all(c.status in ("ask", "verbatim") for c in checks), checks
    run = evaluate(judge, [{"expected": expected, "context": LONG_CONTEXT}], "context_entity_recall")
    res = run.results[0].results["context_entity_recall"]
    assert res.version == "3" and res.x_warning is None, res.x_warning
    (detail,) = [d for d in res.details if d.label.startswith(f'"{entity}"')]
    return detail.probability, res


@pytest.mark.parametrize(("expected", "entity"), EQUIVALENTS)
def test_an_entity_stated_in_another_form_is_present(main_judge, expected, entity):
    p, res = _asked(main_judge, expected, entity)
    assert p >= 0.5 and res.score == 1.0, (entity, p)


@pytest.mark.parametrize(("expected", "entity"), ABSENT)
def test_an_absent_entity_in_a_long_context_is_absent(main_judge, expected, entity):
    p, res = _asked(main_judge, expected, entity)
    assert p < 0.2 and res.score < 1.0, (entity, p)


def test_without_a_head_version_2_answers_and_says_so():
    from logitjudge import Judge

    judge = Judge.load(MAIN_MODEL, heads="none")
    try:
        run = evaluate(judge, [{"expected": "Hamburg", "context": LONG_CONTEXT}], "context_entity_recall")
        res = run.results[0].results["context_entity_recall"]
        assert res.version == "2" and "logitjudge fit" in (res.x_warning or "")
    finally:
        judge.close()
