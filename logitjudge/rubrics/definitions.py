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
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from logitjudge.contract.evaluate import DATA_FIELDS, ITEM_FIELDS, FieldName

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

    Features (see :func:`logitjudge.rubrics.scoring.chunk_features`): ``pmi`` (per-token
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
        name: the name requests use (``chunk_relevance``); also the question-id namespace.
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
        scoring: how answers become a result (see ``logitjudge.rubrics.scoring``):
            ``probability`` (one noul: score = p(yes)), ``rubric`` (one score question: score =
            E[level]/(L-1)), ``chunk_precision`` (noul per chunk: relevant/N),
            ``chunk_support`` (choice per chunk: max(0, (S-C)/N), any contradiction fails),
            ``claim_share`` (noul per claim: the mean P(supported) of the N claims),
            ``typed_question`` (the item's own question, answered as asked), ``chunk_evidence``
            (per chunk, a noul and a continuation combined into P(relevant)), ``chunk_probes``
            (per chunk, the ``probes`` nouls, each relative to a content-free chunk, combined
            into a distribution over the options by a fitted multinomial logistic),
            ``entity_recall`` (entities of ``expected`` matched in the
            context, a noul per unmatched one; levels from the share present),
            ``answer_probes`` (the ``probes`` over the output alone and over a content-free
            output, a ``sentence_probe`` per sentence, levels by the fitted ``classes``),
            ``chunk_head`` (per chunk and claim of the output, the ``template`` choice over the
            chunk alone, read by the trained ``head``; a chunk is judged by the claim it speaks
            to most, the lowest P(unrelated)). For
            ``entity_recall`` (score: levels) and ``chunk_probes`` (choice: options)
            ``question_type`` is the result's shape; the questions asked are yes/no.
        threshold: default pass threshold on the 0..1 score (overridable per request).
        chunk_state: per-chunk questions are asked over the chunk alone: each chunk is the state
            of its own engine request ("Passage: <chunk>"), and the template quotes the other
            fields it needs with ``{input}``, ``{output}``, ``{expected}`` (the field's text as
            a JSON string). The questions of every evaluator over one chunk share its request.
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
            :func:`logitjudge.rubrics.scoring.answer_features`.
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

        contrast: ``"context"`` (``probability`` or ``claim_share`` scoring, ``context``
            required): each question is asked twice, over the state and over the state without
            ``context``, and the score is how much the context raises P(yes)
            (:func:`logitjudge.rubrics.scoring.contrast_probability`; the content-free baseline of
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
    scoring: Literal[
        "probability",
        "rubric",
        "chunk_precision",
        "chunk_support",
        "claim_share",
        "typed_question",
        "chunk_evidence",
        "chunk_probes",
        "entity_recall",
        "answer_probes",
        "chunk_head",
    ]
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

    @model_validator(mode="after")
    def _check(self) -> EvaluatorDef:
        declared = set(self.required) | set(self.optional)
        if len(declared) != len(self.required) + len(self.optional):
            raise ValueError(f"{self.name}: a field is listed twice in required/optional")
        shape = {
            "noul": self.options is None and self.levels is None,
            "choice": self.options is not None and self.levels is None and self.criteria is None,
            "score": self.levels is not None and self.options is None and self.criteria is None,
            "typed": self.options is None and self.levels is None and self.criteria is None,
        }
        if not shape[self.question_type]:
            raise ValueError(
                f"{self.name}: question_type {self.question_type!r} takes "
                + {"noul": "optional criteria", "choice": "options", "score": "levels", "typed": "nothing"}[
                    self.question_type
                ]
                + " (and nothing of the other types)"
            )
        if self.options is not None:
            names = [o.name for o in self.options]
            if not 2 <= len(names) <= 255 or len(set(names)) != len(names):
                raise ValueError(f"{self.name}: options must be 2..255 distinct names")
        if self.levels is not None and not 2 <= len(self.levels) <= 10:
            raise ValueError(f"{self.name}: levels must number 2..10")
        compatible = {  # question type, per_chunk, per_claim
            "probability": ("noul", False, False),
            "rubric": ("score", False, False),
            "chunk_precision": ("noul", True, False),
            "chunk_support": ("choice", True, False),
            "claim_share": ("noul", False, True),
            "typed_question": ("typed", False, False),
            "chunk_evidence": ("noul", True, False),
            "chunk_probes": ("choice", True, False),
            "entity_recall": ("score", False, False),
            "answer_probes": ("score", False, False),
            "chunk_head": ("choice", True, False),
        }[self.scoring]
        if (self.question_type, self.per_chunk, self.per_claim) != compatible:
            raise ValueError(
                f"{self.name}: scoring {self.scoring!r} needs question_type {compatible[0]!r} "
                f"with per_chunk={compatible[1]} and per_claim={compatible[2]}"
            )
        if (self.scoring == "chunk_head") != (self.head is not None):
            raise ValueError(f"{self.name}: chunk_head scoring needs head (and only it)")
        if self.scoring == "chunk_head" and (not self.chunk_state or "{claim}" not in (self.template or "")):
            raise ValueError(f"{self.name}: chunk_head asks over each chunk alone (chunk_state), quoting {{claim}}")
        if self.scoring in ("chunk_support", "chunk_probes", "chunk_head"):
            option_names = {o.name for o in self.options or ()}
            if not {"supports", "contradicts"} <= option_names:
                raise ValueError(f"{self.name}: chunk_support scoring needs options 'supports' and 'contradicts'")
        if self.contrast is not None and (
            self.scoring not in ("probability", "claim_share") or "context" not in self.required
        ):
            raise ValueError(
                f"{self.name}: contrast 'context' needs scoring 'probability' or 'claim_share' and a required `context`"
            )
        if self.per_claim and ("output" not in self.required or "{claim}" not in (self.template or "")):
            raise ValueError(f"{self.name}: a per-claim evaluator must require `output` and quote `{{claim}}`")
        if not (self.per_claim or self.claim_probes or self.scoring == "chunk_head") and "{claim}" in " ".join(
            self._texts()
        ):
            raise ValueError(f"{self.name}: `{{claim}}` is only for per-claim evaluators and claim_probes")
        if self.claim_probes and (
            self.scoring != "chunk_probes" or not all("{claim}" in t for t in (self.probes or {}).values())
        ):
            raise ValueError(f"{self.name}: claim_probes is for chunk_probes scoring, each probe quoting {{claim}}")
        if self.per_chunk and "context" not in self.required:
            raise ValueError(f"{self.name}: a per-chunk evaluator must require `context`")
        if self.question_type == "typed":
            if self.template is not None or "question" not in self.required:
                raise ValueError(f"{self.name}: a typed evaluator has no template and requires `question`")
        elif self.template is None and self.scoring not in ("chunk_probes", "entity_recall", "answer_probes"):
            raise ValueError(f"{self.name}: template is required")
        for text in self._texts():
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
        if self.per_chunk and not self.chunk_state and "`context[i]`" not in (self.template or ""):
            raise ValueError(f"{self.name}: a per-chunk template must mention `context[i]`")
        if self.chunk_state and not self.per_chunk:
            raise ValueError(f"{self.name}: chunk_state is for per-chunk evaluators")
        for text in self._texts():
            for ref in _PLACEHOLDER.findall(text):
                if ref == "claim":
                    continue
                if ref == "entity" and self.scoring == "entity_recall":
                    continue
                if ref == "answer" and self.scoring == "answer_probes":
                    continue
                if ref not in declared or not (self.chunk_state or self.scoring == "answer_probes"):
                    raise ValueError(
                        f"{self.name}: `{{{ref}}}` quotes a field only in a chunk_state or answer_probes evaluator"
                    )
        if self.state_fields is not None and not set(self.state_fields) <= declared:
            raise ValueError(f"{self.name}: state_fields must be declared fields")
        if (self.scoring == "chunk_evidence") != (self.likelihood is not None):
            raise ValueError(f"{self.name}: chunk_evidence scoring needs likelihood (and only it)")
        if self.scoring == "chunk_evidence" and self.combine is None:
            raise ValueError(f"{self.name}: chunk_evidence scoring needs combine")
        if self.scoring in ("chunk_evidence", "chunk_probes") and not self.chunk_state:
            raise ValueError(f"{self.name}: {self.scoring} scoring asks over each chunk alone (chunk_state)")
        if (self.scoring in ("chunk_probes", "answer_probes")) != (
            self.probes is not None and self.classes is not None
        ):
            raise ValueError(
                f"{self.name}: chunk_probes and answer_probes scorings need probes and classes (and only they)"
            )
        if (self.scoring == "answer_probes") != (self.answer_state is not None) or (
            self.sentence_probe is not None and self.scoring != "answer_probes"
        ):
            raise ValueError(f"{self.name}: answer_probes scoring needs answer_state (and only it)")
        if self.answer_state is not None and "{answer}" not in self.answer_state:
            raise ValueError(f"{self.name}: answer_state must hold {{answer}}")
        if self.fitted_for is not None and self.classes is None and self.combine is None:
            raise ValueError(f"{self.name}: fitted_for goes with fitted coefficients (combine, classes)")
        if self.classes is not None:
            outcomes = [o.name for o in self.options or ()] or [str(k) for k in range(len(self.levels or ()))]
            if set(self.classes) != set(outcomes):
                raise ValueError(f"{self.name}: classes must be the options (or the level indices), one each")
            known = {f"{p}{suffix}" for p in self.probes or {} for suffix in ("", "_rel")}
            known |= {"pad"} if self.sentence_probe else set()
            for c in self.classes.values():
                if not set(c.weights) <= known:
                    raise ValueError(
                        f"{self.name}: class weights name unknown features {sorted(set(c.weights) - known)}"
                    )
        if (self.scoring == "entity_recall") != (self.entity_template is not None):
            raise ValueError(f"{self.name}: entity_recall scoring needs entity_template (and only it)")
        if self.entity_template is not None and "{entity}" not in self.entity_template:
            raise ValueError(f"{self.name}: entity_template must quote {{entity}}")
        return self

    def _texts(self) -> list[str]:
        texts = [self.template or ""]
        if self.criteria is not None:
            texts += [t for t in (self.criteria.true, self.criteria.false) if t]
        texts += [o.description for o in self.options or ()]
        texts += list(self.levels or ())
        texts += [t for t in (self.entity_template, self.sentence_probe) if t] + list((self.probes or {}).values())
        return texts

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
