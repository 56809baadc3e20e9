"""Evaluator definitions: declarative data validated into strict models at load.

An evaluator is data (see ``catalogue.json`` beside this module), not code: its name and
version, the request fields it needs, the System One question type, the question template, the
options or levels, how answers become a result (``scoring``) and its default threshold. Loading
fails loudly on anything unexpected (``extra="forbid"``), and every `` `field` `` reference in a
template or description must name a declared field, so a typo never reaches the model.

Template references (spec B.2): `` `input` ``, `` `output` ``, `` `expected` ``, `` `context` ``,
and for per-chunk evaluators `` `context[i]` ``, where ``i`` becomes the chunk index (0-based) in
each generated question. References stay in the question text as written: the state holds
fields of the same names, so the model reads "`context[2]`" next to a state with a ``context``
array.

Per-claim evaluators quote each claim (sentence) of `` `output` `` in their question with
``{claim}`` (the sentence as a JSON string), since a sentence is not a field of the state.

Adding an evaluator: add an entry to ``catalogue.json`` (or load your own file with
:func:`logitjudge.rubrics.registry.Registry.from_file`); no engine or server change is needed.
Its ``scoring`` names a kind of :mod:`logitjudge.rubrics.kinds`, which checks the fields only
that kind takes; what every kind shares is checked here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from logitjudge.contract.evaluate import DATA_FIELDS, ITEM_FIELDS, FieldName
from logitjudge.rubrics.kinds import KIND_FIELDS, KINDS, ScoringKind

__all__ = [
    "DATA_FIELDS",
    "ITEM_FIELDS",
    "FieldName",
    "OptionDef",
    "NoulCriteriaDef",
    "LikelihoodDef",
    "CombineDef",
    "FittedFor",
    "HeadDef",
    "EvaluatorDef",
    "SuiteDef",
    "Catalogue",
    "template_references",
]

Name = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]*$", max_length=64)]

_REF = re.compile(r"`([^`]*)`")
_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")
_FIELD_REF = re.compile(r"^(?P<field>[a-z_]+)(?:\[(?P<index>i|\d+)\])?$")


class _Strict(BaseModel):
    """Internal definitions: unknown keys are errors, values are frozen after load."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class OptionDef(_Strict):
    """One option of a choice evaluator: its name (echoed in results) and what it means."""

    name: Annotated[str, StringConstraints(min_length=1)]
    description: str


class NoulCriteriaDef(_Strict):
    """Descriptions of the yes and no outcomes of a noul evaluator; either may be omitted."""

    true: str | None = None
    false: str | None = None


def template_references(text: str) -> list[tuple[str, str | None]]:
    """The `` `field` `` / `` `field[i]` `` references in ``text``, as ``(field, index)`` pairs.

    Raises:
        ValueError: a backtick span that is not a field reference (e.g. `` `I cannot` ``).
    """
    refs: list[tuple[str, str | None]] = []
    for span in _REF.findall(text):
        m = _FIELD_REF.match(span)
        if m is None:
            raise ValueError(f"backtick span `{span}` is not a field reference like `output` or `context[i]`")
        refs.append((m.group("field"), m.group("index")))
    if text.count("`") % 2:
        raise ValueError(f"unbalanced backtick in {text!r}")
    return refs


class LikelihoodDef(_Strict):
    """A continuation question per chunk (the engine's likelihood readout): how likely ``text``
    is after the chunk, against after a content-free chunk (``null_chunk``).

    Attributes:
        instructions: the user turn after the chunk (e.g. "Write a question that the passage
            answers."); the model's reply is teacher-forced to the ``text`` field's value.
        text: the item field whose text is scored (``input`` for chunk relevance).
        null_chunk: the content-free chunk of the baseline request (one per item).
    """

    instructions: str
    text: FieldName
    null_chunk: str = "N/A"


class CombineDef(_Strict):
    """A fitted logistic combination of per-chunk features into P(yes):
    ``sigmoid(intercept + sum_f weights[f] * x_f)``.

    Features (see :func:`logitjudge.rubrics.kinds.chunk_evidence.chunk_features`): ``pmi`` (per-token
    log-likelihood ratio of the scored text with the chunk vs the null chunk, nats/token),
    ``pmi_sum`` (the same, summed over tokens), ``yes`` (logit P(yes) of the chunk's noul),
    ``yes_rel`` (that logit minus the null chunk's), and each of them centred on the item's mean
    over its chunks (``pmi_c``, ``yes_rel_c``, ...).

    Attributes:
        source: what it was fitted on and how (shown in docs; fitted on this evaluator's own
            labelled data, never on another question kind).
    """

    intercept: float
    weights: dict[str, float]
    source: str


