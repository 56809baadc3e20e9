"""What a scoring kind is: the protocol every kind implements, and the helpers several share.

A scoring kind (the catalogue's ``"scoring": "<name>"``) is one class in one module of this
package. It declares what a definition of its kind looks like (its question type, whether it asks
per chunk or per claim, the definition fields only it takes) and checks the rest of what it needs
(:meth:`ScoringKind.check`, run when a definition loads); it builds an item's questions under typed
keys (:meth:`ScoringKind.questions`); and it turns their answers, read back by the same keys, into
the evaluator's result (:meth:`ScoringKind.score`). What every kind shares (field references in
templates, option and level counts, required fields) is checked once, by
:class:`~logitjudge.rubrics.definitions.EvaluatorDef`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from logitjudge.contract.evaluate import EvaluatorResult, Item
from logitjudge.engine.types import Question
from logitjudge.rubrics.questions import (
    Planned,
    QuestionKey,
    build_questions,
    fields_group,
    fields_state,
    uncalibrated,
)
from logitjudge.rubrics.results import Answered

if TYPE_CHECKING:
    from logitjudge.engine.calibration import Scaling
    from logitjudge.rubrics.definitions import EvaluatorDef

__all__ = [
    "QuestionType",
    "Answers",
    "HeadExample",
    "ScoringKind",
    "SequenceKind",
    "need_support_options",
    "check_classes",
]

QuestionType = Literal["noul", "choice", "score", "typed"]
"""A definition's ``question_type`` (``typed``: the item brings its own question)."""

Answers = Mapping[QuestionKey, Answered]
"""An evaluator's answers on one item, by the keys its kind built them under."""


@dataclass(frozen=True)
class HeadExample:
    """One labelled question a kind's trained head reads (what ``logitjudge fit`` trains on).

    Attributes:
        key: unique within its row (``"#<chunk>"``, ``"@<entity>"``).
        state: the state the question is asked over, exactly as in serving.
        question: the question, as the kind asks it, without its head.
        label: the gold option's name.
    """

    key: str
    state: Any
    question: Question
    label: str


class ScoringKind(ABC):
    """How one kind of evaluator asks its questions and scores their answers.

    Class attributes (what a definition of this kind looks like; checked at load):
        name: the catalogue's ``scoring`` value.
        question_type: the definition's ``question_type``.
        per_chunk, per_claim: the definition's flags (one question per chunk, per claim).
        fields: the definition fields only some kinds take (``likelihood``, ``probes``,
            ``contrast``, ``chunk_state``, ...), this kind's: name -> True when required, False
            when optional. Any other such field set on a definition of this kind is an error.
        needs_template: a definition must have a ``template``.
        quotes_fields: ``{input}``, ``{output}``, ``{expected}`` quote fields in its texts even
            without ``chunk_state`` (which always allows them).
        scaled: a calibration's evaluator scaling applies to its 0..1 score.
        reads_own_head: a head trained on the evaluator's own labels (``logitjudge fit
            --evaluator NAME``) can read its one question over the whole item.
        batch_debiased: ``debias="batch"`` divides its questions' prior out of their answers.
        head_gold: the gold fields :meth:`head_examples` reads (named in ``logitjudge fit``'s
            error when no row has them; empty for a kind that reads no head).
    """

    name: ClassVar[str]
    question_type: ClassVar[QuestionType]
    per_chunk: ClassVar[bool] = False
    per_claim: ClassVar[bool] = False
    fields: ClassVar[Mapping[str, bool]] = {}
    needs_template: ClassVar[bool] = True
    quotes_fields: ClassVar[bool] = False
    scaled: ClassVar[bool] = False
    reads_own_head: ClassVar[bool] = False
    batch_debiased: ClassVar[bool] = False
    head_gold: ClassVar[str] = ""

    def placeholders(self, defn: EvaluatorDef) -> frozenset[str]:
        """The ``{name}`` placeholders this kind fills itself in ``defn``'s texts (``claim``,
        ``entity``, ``answer``); others must quote a declared field."""
        return frozenset()

    def texts(self, defn: EvaluatorDef) -> list[str]:
        """``defn``'s texts this kind adds to the template, criteria, options and levels (probes,
        entity templates): their `` `field` `` references and placeholders are checked too."""
        return []

    def check(self, defn: EvaluatorDef) -> None:  # noqa: B027 (a kind without rules of its own keeps it)
        """The rules of this kind beyond its declared fields.

        Raises:
            ValueError: ``"<name>: <what is wrong>"``.
        """

    @abstractmethod
    def questions(self, defn: EvaluatorDef, item: Item, *, field: tuple[str | int, ...] = ("question",)) -> Planned:
        """``defn``'s questions on ``item`` (its required fields present), under typed keys.

        Raises:
            InvalidRequestError: the item brings an invalid question of its own (``field``).
        """

    def head_examples(self, defn: EvaluatorDef, item: Item, gold: Mapping[str, Any]) -> list[HeadExample] | None:
        """The labelled questions of ``item`` that the head of ``defn`` (its ``head``) reads,
        from the row's ``gold``: the questions :meth:`questions` asks, as asked, each with its gold
        option; questions the gold does not label are left out. ``None``: this kind reads no head
        of its definition's.

        Raises:
            ValueError: a gold label names no option (the row's value named).
        """
        return None

    @abstractmethod
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
        """The result of ``answers`` to :meth:`questions` on ``item``.

        ``baseline``: the same questions over the state without ``context`` (a definition with
        ``contrast``); ``scaling``: the calibration's scaling of the score (:attr:`scaled` kinds).
        :func:`logitjudge.rubrics.scoring.score_evaluator` checks both before calling.

        Raises:
            KeyError, ValueError: an answer is missing or unlike its question.
        """


