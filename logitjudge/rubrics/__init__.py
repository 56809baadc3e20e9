"""Evaluators: request fields -> typed questions over one state -> scores; dataset evaluation.

- ``catalogue.json`` + :mod:`~logitjudge.rubrics.definitions`: declarative evaluators, strict;
- :mod:`~logitjudge.rubrics.registry`: names and suites, with "did you mean";
- :mod:`~logitjudge.rubrics.kinds`: the scoring kinds (one module each: its definition fields,
  its questions under typed keys, its scoring), by the name a definition's ``scoring`` gives;
- :mod:`~logitjudge.rubrics.runner`: one engine request per item; :mod:`~logitjudge.rubrics.scoring`:
  answers -> results (pure, through the kind); :mod:`~logitjudge.rubrics.aggregate`: dataset metrics;
- :mod:`~logitjudge.rubrics.api` (``evaluate``), :mod:`~logitjudge.cli.evaluate` (``logitjudge evaluate``).

See ``docs/evaluators.md`` for the catalogue. Nothing here imports torch.
"""

from logitjudge.contract.evaluate import EvaluatorResult, EvaluatorSummary, ItemResult, Metric
from logitjudge.rubrics.api import EvaluationRun, evaluate
from logitjudge.rubrics.registry import Registry, UnknownEvaluatorError, default_registry

__all__ = [
    "evaluate",
    "EvaluationRun",
    "Registry",
    "UnknownEvaluatorError",
    "default_registry",
    "EvaluatorResult",
    "EvaluatorSummary",
    "ItemResult",
    "Metric",
]