class FittedFor(_Strict):
    """The engine an evaluator's fitted coefficients (``combine``, ``classes``) were fitted on.

    The coefficients map this engine's features (logits of P(yes), likelihood ratios) to labels;
    another model's features sit on another scale (measured: ``answer_relevancy@2`` on
    SmolLM2-135M scores WikiEval pairwise 0.40 with the 1.5B's coefficients, version 1 0.87), so
    a run on another engine is flagged (``x_warning`` on each result, one log WARNING per run).

    Attributes:
        model: the model's name as ``describe()["model"]`` gives it (for messages).
        fingerprint: ``describe()["fingerprint"]`` (sha256 over the config and the weights'
            names, shapes and dtypes, not their values: it tells architectures and dtypes apart,
            not fine-tunes of one architecture; :func:`logitjudge.engine.model.weights_fingerprint`).
        prompt_version: the prompt template the features were read under.
    """

    model: str
    fingerprint: str
    prompt_version: str

    @classmethod
    def of(cls, engine: Mapping[str, Any]) -> FittedFor:
        """The block for coefficients fitted on ``engine``'s features (its ``describe()`` dict);
        what the fitting scripts write beside ``combine`` / ``classes``."""
        return cls(model=engine["model"], fingerprint=engine["fingerprint"], prompt_version=engine["prompt_version"])

    def differs_from(self, engine: Mapping[str, Any]) -> str | None:
        """Why ``engine`` (a ``describe()`` dict) is not the one fitted for, or None when it is.

        The same model is its fingerprint or its name (the fingerprint includes the weights'
        dtype, and a bf16 load of the same weights reads features within bf16's rounding). An
        engine without a fingerprint (a stand-in judge, not a model) is not flagged."""
        name, fingerprint = engine.get("model"), engine.get("fingerprint")
        if not fingerprint:
            return None
        if fingerprint != self.fingerprint and str(name).lower() != self.model.lower():
            return f"this engine runs {name!r}"
        if engine.get("prompt_version", self.prompt_version) != self.prompt_version:
            return f"this engine uses prompt {engine.get('prompt_version')!r}"
        return None


class HeadDef(_Strict):
    """The trained head (:mod:`logitjudge.engine.heads`) that reads an evaluator's questions.

    Attributes:
        name: the head's name (the engine must have it loaded, e.g. from ``--heads DIR`` or the
            heads shipped for the model; ``logitjudge fit`` trains one).
        fallback: the version of this evaluator that answers instead on an engine without the
            head (its results then carry an ``x_warning`` naming ``logitjudge fit``).
        layers: the layers the shipped head reads (documentation; the head file is the truth).
    """

    name: Name
    fallback: Annotated[str, StringConstraints(pattern=r"^\d+(\.\d+)*$")]


