"""The scoring kinds: one module each, registered under the catalogue's name, documented, and
checking the definition fields only they take; their questions' typed keys."""

from __future__ import annotations

import pkgutil
import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from logitjudge.contract.evaluate import Item
from logitjudge.rubrics import kinds
from logitjudge.rubrics.definitions import EvaluatorDef
from logitjudge.rubrics.kinds import KIND_FIELDS, KINDS, kind_of
from logitjudge.rubrics.kinds.base import ScoringKind, SequenceKind
from logitjudge.rubrics.questions import LIKELIHOOD, QuestionKey
from logitjudge.rubrics.registry import default_registry
from logitjudge.rubrics.scoring import SCALED_SCORINGS, score_answers

ROOT = Path(__file__).resolve().parents[2]
DEFINITIONS = sorted(default_registry().versions.items())

ITEM = Item.model_validate(
    {
        "input": "How is Jev priced?",
        "output": "Jev costs $42 per billion input tokens; output is free. It launched in 2024.",
        "expected": "$42 per billion input tokens (Jev, 2024).",
        "context": ["Price: $42 per billion input tokens.", "SECRET-PELICAN founded in 2024.", "Dogs bark."],
    }
)


def _section(text: str, heading: str) -> str:
    """The text of the Markdown section under ``heading`` (up to the next heading of its level or above)."""
    level = heading.split(" ", 1)[0]
    start = text.index(heading + "\n")
    rest = text[start + len(heading) + 1 :]
    nxt = re.search(rf"^#{{1,{len(level)}}} ", rest, re.M)
    return rest[: nxt.start()] if nxt else rest


def test_every_kind_module_registers_one_kind_under_its_module_name():
    """Adding a kind is a module of the package: a module whose kind is not in KINDS (or a
    kind named other than its module) fails here."""
    modules = {m.name for m in pkgutil.iter_modules(kinds.__path__)} - {"base"}
    assert modules == set(KINDS)
    for name, kind in KINDS.items():
        assert isinstance(kind, ScoringKind) and kind.name == name
        assert type(kind).__module__ == f"logitjudge.rubrics.kinds.{name}"


