"""One training step of a branch adapter, and what it reads: the settings, the disk cache of the
states' keys and values (and of what enters the lowest adapted layer), the adapter's initial
weights, the rows as the engine sees them, and the forward of many branches after their states.
:mod:`logitjudge.fit.adapters` runs the epochs, the checkpoints and the report on top of it."""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from logitjudge.engine.pack import additive_mask
from logitjudge.engine.types import EngineRequest, render_text
from logitjudge.fit.examples import Example

__all__ = [
    "TARGETS",
    "AdapterTrainingConfig",
    "BranchRow",
    "KVStore",
    "SharedStart",
    "step_batches",
    "branch_logits",
    "branch_rows",
    "common_start",
    "held_out_split",
    "learning_rate",
    "row_identity",
    "split_with_train_only",
    "lora_parameters",
    "shared_start",
    "state_kv",
]

TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
"""The linear layers adapted by default: attention and MLP projections (Llama/Qwen names)."""


@dataclass(frozen=True)
class AdapterTrainingConfig:
    """What ``logitjudge fit --adapter`` trains (its flags; PEFT's names where PEFT has one).

    Attributes:
        rank: ``r`` of the update. alpha: ``lora_alpha`` (scaling ``alpha / rank``).
        layers: the top this-many decoder layers are adapted (0: every layer).
        targets: module names adapted in those layers.
        lr: AdamW's peak learning rate (weight decay 0): it rises linearly over the first
            ``warmup`` share of the steps to ``lr``, then falls linearly toward 0 (the last step
            runs at ``lr / (steps after the warm-up)``; :func:`learning_rate`).
        warmup: share of the steps the rate rises over.
        max_grad_norm: the gradients' global L2 norm is clipped to this before each step (0: off).
        epochs: passes over the training rows.
        batch_size: branches per step (one forward and backward).
        seed: the split, the initialisation and the order of the rows.
        holdout: share of the row groups kept out of training for the report.
        checkpoint_every: steps between checkpoints.
        max_rows: train on at most this many of the training rows (a seeded draw; ``None``: all).
            The held-out split does not depend on it, so runs of different sizes report on the
            same held-out rows.
        report_rows: report on at most this many held-out rows (a seeded draw; ``None``: all).
        part: ``(k, n)``: train on the k-th of n seeded, disjoint parts of the training rows (the
            held-out rows do not change), so one long pass over many rows can run as n shorter
            runs, each started from the last one's adapter (``init``); ``None``: every row.
        init: an adapter folder (ours, or PEFT's activated LoRA) whose A and B start the training
            instead of PEFT's initialisation; it must have this rank, scaling and set of modules
            and have been trained for this model, prompt and question
            (:func:`~logitjudge.fit.adapter_parts.warm_start`).
    """

    rank: int = 16
    alpha: int = 32
    layers: int = 8
    targets: tuple[str, ...] = TARGETS
    lr: float = 2e-4
    warmup: float = 0.1
    max_grad_norm: float = 1.0
    epochs: int = 1
    batch_size: int = 16
    seed: int = 0
    holdout: float = 0.2
    checkpoint_every: int = 50
    max_rows: int | None = None
    report_rows: int | None = None
    part: tuple[int, int] | None = None
    init: str | None = None