class EvaluatorDef(_Strict):
    """One evaluator, as data.

    Attributes:
        name: the name requests use (``chunk_relevance``); also the namespace of its questions'
            keys (:class:`~logitjudge.rubrics.questions.QuestionKey`).
        version: bumped whenever the wording, options or scoring change (results record it).
        summary: one line for docs and ``GET`` listings.
        source: where the wording comes from: ``"docs"`` (the hosted evaluator's page, verbatim)
            or ``"ours"`` (designed here; spec Part B marks it INF).
        required: fields that must be present and non-empty, else the evaluator is skipped (in a
            suite) or the request is refused (named explicitly).
        optional: fields the template may mention that need not be present.
        question_type: the System One type of each generated question; ``"typed"`` means the
            item brings its own question (``typed_question``).
        per_chunk: one question per chunk of ``context`` (``context[i]`` in the template).
        per_claim: one question per claim of ``output``: its sentences, split by
            :func:`logitjudge.rubrics.questions.claims_of` (``{claim}`` in the template quotes
            it; the RAGAS faithfulness protocol without the generated statements).
        template: the question's instructions, with `` `field` `` references.
        criteria: noul only: descriptions of the yes/no outcomes.
        options: choice only: the options, in order.
        levels: score only: the ordered levels, lowest first (2..10).
        scoring: the scoring kind: how the questions are built and their answers become a
            result, by the name :data:`logitjudge.rubrics.kinds.KINDS` registers it under
            (``probability``, ``rubric``, ``chunk_precision``, ``chunk_support``,
            ``claim_share``, ``typed_question``, ``chunk_evidence``, ``chunk_probes``,
            ``entity_recall``, ``answer_probes``, ``chunk_head``; each kind's module says what
            it asks and how it scores). The kind fixes ``question_type``, ``per_chunk`` and
            ``per_claim``, and which of the kind-only fields below it takes (those marked with
            a kind). For ``entity_recall`` (score: levels), ``chunk_probes`` (choice: options)
            and ``answer_probes`` (score) ``question_type`` is the result's shape; the
            questions asked are yes/no.
        threshold: default pass threshold on the 0..1 score (overridable per request).
        chunk_state: per-chunk questions are asked over the chunk alone: each chunk is the state
            of its own engine request ("Passage: <chunk>"), and the template quotes the other
            fields it needs with ``{input}``, ``{output}``, ``{expected}`` (the field's text as
            a JSON string). The questions of every evaluator over one chunk share its request.
            ``chunk_precision`` scoring may set it; ``chunk_evidence``, ``chunk_probes`` and
            ``chunk_head`` must.
        state_fields: the item fields the state of this evaluator's questions holds (``None``:
            the whole item, every data field). An evaluator that needs only ``expected`` and
            ``context`` does not see ``output``.
        likelihood: ``chunk_evidence`` scoring: the continuation question per chunk.
        combine: ``chunk_evidence`` scoring: the fitted combination of per-chunk features.
        probes: ``chunk_probes`` scoring: named yes/no questions asked over each chunk alone and
            over the content-free chunk (``{output}`` etc. quote fields); ``answer_probes``:
            over the output and over the content-free output.
        classes: ``chunk_probes`` scoring: per option, a fitted linear score of the probes'
            features (``<probe>``: logit P(yes); ``<probe>_rel``: minus the null chunk's); the
            chunk's distribution is their softmax (multinomial logistic regression).
            ``answer_probes``: the same per level index ("0".."3"), over
            :func:`logitjudge.rubrics.kinds.answer_probes.answer_features`.
        fitted_for: the engine ``combine`` / ``classes`` were fitted on (only with either; every
            shipped one has it); on another engine the result carries ``x_warning`` (see
            :class:`FittedFor`). A definition of your own without it is not checked.
        entity_template: ``entity_recall`` scoring: the noul asked per entity of ``expected``
            not found verbatim in the context, ``{entity}`` quoting it.
        claim_probes: ``chunk_probes`` scoring: the probes are asked per claim of the output
            (:func:`logitjudge.rubrics.questions.support_claims`, ``{claim}`` quoting it), and a
            chunk is judged by the claim it speaks to most (the lowest P(unrelated)).
        answer_state: ``answer_probes`` scoring: the state of a request about the output, with
            ``{answer}`` (the output's text, or one sentence of it, or the content-free
            ``N/A``) and optionally ``{input}`` (the question's text), inserted as they are.
        sentence_probe: ``answer_probes`` scoring: a yes/no question asked over each sentence of
            the output alone (when it has two or more), e.g. "does it help answer the question?".
        head: ``chunk_head`` scoring: the trained head that reads the questions, and the version
            that answers on an engine without it.

        locate: the name of another evaluator, of ``chunk_head`` scoring, that asks the support
            options per chunk and claim (``chunk_support``, version 4): when both run on an item
            and that version answers, this evaluator's result gets located verdicts
            (``x_located``), one per claim, naming the chunk that contradicts or supports it most
            (:func:`logitjudge.rubrics.results.located_claims`); its score and ``details`` are
            unchanged. A catalogue without that evaluator loads; its results have none.
        contrast: ``"context"`` (``probability`` or ``claim_share`` scoring, ``context``
            required): each question is asked twice, over the state and over the state without
            ``context``, and the score is how much the context raises P(yes)
            (:func:`logitjudge.rubrics.results.contrast_probability`; the content-free baseline of
            Zhao et al. 2021, "Calibrate Before Use", applied to the evidence). ``None``: the score is P(yes).
    """

    name: Name
    version: Annotated[str, StringConstraints(pattern=r"^\d+(\.\d+)*$")]
    summary: str
    source: Literal["docs", "ours"]
    required: tuple[FieldName, ...]
    optional: tuple[FieldName, ...] = ()
    question_type: Literal["noul", "choice", "score", "typed"]
    per_chunk: bool = False
    per_claim: bool = False
    template: str | None = None
    criteria: NoulCriteriaDef | None = None
    options: tuple[OptionDef, ...] | None = None
    levels: tuple[str, ...] | None = None
    scoring: str
    threshold: Annotated[float, Field(ge=0.0, le=1.0)]
    contrast: Literal["context"] | None = None
    chunk_state: bool = False
    state_fields: tuple[FieldName, ...] | None = None
    likelihood: LikelihoodDef | None = None
    combine: CombineDef | None = None
    probes: dict[str, str] | None = None
    classes: dict[str, CombineDef] | None = None
    fitted_for: FittedFor | None = None
    entity_template: str | None = None
    claim_probes: bool = False
    answer_state: str | None = None
    sentence_probe: str | None = None
    head: HeadDef | None = None
    locate: Name | None = None

    @model_validator(mode="after")
    def _check(self) -> EvaluatorDef:
        kind = KINDS.get(self.scoring)
        if kind is None:
            raise ValueError(f"{self.name}: unknown scoring {self.scoring!r} (known: {', '.join(KINDS)})")
        self._check_shape()
        if (self.question_type, self.per_chunk, self.per_claim) != (kind.question_type, kind.per_chunk, kind.per_claim):
            raise ValueError(
                f"{self.name}: scoring {self.scoring!r} needs question_type {kind.question_type!r} "
                f"with per_chunk={kind.per_chunk} and per_claim={kind.per_claim}"
            )
        self._check_kind_fields(kind)
        kind.check(self)
        if self.contrast is not None and ("context" not in self.required or self.state_fields is not None):
            raise ValueError(
                f"{self.name}: contrast 'context' needs a required `context` and the whole item's state "
                "(no state_fields)"
            )
        if "claim" not in kind.placeholders(self) and "{claim}" in " ".join(self._texts(kind)):
            raise ValueError(f"{self.name}: `{{claim}}` is only for per-claim evaluators, claim_probes and chunk_head")
        if self.locate is not None and ("output" not in self.required or "context" not in self.required):
            raise ValueError(f"{self.name}: locate reads per-chunk, per-claim answers: `output` and `context` required")
        if self.per_chunk and "context" not in self.required:
            raise ValueError(f"{self.name}: a per-chunk evaluator must require `context`")
        if kind.needs_template and self.template is None:
            raise ValueError(f"{self.name}: template is required")
        self._check_texts(kind)
        if self.per_chunk and not self.chunk_state and "`context[i]`" not in (self.template or ""):
            raise ValueError(f"{self.name}: a per-chunk template must mention `context[i]`")
        if self.state_fields is not None and not set(self.state_fields) <= set(self.required) | set(self.optional):
            raise ValueError(f"{self.name}: state_fields must be declared fields")
        if self.fitted_for is not None and self.classes is None and self.combine is None:
            raise ValueError(f"{self.name}: fitted_for goes with fitted coefficients (combine, classes)")
        return self

    def _check_shape(self) -> None:
        """Fields declared once; the options or levels the question type takes, and only those."""
        if len(set(self.required) | set(self.optional)) != len(self.required) + len(self.optional):
            raise ValueError(f"{self.name}: a field is listed twice in required/optional")
        shape = {
            "noul": self.options is None and self.levels is None,
            "choice": self.options is not None and self.levels is None and self.criteria is None,
            "score": self.levels is not None and self.options is None and self.criteria is None,
            "typed": self.options is None and self.levels is None and self.criteria is None,
        }
        if not shape[self.question_type]:
            takes = {"noul": "optional criteria", "choice": "options", "score": "levels", "typed": "nothing"}
            raise ValueError(
                f"{self.name}: question_type {self.question_type!r} takes {takes[self.question_type]}"
                " (and nothing of the other types)"
            )
        if self.options is not None:
            names = [o.name for o in self.options]
            if not 2 <= len(names) <= 255 or len(set(names)) != len(names):
                raise ValueError(f"{self.name}: options must be 2..255 distinct names")
        if self.levels is not None and not 2 <= len(self.levels) <= 10:
            raise ValueError(f"{self.name}: levels must number 2..10")

    def _check_kind_fields(self, kind: ScoringKind) -> None:
        """The fields only some kinds take: set only when this kind takes them, and set when it needs them."""
        for name in sorted(KIND_FIELDS):
            given = getattr(self, name) != type(self).model_fields[name].default
            if given and name not in kind.fields:
                takers = [k.name for k in KINDS.values() if name in k.fields]
                raise ValueError(f"{self.name}: {name} is for {', '.join(takers)} scoring, not {self.scoring!r}")
            if not given and kind.fields.get(name, False):
                raise ValueError(f"{self.name}: {self.scoring} scoring needs {name}")

    def _check_texts(self, kind: ScoringKind) -> None:
        """Every `` `field` `` reference names a declared field; every ``{name}`` is the kind's own
        placeholder or quotes a declared field where the kind allows quoting."""
        declared = set(self.required) | set(self.optional)
        own = kind.placeholders(self)
        for text in self._texts(kind):
            try:
                refs = template_references(text)
            except ValueError as exc:
                raise ValueError(f"{self.name}: {exc}") from None
            for field, index in refs:
                if field not in declared or field == "question":
                    raise ValueError(
                        f"{self.name}: template references `{field}`, which is not a declared field "
                        f"(declared: {', '.join(sorted(declared))})"
                    )
                if index is not None and (field != "context" or index != "i" or not self.per_chunk):
                    raise ValueError(f"{self.name}: `{field}[{index}]`: only `context[i]`, in a per-chunk evaluator")
            for ref in _PLACEHOLDER.findall(text):
                if ref in own:
                    continue
                if ref not in declared or not (self.chunk_state or kind.quotes_fields):
                    raise ValueError(
                        f"{self.name}: `{{{ref}}}` quotes a field only in a chunk_state or answer_probes evaluator"
                    )

    def _texts(self, kind: ScoringKind) -> list[str]:
        texts = [self.template or ""]
        if self.criteria is not None:
            texts += [t for t in (self.criteria.true, self.criteria.false) if t]
        texts += [o.description for o in self.options or ()]
        texts += list(self.levels or ())
        return texts + kind.texts(self)

    @property
    def top_level(self) -> int:
        """The highest level index of a score evaluator (L - 1)."""
        return len(self.levels or ()) - 1