@pytest.mark.parametrize("name", sorted(KINDS))
def test_every_kind_is_documented_in_contributing_and_the_evaluators_reference(name):
    contributing = _section((ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8"), "## Add a scoring kind")
    assert re.search(rf"^\| `{name}` \| `logitjudge/rubrics/kinds/{name}\.py` \|", contributing, re.M), name
    reference = _section((ROOT / "docs/reference/evaluators.md").read_text(encoding="utf-8"), "## Scoring kinds")
    assert re.search(rf"^\| `{name}` \|", reference, re.M), name


def test_contributing_names_the_real_dispatch():
    contributing = _section((ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8"), "## Add a scoring kind")
    for name in ("KINDS", "logitjudge/rubrics/kinds/__init__.py", "kind_of", "score_evaluator", "QuestionKey"):
        assert name in contributing
    assert "_SCORERS" not in (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")


def test_kind_fields_are_optional_fields_of_a_definition():
    for field in KIND_FIELDS:
        assert not EvaluatorDef.model_fields[field].is_required(), field
    assert {"likelihood", "combine", "probes", "classes", "head", "contrast", "chunk_state"} <= KIND_FIELDS


def test_the_scaled_kinds_are_probability_and_rubric():
    assert SCALED_SCORINGS == ("probability", "rubric")


def test_an_unknown_scoring_is_refused_naming_the_kinds():
    defn = default_registry().get("possible").model_dump()
    with pytest.raises(ValidationError, match=r"unknown scoring 'probabilities' \(known: probability, rubric"):
        EvaluatorDef.model_validate({**defn, "scoring": "probabilities"})


@pytest.mark.parametrize(("key", "defn"), DEFINITIONS, ids=[k for k, _ in DEFINITIONS])
def test_a_definition_without_a_field_its_kind_needs_is_refused(key, defn):
    needed = [f for f, required in kind_of(defn).fields.items() if required]
    for field in needed:
        raw = defn.model_dump()
        raw[field] = EvaluatorDef.model_fields[field].default
        with pytest.raises(ValidationError, match=f"{defn.scoring} scoring needs {field}"):
            EvaluatorDef.model_validate(raw)


@pytest.mark.parametrize(("key", "defn"), DEFINITIONS, ids=[k for k, _ in DEFINITIONS])
def test_a_definition_with_another_kinds_field_is_refused(key, defn):
    donors = {
        f: d for _, d in DEFINITIONS for f in KIND_FIELDS if getattr(d, f) != EvaluatorDef.model_fields[f].default
    }
    for field in sorted(KIND_FIELDS - set(kind_of(defn).fields)):
        raw = {**defn.model_dump(), field: getattr(donors[field], field)}
        with pytest.raises(ValidationError, match=rf"{field} is for .* scoring, not '{defn.scoring}'"):
            EvaluatorDef.model_validate(raw)


def test_chunk_support_over_each_chunk_alone_is_refused_at_load():
    """A ``chunk_support`` definition with ``chunk_state`` used to load and then fail every item
    (its questions were yes/no, its scoring read choices); it is refused at load now."""
    raw = default_registry().versions["chunk_support@1"].model_dump()
    with pytest.raises(ValidationError, match="chunk_state is for chunk_precision, chunk_evidence"):
        EvaluatorDef.model_validate({**raw, "version": "9", "chunk_state": True, "template": "Bears on {output}?"})


def test_contrast_over_some_fields_only_is_refused_at_load():
    """The contrast twin is the whole item's request without ``context``; a definition asking over
    ``state_fields`` had no twin, and every item failed while scoring."""
    raw = default_registry().get("faithfulness").model_dump()
    with pytest.raises(ValidationError, match=r"contrast 'context' needs .* \(no state_fields\)"):
        EvaluatorDef.model_validate({**raw, "version": "9", "state_fields": ["output", "context"]})
    assert EvaluatorDef.model_validate({**raw, "version": "9", "contrast": None, "state_fields": ["output", "context"]})


def test_keys_read_as_their_place():
    assert str(QuestionKey("faithfulness")) == "faithfulness"
    assert str(QuestionKey("chunk_relevance", chunk=3)) == "chunk_relevance.3"
    assert str(QuestionKey("chunk_relevance", null=True, part=LIKELIHOOD)) == "chunk_relevance.null.lik"
    assert str(QuestionKey("chunk_support", chunk=0, claim=2, part="shows_true")) == "chunk_support.0.c2.shows_true"
    assert str(QuestionKey("context_entity_recall", entity=1)) == "context_entity_recall.e1"
    assert str(QuestionKey("answer_relevancy", sentence=0)) == "answer_relevancy.s0"


@pytest.mark.parametrize(("key", "defn"), DEFINITIONS, ids=[k for k, _ in DEFINITIONS])
def test_each_question_has_its_own_key_in_its_evaluators_namespace(key, defn):
    if defn.question_type == "typed":
        item = ITEM.model_copy(update={"question": {"type": "noul", "instructions": "Is it priced?"}})
    else:
        item = ITEM
    planned = kind_of(defn).questions(defn, item)
    keys = planned.keys()
    assert keys and len(set(keys)) == len(keys)
    assert all(k.evaluator == defn.name for k in keys)
    if kind_of(defn).per_chunk:
        assert {k.chunk for k in keys if not k.null} == {0, 1, 2}


def test_score_answers_is_for_kinds_that_ask_over_the_whole_item():
    assert {n for n, k in KINDS.items() if isinstance(k, SequenceKind)} == {
        "probability",
        "rubric",
        "chunk_precision",
        "chunk_support",
        "claim_share",
        "typed_question",
    }
    with pytest.raises(ValueError, match="reads its answers by key"):
        score_answers(default_registry().get("context_entity_recall"), [])