class KVStore:
    """States' keys and values on disk in bf16, one file per state.

    Args:
        folder: where the files go (created).
        namespace: what the entries depend on besides the prefix (model fingerprint, precision,
            prompt version); part of every key, with :attr:`FORMAT`.
    """

    FORMAT = 1
    """What the files hold and how (per layer bf16 keys and values; fp32 inputs of the lowest
    adapted layer): part of every key, so a cache written by code that stored something else is
    not read. Raise it whenever that changes."""

    def __init__(self, folder: str | Path, namespace: Sequence[str]) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.namespace = tuple(namespace)
        self.hits = 0
        self.misses = 0

    def _path(self, prefix: Sequence[int]) -> Path:
        h = hashlib.sha256(json.dumps([self.FORMAT, self.namespace, list(prefix)]).encode()).hexdigest()
        return self.folder / f"{h[:32]}.pt"

    def get(self, prefix: Sequence[int]) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
        """Per layer ``(keys, values)``, each (kv_heads, S, head_dim) bf16, or None."""
        path = self._path(prefix)
        if not path.exists():
            self.misses += 1
            return None
        self.hits += 1
        return torch.load(path, weights_only=True)

    def has(self, prefix: Sequence[int]) -> bool:
        """Whether ``prefix``'s keys and values are on disk (no hit or miss is counted)."""
        return self._path(prefix).exists()

    def put(self, prefix: Sequence[int], kv: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        path = self._path(prefix)
        tmp = path.with_suffix(".tmp")
        torch.save(kv, tmp)
        tmp.replace(path)

    def _stem_path(self, prefix: Sequence[int], branch: Sequence[int], layer: int) -> Path:
        key = [self.FORMAT, self.namespace, list(prefix), list(branch), layer]
        h = hashlib.sha256(json.dumps(key).encode()).hexdigest()
        return self.folder / f"{h[:32]}.stem.pt"

    def get_stem(self, prefix: Sequence[int], branch: Sequence[int], layer: int) -> torch.Tensor | None:
        """(len(branch), H) fp32: the branch's hidden states entering decoder layer ``layer`` (0-based), or None."""
        path = self._stem_path(prefix, branch, layer)
        return torch.load(path, weights_only=True) if path.exists() else None

    def put_stem(self, prefix: Sequence[int], branch: Sequence[int], layer: int, hidden: torch.Tensor) -> None:
        path = self._stem_path(prefix, branch, layer)
        torch.save(hidden.detach().float().cpu().clone(), path.with_suffix(".tmp"))
        path.with_suffix(".tmp").replace(path)

    def nbytes(self) -> int:
        """Bytes on disk (the states' KV and the branches' frozen-layer outputs)."""
        return sum(p.stat().st_size for p in self.folder.glob("*.pt"))


def learning_rate(config: AdapterTrainingConfig, step: int, total: int) -> float:
    """The rate of global step ``step`` (0-based) of ``total``: ``lr * (step + 1) / W`` over the
    ``W = max(1, round(warmup * total))`` warm-up steps (the last of them at ``lr``), then
    ``lr * (total - step) / (total - W)``, falling linearly toward 0 (the linear schedule with
    warm-up of ``transformers.get_linear_schedule_with_warmup``, without its step at rate 0)."""
    warm = max(1, round(config.warmup * total))
    if step < warm:
        return config.lr * (step + 1) / warm
    return config.lr * max(0.0, (total - step) / max(1, total - warm))


@dataclass(frozen=True)
class SharedStart:
    """The tokens every training state begins with (the chat head and the template's opening:
    41 tokens on the default model's chunk_support rows) and their KV cache, run once, as the engine's state
    forward runs (base weights, the state's precision, before any upcast)."""

    ids: tuple[int, ...]
    cache: Any


def shared_start(engine: Any, rows: Sequence[BranchRow]) -> SharedStart | None:
    """The longest start the rows' prefixes share (each keeps at least one token of its own) with
    its KV, or None when they share nothing. A short state pays mostly for this start: a
    chunk_support row is about 50-90 tokens, 41 of them shared."""
    from logitjudge.engine.precision import state_autocast
    from logitjudge.engine.state_cache import output_cache

    prefixes = [r.prefix for r in rows]
    n = min(len(os.path.commonprefix(prefixes)), min(len(p) for p in prefixes) - 1)
    if n < 1:
        return None
    runner = engine.runner
    ids = prefixes[0][:n]
    with torch.no_grad(), state_autocast(runner.device, runner.state_dtype if runner.mixed else None):
        out = runner._decode(torch.tensor(ids, dtype=torch.long)[None], torch.arange(n)[None], use_cache=True)
    cache = output_cache(out)
    return None if cache is None else SharedStart(tuple(ids), cache)


def state_kv(
    engine: Any, prefix: tuple[int, ...], store: KVStore, start: SharedStart | None = None
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The state's per-layer (keys, values), (kv_heads, S, head_dim) bf16: from ``store``, or one
    forward without gradients on the base weights (stored). With ``start`` (which ``prefix``
    begins with), that forward continues a fork of the start's KV cache over the rest of the
    prefix (positions after the start): the same keys and values up to the matrix products'
    rounding (at most one bf16 step of the stored KV, ``tests/engine/test_fit_adapter.py``)."""
    kv = store.get(prefix)
    if kv is not None:
        return kv
    from logitjudge.engine.pack import RequestPlan
    from logitjudge.engine.precision import state_autocast
    from logitjudge.engine.state_cache import fork_cache

    runner = engine.runner
    n = 0 if start is None else len(start.ids)
    with torch.no_grad():
        if start is not None and len(prefix) > n and tuple(prefix[:n]) == start.ids:
            cache = fork_cache(start.cache)  # extended in place; the start's own cache is untouched
            with state_autocast(runner.device, runner.state_dtype if runner.mixed else None):
                runner._continue(
                    torch.tensor(prefix[n:], dtype=torch.long)[None], torch.arange(n, len(prefix))[None], cache
                )
        else:
            cache = runner.state_forward(RequestPlan(prefix, ()))
    # bf16 on disk (a mixed-precision state is not upcast first: the cast gives the same values)
    kv = [(layer.keys[0].to(torch.bfloat16).cpu(), layer.values[0].to(torch.bfloat16).cpu()) for layer in cache.layers]
    store.put(prefix, kv)
    return kv


def lora_parameters(model: Any, config: AdapterTrainingConfig, seed: int) -> dict[str, tuple[Any, Any]]:
    """A (r, in) and B (out, r) per adapted module, initialised as PEFT does (A Kaiming-uniform with
    a = sqrt(5), B zeros: the adapter starts as the base model)."""
    decoder = getattr(model, model.base_model_prefix)
    n = len(decoder.layers)
    first = 0 if config.layers <= 0 else max(0, n - config.layers)
    prefix = model.base_model_prefix
    gen = torch.Generator().manual_seed(seed)
    out: dict[str, tuple[Any, Any]] = {}
    for i in range(first, n):
        for name, module in decoder.layers[i].named_modules():
            if isinstance(module, torch.nn.Linear) and name.rsplit(".", 1)[-1] in config.targets:
                a = torch.empty(config.rank, module.in_features)
                bound = 1 / math.sqrt(module.in_features)  # kaiming_uniform_(a=sqrt(5)) on (r, in)
                a.uniform_(-bound, bound, generator=gen)
                b = torch.zeros(module.out_features, config.rank)
                out[f"{prefix}.layers.{i}.{name}"] = (torch.nn.Parameter(a), torch.nn.Parameter(b))
    if not out:
        raise ValueError(f"no module named {list(config.targets)} in the adapted layers")
    return out


def held_out_split(examples: Sequence[Example], share: float, seed: int) -> tuple[list[int], list[int]]:
    """(train, held-out) example indices; a group never straddles them (scikit-learn's
    ``GroupShuffleSplit``). ``share`` 0: every example trains, none is held out."""
    idx = list(range(len(examples)))
    if share <= 0:
        return idx, []
    from sklearn.model_selection import GroupShuffleSplit

    split = GroupShuffleSplit(n_splits=1, test_size=share, random_state=seed)
    train, test = next(split.split(idx, groups=[e.group for e in examples]))
    return sorted(map(int, train)), sorted(map(int, test))


def split_with_train_only(
    examples: Sequence[Example], train_only: Sequence[Example], share: float, seed: int
) -> tuple[list[Example], list[int], list[int], dict[str, int]]:
    """:func:`held_out_split` of ``examples``, with ``train_only`` examples added to the training part.

    The held-out part is drawn from ``examples`` alone, so it is the one a run without the extra
    examples holds out (and the one a head fitted on ``examples`` with the same seed and share holds
    out). An extra example of a held-out group (the same source and group) would leak into the
    report, and the same row again (the same key, from the row's id, and the same state, question
    and gold as an example or an earlier extra) would train twice: both are left out. Rows without
    an id are keyed by position, so the same position with other content is another row.

    Returns:
        (every example kept: ``examples`` then the kept extras, train indices into it, held-out
        indices into it, ``{"rows", "left_out_held_out_group", "left_out_duplicate"}`` of the extras).
    """
    train, test = held_out_split(examples, share, seed)
    held_groups = {(examples[i].source, examples[i].group) for i in test}
    seen = {row_identity(e) for e in examples}
    kept: list[Example] = []
    counts = {"rows": 0, "left_out_held_out_group": 0, "left_out_duplicate": 0}
    for e in train_only:
        identity = row_identity(e)
        if identity in seen:
            counts["left_out_duplicate"] += 1
        elif (e.source, e.group) in held_groups:
            counts["left_out_held_out_group"] += 1
        else:
            seen.add(identity)
            kept.append(e)
    counts["rows"] = len(kept)
    n = len(examples)
    return [*examples, *kept], train + list(range(n, n + len(kept))), test, counts


def layers_note(layers: int) -> str:
    """``AdapterTrainingConfig.layers`` in words: "every layer" (0) or "the top n layers"."""
    return "every layer" if layers <= 0 else f"the top {layers} layers"


def row_identity(e: Example) -> str:
    """What makes two examples the same training row: the key, the state, the question and the gold."""
    return json.dumps([e.key, render_text(e.state), repr(e.question), e.label])


@dataclass
class BranchRow:
    prefix: tuple[int, ...]
    branch: tuple[int, ...]
    labels: tuple[int, ...]  # the displayed options' label ids
    gold: int  # the displayed position of the gold option


def branch_rows(engine: Any, examples: Sequence[Example]) -> list[BranchRow]:
    rows = []
    for ex in examples:
        plan = engine.plan(EngineRequest(ex.state, (replace(ex.question, rotations=1, adapter=None, head=None),)))
        (view,) = plan.questions[0].views
        if any(len(lab) != 1 for lab in view.labels):
            raise ValueError(f"{ex.key}: multi-token labels are not trained yet (a question of single-token labels)")
        names = [str(o.name) for o in ex.question.options]
        gold = view.option_index.index(names.index(ex.label))
        rows.append(BranchRow(plan.prefix, view.branch, tuple(lab[0] for lab in view.labels), gold))
    return rows


def step_batches(order: Sequence[int], rows: Sequence[BranchRow], size: int) -> list[list[int]]:
    """Consecutive batches of ``size``; within each window of 8 batches rows are sorted by state
    length, so a batch pads its states' KV little."""
    out = []
    window = size * 8
    for w in range(0, len(order), window):
        chunk = sorted(order[w : w + window], key=lambda i: len(rows[i].prefix))
        out += [chunk[k : k + size] for k in range(0, len(chunk), size)]
    return out


def branch_logits(
    engine: Any,
    rows: Sequence[BranchRow],
    kvs: Sequence[list[tuple[torch.Tensor, torch.Tensor]]],
    slot: int,
    *,
    first: int = 0,
    stems: Sequence[torch.Tensor | None] | None = None,
    keep_stem: Callable[[int, torch.Tensor], None] | None = None,
) -> list[torch.Tensor]:
    """Per row, its labels' logits (n_options,) fp32 at its answer position, through a forward of
    every branch after its own state's KV (left-padded), with the adapter in ``slot`` on the branches.

    ``first`` (0-based) is the lowest adapted layer. With ``stems`` (per row, what enters layer
    ``first``, (len(branch), H)) the forward starts there: layers below it are not run. Otherwise
    the full forward runs and ``keep_stem(row, hidden)`` receives what entered layer ``first``."""
    from transformers import DynamicCache

    runner = engine.runner
    dtype, device = runner.dtype, runner.device
    B, S = len(rows), max(len(r.prefix) for r in rows)
    W = max(len(r.branch) for r in rows)
    cache = DynamicCache()
    for layer in range(len(kvs[0])):
        k0 = kvs[0][layer][0]
        keys = torch.zeros(B, k0.shape[0], S, k0.shape[2], dtype=dtype)
        values = torch.zeros(B, k0.shape[0], S, kvs[0][layer][1].shape[2], dtype=dtype)
        for b, kv in enumerate(kvs):
            n = kv[layer][0].shape[1]
            keys[b, :, S - n :] = kv[layer][0].to(dtype)
            values[b, :, S - n :] = kv[layer][1].to(dtype)
        cache.update(keys.to(device), values.to(device), layer)
    ids = torch.full((B, W), runner.pad_id, dtype=torch.long)
    pos = torch.zeros((B, W), dtype=torch.long)
    allowed = torch.zeros(B, W, S + W, dtype=torch.bool)
    causal = torch.tril(torch.ones(W, W, dtype=torch.bool))
    for b, r in enumerate(rows):
        n, q = len(r.prefix), len(r.branch)
        ids[b, :q] = torch.tensor(r.branch)
        pos[b] = torch.arange(n, n + W)
        allowed[b, :, S - n : S] = True
        allowed[b, :, S:] = causal
    adapter_ids = torch.full((B, W), slot, dtype=torch.long)
    mask = additive_mask(allowed, dtype).to(device)
    decoder = runner.decoder
    layers = decoder.layers
    if stems is not None and first > 0 and all(x is not None for x in stems):
        embeds = torch.zeros(B, W, stems[0].shape[-1], dtype=dtype)  # type: ignore[union-attr]
        for b, stem in enumerate(stems):
            embeds[b, : stem.shape[0]] = stem.to(dtype)  # type: ignore[union-attr]
        decoder.layers = torch.nn.ModuleList(list(layers)[first:])  # the frozen layers are not run
        try:
            with runner.adapters.tokens(adapter_ids):
                out = decoder(
                    inputs_embeds=embeds.to(device),
                    position_ids=pos.to(device),
                    attention_mask=mask,
                    use_cache=True,
                    cache_position=torch.arange(S, S + W, device=device),
                    **{runner.cache_kw: cache},
                )
        finally:
            decoder.layers = layers
    else:
        handle = None
        if keep_stem is not None and first > 0:

            def keep(_module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
                hidden = args[0] if args else kwargs["hidden_states"]
                for b, r in enumerate(rows):
                    keep_stem(b, hidden[b, : len(r.branch)])

            handle = layers[first].register_forward_pre_hook(keep, with_kwargs=True)
        try:
            out = runner._decode(
                ids,
                pos,
                cache=cache,
                adapter_ids=adapter_ids,
                attention_mask=mask,
                use_cache=True,
                cache_position=torch.arange(S, S + W, device=device),
            )
        finally:
            if handle is not None:
                handle.remove()
    last = torch.tensor([len(r.branch) - 1 for r in rows], device=device)
    h = out.last_hidden_state[torch.arange(B, device=device), last].float()  # (B, H)
    head = runner.model.get_output_embeddings()
    logits = []
    for b, r in enumerate(rows):
        w = head.weight[list(r.labels)].float()  # (n_options, H)
        z = h[b] @ w.T
        if getattr(head, "bias", None) is not None:
            z = z + head.bias[list(r.labels)].float()
        logits.append(engine.readout.transform(z))
    return logits


def common_start(rows: Sequence[BranchRow], cap: int = 8) -> tuple[int, ...]:
    """The tokens every branch begins with (at most ``cap``, at least the first): PEFT's invocation tokens."""
    first = rows[0].branch
    k = 0
    while k < min(cap, len(first)) and all(len(r.branch) > k and r.branch[k] == first[k] for r in rows):
        k += 1
    return tuple(first[: max(k, 1)])
