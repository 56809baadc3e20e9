"""The features a head is fitted on: the hidden states of the tapped layers at each example's
answer position (:meth:`logitjudge.engine.core.Engine.answer_states`, one packed pass per batch,
nothing generated) and the zero-shot label readout, cached on disk by the engine's fingerprint,
dtype and prompt version, the layer and the example's content (so a re-run, or a head on other
layers already tapped, reads them back instead of running the model).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from logitjudge.engine.types import EngineRequest, render_text
from logitjudge.fit.examples import Example

if TYPE_CHECKING:
    from logitjudge.engine.core import Engine


def _digest(engine_id: Mapping[str, Any], ex: Example) -> str:
    blob = json.dumps(
        [
            engine_id,
            render_text(ex.state),
            render_text(ex.question.instructions or ""),
            [o.name for o in ex.question.options],
        ],
        ensure_ascii=False,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


@dataclass
class Features:
    """Tapped states of every example and its zero-shot label readout.

    Attributes:
        states: (N, K, H) fp32, K = ``len(layers)``.
        layers: the tapped layers, in order.
        label_probs: (N, C) the label readout of each example's question (option order).
        computed: examples that ran through the model (the rest came from the cache).
        seconds: wall time of the extraction.
    """

    states: np.ndarray
    layers: tuple[int, ...]
    label_probs: np.ndarray
    computed: int = 0
    seconds: float = 0.0


def default_layers(n: int) -> list[int]:
    """The layers ``logitjudge fit`` taps by default on an ``n``-layer model: N/2, 5N/7, 6N/7 and
    N (1-based; the polarity of a support question shows in the late layers)."""
    return sorted({max(1, n // 2), max(1, round(5 * n / 7)), max(1, round(6 * n / 7)), n})


def extract(
    engine: Engine,
    examples: Sequence[Example],
    *,
    layers: Sequence[int],
    cache: str | Path | None = None,
    batch_size: int = 8,
    progress: Callable[[int], None] | None = None,
) -> Features:
    """Hidden states of ``layers`` at each example's answer position, through ``engine``.

    Args:
        engine: a loaded :class:`~logitjudge.engine.core.Engine` (transformers backend).
        batch_size: requests per engine call; the examples over one state are one request
            (its questions packed over it).
        cache: a folder; each example's states are stored per layer as
            ``<fingerprint>/<prompt version>-<precision>/<digest>.L<layer>.npy`` (digest of the state
            and the question; precision ``float32`` or ``mixed``) and read back on a later call.
        progress: called with the number of examples done after each batch.

    Returns:
        :class:`Features` in ``examples`` order.
    """
    d = engine.describe()
    engine_id = {k: d.get(k) for k in ("fingerprint", "prompt_version", "dtype")}  # the folder holds the precision
    folder = None
    if cache is not None:
        precision = d.get("precision") or d.get("dtype")
        folder = Path(cache) / str(d.get("fingerprint"))[:16] / f"{d.get('prompt_version')}-{precision}"
        folder.mkdir(parents=True, exist_ok=True)
    layers = tuple(int(x) for x in layers)
    n = len(examples)
    states: list[np.ndarray | None] = [None] * n
    probs: list[np.ndarray | None] = [None] * n
    todo: list[int] = []
    for i, ex in enumerate(examples):
        if folder is not None:
            base = folder / _digest(engine_id, ex)
            files = [base.with_name(f"{base.name}.L{x}.npy") for x in layers]
            zero = base.with_name(f"{base.name}.labels.npy")
            if all(f.is_file() for f in files) and zero.is_file():
                states[i] = np.stack([np.load(f) for f in files])
                probs[i] = np.load(zero)
                continue
        todo.append(i)
    if progress is not None and n - len(todo):
        progress(n - len(todo))
    # examples over one state go in one request: the state is read once and its questions,
    # isolated from each other, share it (the engine's packing, as in serving)
    by_state: dict[str, list[int]] = {}
    for i in todo:
        by_state.setdefault(render_text(examples[i].state), []).append(i)
    t0 = time.perf_counter()
    groups = list(by_state.values())
    for start in range(0, len(groups), batch_size):
        batch = groups[start : start + batch_size]
        got = engine.answer_states(
            [EngineRequest(examples[g[0]].state, tuple(examples[i].question for i in g)) for g in batch], layers
        )
        for g, (st, zero_shot) in zip(batch, got):
            for q, i in enumerate(g):
                s_i, p_i = st[q].numpy(), np.asarray(zero_shot[q], dtype=np.float64)
                states[i], probs[i] = s_i, p_i
                if folder is not None:
                    base = folder / _digest(engine_id, examples[i])
                    for k, x in enumerate(layers):
                        np.save(base.with_name(f"{base.name}.L{x}.npy"), s_i[k])
                    np.save(base.with_name(f"{base.name}.labels.npy"), p_i)
        if progress is not None:
            progress(sum(len(g) for g in batch))
    return Features(
        np.stack(states),  # type: ignore[arg-type]
        layers,
        np.stack(probs),  # type: ignore[arg-type]
        computed=len(todo),
        seconds=time.perf_counter() - t0,
    )