class SuiteDef(_Strict):
    """A named list of evaluators, expanded in order (spec B.5)."""

    name: Annotated[str, StringConstraints(pattern=r"^[A-Za-z][A-Za-z0-9_]*$")]
    summary: str
    members: Annotated[tuple[Name, ...], Field(min_length=1)]


class Catalogue(_Strict):
    """The file format of ``catalogue.json``: a version, evaluators and suites."""

    format: Literal[1]
    evaluators: tuple[EvaluatorDef, ...]
    suites: tuple[SuiteDef, ...] = ()
    previous: tuple[EvaluatorDef, ...] = ()
    """Earlier versions, selectable as ``name@version`` (e.g. ``chunk_relevance@1``)."""

    @model_validator(mode="after")
    def _check(self) -> Catalogue:
        names = [e.name for e in self.evaluators]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"evaluator defined twice: {', '.join(dupes)}")
        known = set(names)
        for suite in self.suites:
            if suite.name.lower() in {n.lower() for n in known}:
                raise ValueError(f"suite {suite.name!r} clashes with an evaluator name")
            missing = [m for m in suite.members if m not in known]
            if missing:
                raise ValueError(f"suite {suite.name!r} names unknown evaluators: {', '.join(missing)}")
            if len(set(suite.members)) != len(suite.members):
                raise ValueError(f"suite {suite.name!r} lists an evaluator twice")
        by_name = {e.name: e for e in self.evaluators}
        for e in (*self.evaluators, *self.previous):
            target = by_name.get(e.locate) if e.locate else None
            if e.locate == e.name or (target is not None and target.scoring != "chunk_head"):
                raise ValueError(f"{e.name}: locate must name another evaluator, one of chunk_head scoring")
        current = {e.name: e.version for e in self.evaluators}
        seen: set[tuple[str, str]] = set()
        for old in self.previous:
            key = (old.name, old.version)
            if old.name not in current or old.version == current[old.name] or key in seen:
                raise ValueError(
                    f"previous {old.name}@{old.version}: must be an earlier version of a current evaluator"
                )
            seen.add(key)
        return self
