"""Fitting trained heads: labelled rows -> the evaluator's questions -> hidden states through the
engine -> a regularised linear map -> a head folder that ``evaluate``/``serve --heads`` load.

::

    examples = head_examples(registry.get("chunk_support"), rows)     # one per chunk with a gold label
    features = extract(engine, examples, layers=(16, 20, 24, 28), cache=".cache/heads")
    result = fit_head(defn, examples, features, engine.describe())     # CV, held-out report
    write_head(result, "heads/")                                       # the head's files, CARD.md, report.json

One job a module, each importing only those above it:

- :mod:`logitjudge.fit.examples`: labelled rows -> :class:`Example` (the evaluator's own engine
  request: a state, its question, the gold option; :func:`head_examples`).
- :mod:`logitjudge.fit.features`: the tapped hidden states of each example at the answer
  position, through the engine and cached on disk (:func:`extract`, :class:`Features`,
  :func:`default_layers`).
- :mod:`logitjudge.fit.heads`: layer and ``C`` by grouped cross-validation, the fit, the
  held-out report (:func:`fit_head`, :class:`FitResult`, :func:`classification_report`).
- :mod:`logitjudge.fit.card`: the head's folder: its files, ``CARD.md`` and ``report.json``
  (:func:`write_head`, :func:`card`).
- :mod:`logitjudge.fit.adapter_steps`: what one step of adapter training reads and computes (the
  states' KV on disk, the rows as the engine sees them, many branches in one forward).
- :mod:`logitjudge.fit.adapter_parts`: where adapter training starts: a part of a pass and a
  starting adapter's weights, with the checks that keep the parts of one pass apart
  (:func:`~logitjudge.fit.adapter_parts.training_part`, :func:`~logitjudge.fit.adapter_parts.warm_start`).
- :mod:`logitjudge.fit.adapters`: the epochs, checkpoints, held-out report and folder of a branch
  adapter (:func:`~logitjudge.fit.adapters.train_adapter`, ``logitjudge fit --adapter``).
"""

from __future__ import annotations

from logitjudge.fit.card import card, write_head
from logitjudge.fit.examples import Example, head_examples
from logitjudge.fit.features import Features, default_layers, extract
from logitjudge.fit.heads import DEFAULT_C_GRID, FitResult, classification_report, fit_head

__all__ = [
    "DEFAULT_C_GRID",
    "Example",
    "Features",
    "FitResult",
    "card",
    "classification_report",
    "default_layers",
    "extract",
    "fit_head",
    "head_examples",
    "write_head",
]