def _position(key: QuestionKey) -> tuple[int, int]:
    return (-1 if key.chunk is None else key.chunk, -1 if key.claim is None else key.claim)


class SequenceKind(ScoringKind):
    """A kind whose questions are :func:`~logitjudge.rubrics.questions.build_questions`'s: its
    template over the whole item (or over a state of ``state_fields`` only, not calibrated),
    once, per chunk or per claim, scored as a sequence in chunk or claim order."""

    def questions(self, defn: EvaluatorDef, item: Item, *, field: tuple[str | int, ...] = ("question",)) -> Planned:
        asked = build_questions(defn, item, field=field)
        if defn.state_fields is None:
            return Planned(item=asked)
        fields = defn.state_fields
        return Planned(groups={fields_group(fields): (fields_state(item, fields), uncalibrated(asked))})

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
        order = sorted(answers, key=_position)
        twin = None if baseline is None else [baseline[k] for k in order]
        return self.score_sequence(defn, [answers[k] for k in order], threshold, twin, scaling)

    @abstractmethod
    def score_sequence(
        self,
        defn: EvaluatorDef,
        answers: Sequence[Answered],
        threshold: float,
        baseline: Sequence[Answered] | None = None,
        scaling: Scaling | None = None,
    ) -> EvaluatorResult:
        """The result of the answers in question order (chunk or claim order)."""


def need_support_options(defn: EvaluatorDef) -> None:
    """A chunk-support kind's options include ``supports`` and ``contradicts``.

    Raises:
        ValueError: they do not.
    """
    if not {"supports", "contradicts"} <= {o.name for o in defn.options or ()}:
        raise ValueError(f"{defn.name}: {defn.scoring} scoring needs options 'supports' and 'contradicts'")


def check_classes(defn: EvaluatorDef, features: set[str]) -> None:
    """``defn.classes``: one fitted score per option (or level index), over known ``features``.

    Raises:
        ValueError: a class is missing or extra, or a weight names an unknown feature.
    """
    classes = defn.classes or {}
    outcomes = [o.name for o in defn.options or ()] or [str(k) for k in range(len(defn.levels or ()))]
    if set(classes) != set(outcomes):
        raise ValueError(f"{defn.name}: classes must be the options (or the level indices), one each")
    for c in classes.values():
        if not set(c.weights) <= features:
            raise ValueError(f"{defn.name}: class weights name unknown features {sorted(set(c.weights) - features)}")
