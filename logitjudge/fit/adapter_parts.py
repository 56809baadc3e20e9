"""Where an adapter's training starts: a part of a pass (:func:`training_part`, ``fit --adapter
--train-part K/N``) and an adapter folder's weights (:func:`warm_start`, ``--init-adapter DIR``).

A pass over more rows than one sitting can train runs as N runs over disjoint parts of its
training rows, each started from the adapter the last one wrote. What makes that safe is checked
here: the parts share one split (:func:`split_digest`: no part's held-out rows trained in another),
one N, and no part runs twice in a pass (:func:`part_pass`: once every part has trained, a second
pass may start); the starting adapter has the run's shape and question.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from logitjudge.engine.adapters import (
    ADAPTER_BINDING,
    ADAPTER_CONFIG,
    ADAPTER_WEIGHTS,
    BranchAdapter,
    check_folder,
    read_config,
)
from logitjudge.fit.adapter_steps import AdapterTrainingConfig, layers_note, row_identity
from logitjudge.fit.examples import Example

__all__ = [
    "check_init_folder",
    "init_chain",
    "part_pass",
    "split_digest",
    "training_part",
    "training_rows",
    "warm_start",
]


def training_part(train: Sequence[int], part: tuple[int, int] | None, seed: int) -> list[int]:
    """The ``part = (k, n)``-th of n disjoint parts of ``train`` (a seeded shuffle dealt round-robin,
    so the parts differ in size by at most one and together are ``train``); ``None``: all of it.

    Raises:
        ValueError: not ``1 <= k <= n``, or the part is empty (fewer rows than parts).
    """
    if part is None:
        return list(train)
    k, n = part
    if not 1 <= k <= n:
        raise ValueError(f"--train-part: {k}/{n}: the part must be 1 to {n}")
    if len(train) < n:
        raise ValueError(f"--train-part: {k}/{n}: {len(train)} training rows cannot make {n} parts")
    order = list(train)
    random.Random(seed + 2).shuffle(order)  # seed: --max-train-rows's draw; seed + 1: the report's
    return sorted(order[k - 1 :: n])


def training_rows(train: Sequence[int], config: AdapterTrainingConfig) -> tuple[list[int], list[int]]:
    """(the pass's rows, this part's rows): ``config.max_rows`` of ``train`` (a seeded draw), then
    :func:`training_part` of those. ``fit``'s progress bar and :func:`~logitjudge.fit.adapters.train_adapter`
    both take them here, so they count the same rows.

    Raises:
        ValueError: as :func:`training_part`.
    """
    rows = list(train)
    if config.max_rows is not None and config.max_rows < len(rows):
        rows = sorted(random.Random(config.seed).sample(rows, config.max_rows))
    return rows, training_part(rows, config.part, config.seed)


def init_chain(trained: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    """A binding's ``trained`` record, then the record of the adapter it started from
    (``trained.init``), and so on down the chain (``[]`` for ``None``)."""
    chain = []
    while trained:
        chain.append(trained)
        trained = trained.get("init")
    return chain


def part_pass(part: tuple[int, int], trained: Mapping[str, Any] | None) -> int:
    """The pass a run of ``part = (k, n)`` started from an adapter (its binding's ``trained``)
    makes: 1 + the times part k is in the adapter's chain (:func:`init_chain`). The chain's parts
    are taken to be parts of n (:func:`warm_start` refuses a chain of another n first); ``trained``
    may be the record :func:`warm_start` returns, which keeps the chain.

    Raises:
        ValueError: part k has trained more often than another part of n: it has trained in
            this pass already (the next pass starts once every part has trained).
    """
    k, n = part
    counts = Counter(link["part"][0] for link in init_chain(trained) if link.get("part"))
    behind = [j for j in range(1, n + 1) if counts[j] < counts[k]]
    if behind:
        raise ValueError(
            f"part {k} of {n} has trained already in pass {counts[k]}; part {behind[0]} of {n} has not trained "
            f"in pass {counts[k]} yet (a next pass starts once every part has trained)"
        )
    return counts[k] + 1


def split_digest(examples: Sequence[Example], train: Sequence[int], test: Sequence[int]) -> str:
    """sha256 of which rows train (before a part is taken) and which are held out, by their content
    (:func:`row_identity`): the parts of one pass must share it, or a part's held-out rows could be
    rows an earlier part trained on."""
    rows = [[row_identity(examples[i]) for i in train], [row_identity(examples[i]) for i in test]]
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()


def weights_sha256(weights: Mapping[str, Sequence[Any]]) -> str:
    """sha256 of an adapter's weights: per module path in path order, the path, then A and B as
    fp32 bytes (what a binding's ``trained.init.sha256`` records of the folder a run started from)."""
    digest = hashlib.sha256()
    for path in sorted(weights):
        a, b = weights[path]
        digest.update(path.encode())
        digest.update(a.float().contiguous().numpy().tobytes())
        digest.update(b.float().contiguous().numpy().tobytes())
    return digest.hexdigest()


def warm_start(
    params: dict[str, tuple[Any, Any]],
    init: BranchAdapter,
    *,
    scaling: float,
    evaluator: str,
    options: Sequence[str],
    part: tuple[int, int] | None,
    split: str,
) -> dict[str, Any]:
    """Copy a loaded adapter's A and B into freshly initialised ``params`` (:func:`lora_parameters`).

    Args:
        params: module path -> (A (r, in), B (out, r)) parameters, overwritten in place.
        init: the adapter to start from (already checked against the engine's fingerprint and
            prompt version by ``init.check`` where it has a binding). Its invocation tokens are not
            compared: serving does not read them, and the new adapter is saved with the run's own.
        scaling: the run's ``alpha / rank``.
        evaluator: ``name@version`` of the run; options: its question's option names.
        part: the run's ``(k, n)``, or ``None``; split: its :func:`split_digest`.

    Returns:
        what the binding records (``trained.init``): the folder as given (``--init-adapter``'s
        argument), ``sha256`` of its A and B (fp32, with the module paths, in path order; the
        checkpoint's digest includes it) and, from its binding, the evaluator, its rows, part,
        pass, split digest, data files, sources and its own start (``init``), so a chain of runs
        keeps every run's record.

    Raises:
        ValueError: another evaluator, options, set of modules, rank or scaling; a part of a pass
            whose earlier part had another split or another number of parts (the message names
            ``--init-adapter`` and what differs). A part that has trained in this pass already is
            refused by :func:`part_pass` of the record returned.
    """
    where = f"--init-adapter {init.path}"
    bound = init.binding
    rank = int(next(iter(params.values()))[0].shape[0])
    _refuse_another(where, bound, init.rank, init.scaling, rank=rank, scaling=scaling, evaluator=evaluator)
    if bound.get("options") not in (None, list(options)):
        raise ValueError(f"{where}: options {bound['options']}, this run's {list(options)}")
    if set(init.weights) != set(params):
        missing, extra = sorted(set(params) - set(init.weights)), sorted(set(init.weights) - set(params))
        raise ValueError(
            f"{where}: adapts {len(init.weights)} modules, this run {len(params)} ({len(missing)} of this run's "
            f"not among them{', e.g. ' + missing[0] if missing else ''}; {len(extra)} others"
            f"{', e.g. ' + extra[0] if extra else ''}): use its --adapt-layers"
        )
    trained = bound.get("trained") or {}
    if part is not None:
        for earlier in (link for link in init_chain(trained) if link.get("part")):
            if earlier["part"][1] != part[1]:
                raise ValueError(f"{where}: a part of {earlier['part'][1]}, this run a part of {part[1]}")
            if earlier.get("split_sha256") not in (None, split):
                raise ValueError(
                    f"{where}: its pass had other training or held-out rows (other rows, --sample, --seed, "
                    "--holdout, --train-rows or --train-sample): this part's held-out rows could have trained"
                )
    for path in sorted(params):
        a, b = init.weights[path]
        params[path][0].data.copy_(a)
        params[path][1].data.copy_(b)
    keep = ("rows", "part", "pass", "split_sha256", "data", "sources", "init")
    return {
        "path": str(init.path) if init.path else None,  # as given, like the data files (no machine paths)
        "sha256": weights_sha256(init.weights),
        "evaluator": bound.get("evaluator"),
        **{k: trained.get(k) for k in keep},
    }


def _refuse_another(
    where: str,
    bound: Mapping[str, Any],
    init_rank: int,
    init_scaling: float,
    *,
    rank: int,
    scaling: float,
    evaluator: str,
) -> None:
    """ValueError when a starting adapter (its binding, rank, scaling) is for another evaluator
    version, rank or scaling than the run's."""
    if bound.get("evaluator") not in (None, evaluator):
        raise ValueError(f"{where}: trained for {bound['evaluator']}, this run trains {evaluator}")
    if init_rank != rank or not math.isclose(init_scaling, scaling):
        raise ValueError(
            f"{where}: rank {init_rank}, scaling {init_scaling:g}; this run: rank {rank}, scaling {scaling:g} "
            "(use its --rank and --alpha)"
        )


def check_init_folder(folder: str | Path, config: AdapterTrainingConfig, evaluator: str) -> None:
    """The checks of :func:`warm_start` its files can answer without the model (run before the
    model loads, so a wrong folder fails in a second): it loads as an adapter folder, holds
    weights, has the run's rank and scaling, and a binding, if any, names the run's evaluator
    version and number of adapted layers.

    Raises:
        AdapterError: a missing folder or malformed config (:func:`~logitjudge.engine.adapters.check_folder`).
        ValueError: no weights file, or another rank, scaling, evaluator or layers.
    """
    check_folder(folder)
    folder, where = Path(folder), f"--init-adapter {folder}"
    if not (folder / ADAPTER_WEIGHTS).is_file():
        raise ValueError(f"{where}: no {ADAPTER_WEIGHTS}")
    scaling, _ = read_config(folder)
    rank = json.loads((folder / ADAPTER_CONFIG).read_text(encoding="utf-8"))["r"]
    binding = folder / ADAPTER_BINDING
    bound = json.loads(binding.read_text(encoding="utf-8")) if binding.is_file() else {}
    run_scaling = config.alpha / config.rank
    _refuse_another(where, bound, rank, scaling, rank=config.rank, scaling=run_scaling, evaluator=evaluator)
    layers = (bound.get("trained") or {}).get("layers")
    if layers not in (None, config.layers):
        said = [layers_note(n) for n in (layers, config.layers)]
        raise ValueError(f"{where}: adapts {said[0]}, this run {said[1]} (use its --adapt-layers)")
