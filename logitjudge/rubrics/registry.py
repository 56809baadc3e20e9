"""The evaluator registry: names -> definitions, suites -> members, typos -> "did you mean".

::

    reg = default_registry()
    reg.get("chunk_relevance")                 # EvaluatorDef
    reg.select(["RAG", "conciseness"])   # [Selected(chunk_relevance, explicit=False), ..., conciseness]
    reg.get("chunk_relevence")                 # UnknownEvaluatorError: ... did you mean 'chunk_relevance'?
    reg.select(["chunk_relevance@1"])          # an earlier version, by name@version

Evaluator names match exactly; suite names also match in any case (``rag``), as spec B.5
suggests. A suite expands to its members in order; an evaluator named twice (directly or
through suites) runs once, and counts as explicit if it was named directly anywhere.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

from logitjudge.errors import InvalidRequestError
from logitjudge.rubrics.definitions import Catalogue, EvaluatorDef, SuiteDef

__all__ = ["Registry", "Selected", "UnknownEvaluatorError", "default_registry"]


class UnknownEvaluatorError(InvalidRequestError):
    """A name is neither an evaluator nor a suite; ``suggestions`` holds the close matches
    (also in its one ``details`` entry's ``ctx``, which the HTTP 422 shows).

    ``field`` is ``("evaluators", i)`` when the name came from position i of a request's list.
    """

    def __init__(self, message: str, *, name: str, suggestions: Sequence[str], field: Sequence[str | int] = ()):
        entry = {"loc": field, "msg": message, "type": "value_error", "ctx": {"suggestions": list(suggestions)}}
        super().__init__(message, field=field, details=[entry])
        self.name = name
        self.suggestions = tuple(suggestions)


@dataclass(frozen=True)
class Selected:
    """One evaluator chosen for a run; ``explicit`` when named directly (not only via a suite)."""

    definition: EvaluatorDef
    explicit: bool

    @property
    def name(self) -> str:
        return self.definition.name


class Registry:
    """Evaluator definitions and suites, looked up by name."""

    def __init__(self, catalogue: Catalogue) -> None:
        self.catalogue = catalogue
        self.evaluators: dict[str, EvaluatorDef] = {e.name: e for e in catalogue.evaluators}
        self.suites: dict[str, SuiteDef] = {s.name: s for s in catalogue.suites}
        self.versions: dict[str, EvaluatorDef] = {f"{e.name}@{e.version}": e for e in catalogue.previous}
        self.versions.update({f"{e.name}@{e.version}": e for e in catalogue.evaluators})
        self._suite_by_lower = {s.name.lower(): s for s in catalogue.suites}

    @classmethod
    def from_file(cls, path: str | Path) -> Registry:
        """Load and validate a catalogue JSON file (``format``, ``evaluators``, ``suites``).

        Raises:
            pydantic.ValidationError: the file breaks a rule (unknown key, bad reference, ...).
        """
        return cls(Catalogue.model_validate(json.loads(Path(path).read_text(encoding="utf-8"))))

    def with_variants(self, path: str | Path) -> Registry:
        """This registry with the evaluators of a variants file replacing those of the same name
        (a JSON list of evaluator definitions; each must bump ``version``), for measuring a
        wording or method against the catalogue's (``benchmarks/quality/quality.py --variants``).

        Raises:
            pydantic.ValidationError: a definition breaks a rule.
            ValueError: a name the catalogue lacks, or a variant with the catalogue's version.
        """
        variants = [EvaluatorDef.model_validate(d) for d in json.loads(Path(path).read_text(encoding="utf-8"))]
        for v in variants:
            if v.name not in self.evaluators:
                raise ValueError(f"{path}: variant {v.name!r} replaces no evaluator of the catalogue")
            if v.version == self.evaluators[v.name].version:
                raise ValueError(f"{path}: variant {v.name!r} keeps version {v.version}; bump it")
        by_name = {v.name: v for v in variants}
        evaluators = tuple(by_name.get(e.name, e) for e in self.catalogue.evaluators)
        return Registry(self.catalogue.model_copy(update={"evaluators": evaluators}))

    def names(self) -> list[str]:
        """Evaluator names, then suite names, in catalogue order, then ``name@version`` of
        every version (the current ones and :attr:`Catalogue.previous`)."""
        return [*self.evaluators, *self.suites, *self.versions]

    def suggest(self, name: str) -> list[str]:
        """Up to three known names close to ``name`` (case-insensitive)."""
        lowered = {n.lower(): n for n in self.names()}
        return [lowered[m] for m in difflib.get_close_matches(name.lower(), list(lowered), n=3, cutoff=0.6)]

    def unknown(self, name: str, *, field: Sequence[str | int] = ()) -> UnknownEvaluatorError:
        """The error for an unknown name, with a did-you-mean when one is close."""
        suggestions = self.suggest(name)
        hint = (
            f"; did you mean {' or '.join(repr(s) for s in suggestions)}?"
            if suggestions
            else f"; evaluators: {', '.join(self.evaluators)}; suites: {', '.join(self.suites)} "
            "(name@version pins an earlier version)"
        )
        return UnknownEvaluatorError(
            f"Unknown evaluator {name!r}{hint}", name=name, suggestions=suggestions, field=field
        )

    def get(self, name: str) -> EvaluatorDef:
        """The evaluator called ``name`` (its current version), or ``name@version`` (that version).

        Raises:
            UnknownEvaluatorError: no such evaluator (suites are not evaluators here).
        """
        found = self.evaluators.get(name) or self.versions.get(name)
        if found is None:
            raise self.unknown(name)
        return found

    def suite(self, name: str) -> SuiteDef | None:
        """The suite called ``name`` in any case, or None."""
        return self._suite_by_lower.get(name.lower())

    def select(self, names: Iterable[str], *, field: Sequence[str | int] = ("evaluators",)) -> list[Selected]:
        """Expand evaluator and suite names into an ordered, duplicate-free selection.

        Args:
            names: evaluator and/or suite names, in request order.
            field: the request path of the list, used in errors as ``(*field, i)``.

        Raises:
            UnknownEvaluatorError: a name is unknown (``field`` ends with its position).
            InvalidRequestError: ``names`` is empty.
        """
        names = list(names)
        if not names:
            raise InvalidRequestError("name at least one evaluator or suite", field=tuple(field))
        order: list[str] = []
        explicit: set[str] = set()
        pinned: dict[str, EvaluatorDef] = {}
        for i, name in enumerate(names):
            if name in self.evaluators:
                members: Sequence[str] = (name,)
                explicit.add(name)
            elif name in self.versions:  # "chunk_relevance@1": that version, in place of the current one
                defn = self.versions[name]
                if pinned.get(defn.name, defn) != defn:
                    raise InvalidRequestError(f"{defn.name} is named in two versions", field=(*field, i))
                pinned[defn.name] = defn
                members = (defn.name,)
                explicit.add(defn.name)
            elif (suite := self.suite(name)) is not None:
                members = suite.members
            else:
                raise self.unknown(name, field=(*field, i))
            order += [m for m in members if m not in order]
        return [Selected(pinned.get(n, self.evaluators[n]), n in explicit) for n in order]


@lru_cache(maxsize=1)
def default_registry() -> Registry:
    """The shipped catalogue (``logitjudge/rubrics/catalogue.json``), loaded once."""
    text = resources.files("logitjudge.rubrics").joinpath("catalogue.json").read_text(encoding="utf-8")
    return Registry(Catalogue.model_validate(json.loads(text)))
