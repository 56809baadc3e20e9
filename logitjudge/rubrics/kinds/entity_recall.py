"""``entity_recall``: the entities of ``expected`` (names, numbers, dates, quoted terms) checked
against the context by rules, a yes/no question for each the rules leave open; the level from the
share present."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar

from logitjudge.contract.evaluate import ChunkDetail, EvaluatorResult, Item
from logitjudge.engine.answers import decisiveness
from logitjudge.rubrics.entities import EntityCheck, normalise
from logitjudge.rubrics.kinds.base import Answers, HeadExample, ScoringKind
from logitjudge.rubrics.questions import Planned, QuestionKey, entity_checks, fields_group, fields_state, noul_question
from logitjudge.rubrics.results import (
    base_fields,
    clip01,
    level_label,
    level_of_share,
    percent_label,
    share_levels,
    skipped,
)

if TYPE_CHECKING:
    from logitjudge.engine.calibration import Scaling
    from logitjudge.rubrics.definitions import EvaluatorDef

__all__ = ["EntityRecall", "score_entity_recall"]


def score_entity_recall(
    defn: EvaluatorDef, answers: Answers, threshold: float, checks: Sequence[EntityCheck]
) -> EvaluatorResult:
    """Entities of ``expected`` and what the rules settle about each
    (:func:`logitjudge.rubrics.entities.check_entities`): one found verbatim in the context is
    present (p = 1); one holding a digit where the context states no number is absent (p = 0);
    otherwise p = P(yes) of the model's question "does the context mention it, or the same thing
    written another way?" (read by the definition's trained ``head`` when it has one), and the
    entity counts as present when p >= 0.5 (the model's verdict).

    The level is that of the verdicts: k present of N maps to the page's level
    (:func:`~logitjudge.rubrics.results.level_of_share`); score = level / top, ``label``
    "L.0 / top", passed when score >= threshold. ``probabilities`` per level are the
    uncertainty around it: the level's distribution if each entity were present with its p
    independently (Poisson-binomial, :func:`~logitjudge.rubrics.results.share_levels`), and
    ``confidence`` is the probability of the reported level under it.
    (The verdicts, not the expected level, carry the score: the model's P(yes) for an entity it
    cannot find sits near 0.3-0.45, and summing such near-misses over several entities made an
    absent set of entities look "a few present".) ``details``: one per entity (label
    ``"<entity>": verbatim``, ``"<entity>": no number in the context`` or its "nn% yes").
    """
    name = defn.name
    top = defn.top_level
    ps, details = [], []
    for k, check in enumerate(checks):
        if check.status == "ask":
            p = answers[QuestionKey(name, entity=k)].p_yes()
            how = percent_label(p)
        else:
            p = 1.0 if check.status == "verbatim" else 0.0
            how = "verbatim" if check.status == "verbatim" else "no number in the context"
        ps.append(p)
        label = f"{json.dumps(check.entity, ensure_ascii=False)}: {how}"
        details.append(
            ChunkDetail(index=k, label=label, score=p, probability=p, confidence=decisiveness(p), passed=p >= 0.5)
        )
    level = level_of_share(sum(d.passed for d in details), len(details), top)
    levels = share_levels(ps, top)
    return EvaluatorResult(
        **base_fields(defn, threshold),
        score=level / top,
        label=level_label(level, top),
        confidence=clip01(levels[level]),
        probabilities={str(i): p for i, p in enumerate(levels)},
        legend={str(i): lv for i, lv in enumerate(defn.levels or ())},
        passed=level / top >= threshold,
        details=details,
    )


class EntityRecall(ScoringKind):
    """Over a state of ``state_fields`` (default: the context alone), the ``entity_template``
    noul for each entity of ``expected`` the rules leave open (key ``entity=k``), read by the
    definition's ``head`` when it names one: :func:`score_entity_recall`; ``skipped`` when
    ``expected`` holds no entity. ``question_type`` (score) is the result's shape."""

    name = "entity_recall"
    head_gold = "gold.entities and gold.present, for entities its rules leave to the model"
    question_type = "score"
    fields: ClassVar[Mapping[str, bool]] = {"entity_template": True, "head": False}
    needs_template = False

    def placeholders(self, defn: EvaluatorDef) -> frozenset[str]:
        return frozenset({"entity"})

    def texts(self, defn: EvaluatorDef) -> list[str]:
        return [defn.entity_template] if defn.entity_template else []

    def check(self, defn: EvaluatorDef) -> None:
        if "{entity}" not in (defn.entity_template or ""):
            raise ValueError(f"{defn.name}: entity_template must quote {{entity}}")

    def questions(self, defn: EvaluatorDef, item: Item, *, field: tuple[str | int, ...] = ("question",)) -> Planned:
        fields = defn.state_fields or ("context",)
        state = fields_state(item, fields, present=False)
        head = defn.head.name if defn.head is not None else None
        planned = Planned()
        for k, check in enumerate(entity_checks(item)):
            if check.status == "ask":
                text = (defn.entity_template or "").replace("{entity}", json.dumps(check.entity, ensure_ascii=False))
                question = replace(noul_question(text), head=head)
                planned.add(fields_group(fields), state, QuestionKey(defn.name, entity=k), question)
        return planned

    def head_examples(self, defn: EvaluatorDef, item: Item, gold: Mapping[str, Any]) -> list[HeadExample] | None:
        """Per entity the rules leave to the model (the questions :meth:`questions` asks),
        labelled by the row's gold: ``gold.entities`` (the reference's entities) and
        ``gold.present`` (those the context states, in any form), matched after
        :func:`~logitjudge.rubrics.entities.normalise`; an entity the gold does not list is left out."""
        listed = {normalise(str(e)) for e in gold.get("entities") or ()}
        present = {normalise(str(e)) for e in gold.get("present") or ()}
        if not listed:
            return []
        checks = entity_checks(item)
        out = []
        for state, questions in self.questions(defn, item).groups.values():
            for key, question in questions.items():
                entity = normalise(checks[key.entity or 0].entity)
                if entity in listed:
                    label = "true" if entity in present else "false"
                    out.append(HeadExample(f"@{key.entity}", state, replace(question, head=None), label))
        return out

    def score(
        self,
        defn: EvaluatorDef,
        answers: Answers,
        threshold: float,
        item: Item,
        *,
        baseline: Answers | None = None,
        scaling: Scaling | None = None,
    ) -> EvaluatorResult:
        checks = entity_checks(item)
        if not checks:
            return skipped(defn, "no entity (name, number, date or quoted term) found in `expected`")
        return score_entity_recall(defn, answers, threshold, checks)
