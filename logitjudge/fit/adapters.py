"""Training a branch adapter on the CPUs users have: labelled rows -> the evaluator's own questions
-> an activated LoRA (:mod:`logitjudge.engine.adapters`) trained on their branches only.

::

    examples = head_examples(registry.get("chunk_support@4"), rows)
    result = train_adapter(engine, examples, AdapterTrainingConfig(rank=16, layers=8), work="out/.adapter")
    folder = write_adapter(result, "adapters/")          # PEFT's files + our binding + CARD.md

What a step costs is what decides the design (a 1.5B forward over a short branch on CPU is bound by
reading the weights, not by arithmetic):

- **The state once.** Each example's state (prefix) runs once, without gradients, on the base
  weights and in the engine's precision (as serving runs it), and its keys and values go to a disk
  cache in bf16 (:class:`KVStore`, keyed by the engine's fingerprint, precision and prompt version
  and the prefix's token ids). Later epochs and resumed runs read them back instead of recomputing.
- **Many branches per step.** ``batch_size`` branches of different states run in one forward: their
  state KV left-padded to the longest, an additive mask hiding the padding, each row's position ids
  continuing its own state. One weight read then serves the whole batch.
- **The branch's frozen layers once.** The layers below the lowest adapted one run base weights on
  the branch too, so what enters that layer does not change while training: the first epoch keeps
  it (fp32, beside the KV), and later epochs and resumed runs start the branch there, running only
  the adapted layers forward and backward.
- **Gradients through the branch only.** The adapter's update runs on the branch tokens only (the
  engine's own per-token hooks, so training computes exactly what serving computes); the state's
  keys and values are constants of the step.
- **The loss is the readout's**: cross-entropy of the gold option under the softmax over the
  question's label logits at its answer position (the LM head's label rows, fp32).

Checkpoints (the adapter's A and B, the optimizer, the epoch's order and position) are written every
``checkpoint_every`` steps and on Ctrl-C; a run with the same data and settings resumes from one.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import resource
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from logitjudge.engine.adapters import BranchAdapter, save_adapter
from logitjudge.engine.formulas import logsumexp
from logitjudge.engine.pack import additive_mask
from logitjudge.engine.types import EngineRequest
from logitjudge.fit.examples import Example
from logitjudge.fit.heads import classification_report

__all__ = ["AdapterTrainingConfig", "AdapterResult", "KVStore", "train_adapter", "held_out_split", "write_adapter"]

TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
"""The linear layers adapted by default: attention and MLP projections (Llama/Qwen names)."""
TRAINING_NAME = "training"


@dataclass(frozen=True)
class AdapterTrainingConfig:
    """What ``logitjudge fit --adapter`` trains (its flags; PEFT's names where PEFT has one).

    Attributes:
        rank: ``r`` of the update. alpha: ``lora_alpha`` (scaling ``alpha / rank``).
        layers: the top this-many decoder layers are adapted (0: every layer).
        targets: module names adapted in those layers.
        lr: AdamW learning rate (no decay of the rate; weight decay 0).
        epochs: passes over the training rows.
        batch_size: branches per step (one forward and backward).
        seed: the split, the initialisation and the order of the rows.
        holdout: share of the row groups kept out of training for the report.
        checkpoint_every: steps between checkpoints.
        max_rows: train on at most this many of the training rows (a seeded draw; ``None``: all).
            The held-out split does not depend on it, so runs of different sizes report on the
            same held-out rows.
        report_rows: report on at most this many held-out rows (a seeded draw; ``None``: all).
    """

    rank: int = 16
    alpha: int = 32
    layers: int = 8
    targets: tuple[str, ...] = TARGETS
    lr: float = 2e-4
    epochs: int = 1
    batch_size: int = 16
    seed: int = 0
    holdout: float = 0.2
    checkpoint_every: int = 50
    max_rows: int | None = None
    report_rows: int | None = None


@dataclass
class AdapterResult:
    """A trained adapter and what was measured on the way."""

    adapter: BranchAdapter
    config: AdapterTrainingConfig
    evaluator: str
    question_type: str
    options: tuple[str, ...]
    engine: dict[str, Any]
    trained: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)


class KVStore:
    """States' keys and values on disk in bf16, one file per state.

    Args:
        folder: where the files go (created).
        namespace: what the entries depend on besides the prefix (model fingerprint, precision,
            prompt version); part of every key.
    """

    def __init__(self, folder: str | Path, namespace: Sequence[str]) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.namespace = tuple(namespace)
        self.hits = 0
        self.misses = 0

    def _path(self, prefix: Sequence[int]) -> Path:
        h = hashlib.sha256(json.dumps([self.namespace, list(prefix)]).encode()).hexdigest()
        return self.folder / f"{h[:32]}.pt"

    def get(self, prefix: Sequence[int]) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
        """Per layer ``(keys, values)``, each (kv_heads, S, head_dim) bf16, or None."""
        path = self._path(prefix)
        if not path.exists():
            self.misses += 1
            return None
        self.hits += 1
        return torch.load(path, weights_only=True)

    def put(self, prefix: Sequence[int], kv: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        path = self._path(prefix)
        tmp = path.with_suffix(".tmp")
        torch.save(kv, tmp)
        tmp.replace(path)

    def _stem_path(self, prefix: Sequence[int], branch: Sequence[int], layer: int) -> Path:
        h = hashlib.sha256(json.dumps([self.namespace, list(prefix), list(branch), layer]).encode()).hexdigest()
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


def _state_kv(engine: Any, prefix: tuple[int, ...], store: KVStore) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The state's per-layer (keys, values), (kv_heads, S, head_dim) bf16: from ``store``, or one
    forward without gradients on the base weights (stored)."""
    kv = store.get(prefix)
    if kv is not None:
        return kv
    from logitjudge.engine.pack import RequestPlan

    with torch.no_grad():
        cache = engine.runner.state_forward(RequestPlan(prefix, ()))
    kv = [(layer.keys[0].to(torch.bfloat16).cpu(), layer.values[0].to(torch.bfloat16).cpu()) for layer in cache.layers]
    store.put(prefix, kv)
    return kv


def _lora_parameters(model: Any, config: AdapterTrainingConfig, seed: int) -> dict[str, tuple[Any, Any]]:
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


@dataclass
class _Row:
    prefix: tuple[int, ...]
    branch: tuple[int, ...]
    labels: tuple[int, ...]  # the displayed options' label ids
    gold: int  # the displayed position of the gold option


def _rows(engine: Any, examples: Sequence[Example]) -> list[_Row]:
    rows = []
    for ex in examples:
        plan = engine.plan(EngineRequest(ex.state, (replace(ex.question, rotations=1, adapter=None, head=None),)))
        (view,) = plan.questions[0].views
        if any(len(lab) != 1 for lab in view.labels):
            raise ValueError(f"{ex.key}: multi-token labels are not trained yet (a question of single-token labels)")
        names = [str(o.name) for o in ex.question.options]
        gold = view.option_index.index(names.index(ex.label))
        rows.append(_Row(plan.prefix, view.branch, tuple(lab[0] for lab in view.labels), gold))
    return rows


def _batches(order: Sequence[int], rows: Sequence[_Row], size: int) -> list[list[int]]:
    """Consecutive batches of ``size``; within each window of 8 batches rows are sorted by state
    length, so a batch pads its states' KV little."""
    out = []
    window = size * 8
    for w in range(0, len(order), window):
        chunk = sorted(order[w : w + window], key=lambda i: len(rows[i].prefix))
        out += [chunk[k : k + size] for k in range(0, len(chunk), size)]
    return out


def _branch_logits(
    engine: Any,
    rows: Sequence[_Row],
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


def _common_start(rows: Sequence[_Row], cap: int = 8) -> tuple[int, ...]:
    """The tokens every branch begins with (at most ``cap``, at least the first): PEFT's invocation tokens."""
    first = rows[0].branch
    k = 0
    while k < min(cap, len(first)) and all(len(r.branch) > k and r.branch[k] == first[k] for r in rows):
        k += 1
    return tuple(first[: max(k, 1)])


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def train_adapter(
    engine: Any,
    examples: Sequence[Example],
    config: AdapterTrainingConfig,
    *,
    evaluator: str,
    work: str | Path,
    progress: Callable[[int, dict[str, Any]], None] | None = None,
    report_batch: int = 8,
    compare_head: str | None = None,
    log: Callable[[str], None] | None = None,
    report_progress: Callable[[int], None] | None = None,
) -> AdapterResult:
    """Train an adapter for ``examples`` (one evaluator's questions) and report on held-out groups.

    Args:
        engine: a transformers :class:`~logitjudge.engine.core.Engine` (its state cache is not used).
        examples: :func:`~logitjudge.fit.examples.head_examples` of the evaluator.
        config: :class:`AdapterTrainingConfig`.
        evaluator: ``name@version`` the questions belong to (the adapter's binding).
        work: the KV cache (``work/kv``) and the checkpoint (``work/checkpoint.pt``); a checkpoint of
            the same examples and settings is resumed.
        progress: called after each step with the rows it trained and ``{"loss", "tokens"}``.
        compare_head: a trained head loaded on the engine that reads the same question: the
            report puts its figures on the same held-out rows beside the adapter's.
        log: called with a line for a person (resuming, or a checkpoint that does not match).
        report_progress: called with the held-out rows each report batch answered (two passes:
            with the adapter, then without).

    Returns:
        an :class:`AdapterResult`; ``trained`` holds seconds per row per epoch, the KV cache's size
        on disk, peak memory; ``metrics`` the held-out report (:func:`classification_report`
        for the adapter, the zero-shot readout and the majority class, per source).

    Raises:
        ValueError: no examples, examples of several question types, multi-token labels.
        KeyboardInterrupt: after writing a checkpoint.
    """
    if not examples:
        raise ValueError("no examples")
    types = {(e.question.type, tuple(str(o.name) for o in e.question.options)) for e in examples}
    if len(types) != 1:
        raise ValueError(f"the examples hold several kinds of question: {sorted(types)}")
    ((qtype, options),) = types
    described = engine.describe()
    work = Path(work)
    store = KVStore(work / "kv", (described["fingerprint"], described["precision"], described["prompt_version"]))
    rows = _rows(engine, examples)
    train, test = held_out_split(examples, config.holdout, config.seed)
    draw = random.Random(config.seed)
    if config.max_rows is not None and config.max_rows < len(train):
        train = sorted(draw.sample(train, config.max_rows))
    if config.report_rows is not None and config.report_rows < len(test):
        test = sorted(draw.sample(test, config.report_rows))
    params = _lora_parameters(engine.lm.model, config, config.seed)
    adapter = BranchAdapter(TRAINING_NAME, params, config.alpha / config.rank, _common_start(rows))
    optimizer = torch.optim.AdamW([p for ab in params.values() for p in ab], lr=config.lr, weight_decay=0.0)
    # what a checkpoint must match to be resumed: every row as the engine sees it (state, branch,
    # labels, gold), the settings, and the engine (weights, precision, prompt)
    seen = [[list(r.prefix), list(r.branch), list(r.labels), r.gold] for r in rows]
    bound = [described[k] for k in ("fingerprint", "precision", "prompt_version")]
    digest = hashlib.sha256(json.dumps([seen, asdict(config), bound, evaluator]).encode()).hexdigest()
    checkpoint = work / "checkpoint.pt"
    state: dict[str, Any] = {"epoch": 0, "step": 0, "seconds": [], "losses": []}
    if checkpoint.exists():
        saved = torch.load(checkpoint, weights_only=False)
        if saved.get("digest") == digest:
            for path, (a, b) in params.items():
                a.data.copy_(saved["weights"][path][0])
                b.data.copy_(saved["weights"][path][1])
            optimizer.load_state_dict(saved["optimizer"])
            state = saved["state"]
            done = state["epoch"] * len(train) + min(len(train), state["step"] * config.batch_size)
            if log is not None:
                log(f"resuming from {checkpoint}: epoch {state['epoch'] + 1}, step {state['step']} ({done} rows done)")
            if progress is not None and done:
                progress(done, {"loss": state["losses"][-1] if state["losses"] else float("nan"), "tokens": 0})
        elif log is not None:
            log(f"{checkpoint} was made for other rows, settings or model: training anew (it will be replaced)")

    def save_checkpoint() -> None:
        weights = {p: (a.detach().clone(), b.detach().clone()) for p, (a, b) in params.items()}
        blob = {"digest": digest, "weights": weights, "optimizer": optimizer.state_dict(), "state": state}
        torch.save(blob, checkpoint.with_suffix(".tmp"))
        checkpoint.with_suffix(".tmp").replace(checkpoint)

    engine.set_adapters([adapter])
    slot = engine.runner.adapters.slot(TRAINING_NAME)
    first = min(int(p.split(".layers.")[1].split(".")[0]) for p in params)
    try:
        for epoch in range(state["epoch"], config.epochs):
            rng = random.Random(config.seed * 1000 + epoch)
            order = list(train)
            rng.shuffle(order)
            batches = _batches(order, rows, config.batch_size)
            t0 = time.monotonic() - (state["seconds"][epoch] if len(state["seconds"]) > epoch else 0.0)
            for step in range(state["step"], len(batches)):
                batch = [rows[i] for i in batches[step]]
                kvs = [_state_kv(engine, r.prefix, store) for r in batch]
                stems = [store.get_stem(r.prefix, r.branch, first) for r in batch]

                def keep(b: int, hidden: torch.Tensor, batch: list[_Row] = batch) -> None:
                    store.put_stem(batch[b].prefix, batch[b].branch, first, hidden)

                logits = _branch_logits(engine, batch, kvs, slot, first=first, stems=stems, keep_stem=keep)
                # -log p(gold) under the softmax over the question's labels (the readout's)
                loss = torch.stack([logsumexp(z, 0) - z[r.gold] for z, r in zip(logits, batch)]).mean()
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                value = float(loss.detach())
                state["step"] = step + 1
                state["losses"].append(value)
                elapsed = time.monotonic() - t0
                state["seconds"] = state["seconds"][:epoch] + [elapsed]
                if progress is not None:
                    progress(len(batch), {"loss": value, "tokens": sum(len(r.branch) for r in batch)})
                if (step + 1) % config.checkpoint_every == 0:
                    save_checkpoint()
            state["epoch"], state["step"] = epoch + 1, 0
            save_checkpoint()
    except KeyboardInterrupt:
        save_checkpoint()
        engine.set_adapters([])
        raise
    engine.set_adapters([])
    trained = BranchAdapter(
        TRAINING_NAME,
        {p: (a.detach().clone(), b.detach().clone()) for p, (a, b) in params.items()},
        adapter.scaling,
        adapter.invocation_tokens,
    )
    seconds = state["seconds"]
    info = {
        "rows": len(train),
        "held_out_rows": len(test),
        "epochs": config.epochs,
        "seconds_per_epoch": [round(s, 1) for s in seconds],
        "seconds_per_row": [round(s / max(1, len(train)), 3) for s in seconds],
        "kv_cache_bytes": store.nbytes(),
        "peak_rss_mb": round(_peak_rss_mb()),
        "final_loss_mean_last_20": float(np.mean(state["losses"][-20:])) if state["losses"] else None,
        "modules": len(params),
        "threads": torch.get_num_threads(),
    }
    result = AdapterResult(trained, config, evaluator, qtype, options, described, trained=info)
    if test:
        result.metrics = held_out_report(
            engine,
            trained,
            [examples[i] for i in test],
            train,
            examples,
            config.seed,
            batch=report_batch,
            head=compare_head,
            progress=report_progress,
        )
    return result


def _answers(
    engine: Any,
    examples: Sequence[Example],
    adapter: str | None,
    batch: int,
    head: str | None = None,
    progress: Callable[[int], None] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(N, C) probabilities of each example's options (request order), with or without the adapter,
    and the label readout's beside them (the same unless ``head`` reads the question)."""
    out, labels = [], []
    for k in range(0, len(examples), batch):
        reqs = [
            EngineRequest(e.state, (replace(e.question, rotations=1, head=head, adapter=adapter),))
            for e in examples[k : k + batch]
        ]
        for res in engine.run_batch(reqs):
            if isinstance(res, Exception):
                raise res
            answer = res.answers[0]
            out.append(list(answer.probabilities))
            labels.append(list(answer.label_probabilities or answer.probabilities))
        if progress is not None:
            progress(len(reqs))
    return np.array(out), np.array(labels)


def held_out_report(
    engine: Any,
    adapter: BranchAdapter,
    test: Sequence[Example],
    train: Sequence[int],
    examples: Sequence[Example],
    seed: int,
    *,
    batch: int = 8,
    head: str | None = None,
    progress: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """The adapter on held-out examples beside the zero-shot readout, the training majority class
    and, with ``head`` (a head loaded on the engine for this question), that head on the same rows,
    overall and per source (:func:`classification_report`; intervals by group)."""
    options = [str(o.name) for o in test[0].question.options]
    gold = [e.label for e in test]
    groups = [e.group for e in test]
    engine.set_adapters([adapter])
    try:
        probs, _ = _answers(engine, test, adapter.name, batch, progress=progress)
    finally:
        engine.set_adapters([])
    by_head, zero = _answers(engine, test, None, batch, head, progress)
    report = classification_report(gold, probs, options, groups, seed=seed)
    report["zero_shot"] = classification_report(gold, zero, options, groups, seed=seed)
    if head is not None:
        report["head"] = {"name": head, **classification_report(gold, by_head, options, groups, seed=seed)}
    counts = {o: sum(examples[i].label == o for i in train) for o in options}
    majority = max(options, key=lambda o: counts[o])
    onehot = np.array([[0.98 if o == majority else 0.02 / (len(options) - 1) for o in options] for _ in test])
    report["majority"] = classification_report(gold, onehot, options, groups, seed=seed)
    report["per_source"] = {}
    for src in sorted({e.source for e in test}):
        sel = [k for k, e in enumerate(test) if e.source == src]
        report["per_source"][src] = classification_report(
            [gold[k] for k in sel], probs[sel], options, [groups[k] for k in sel], seed=seed
        )
        if head is not None:
            report["per_source"][src]["head"] = classification_report(
                [gold[k] for k in sel], by_head[sel], options, [groups[k] for k in sel], seed=seed
            )
    return report


def write_adapter(result: AdapterResult, out: str | Path, *, name: str | None = None, data: Sequence[str] = ()) -> Path:
    """Write ``<out>/<name>/``: PEFT's files, our binding (model, fingerprint, prompt version,
    evaluator, training record, held-out metrics) and a ``CARD.md``. ``name``: the evaluator's name."""
    name = name or result.evaluator.split("@")[0]
    engine = result.engine
    binding: dict[str, Any] = {
        "name": name,
        "model": engine.get("model"),
        "fingerprint": engine.get("fingerprint"),
        "prompt_version": engine.get("prompt_version"),
        "precision": engine.get("precision"),
        "evaluator": result.evaluator,
        "question_type": result.question_type,
        "options": list(result.options),
        "trained": {**result.trained, **asdict(result.config), "data": list(data)},
        "metrics": result.metrics,
    }
    folder = save_adapter(
        Path(out) / name,
        result.adapter.weights,
        rank=result.config.rank,
        alpha=result.config.alpha,
        invocation_tokens=result.adapter.invocation_tokens,
        base_model=str(engine.get("model")),
        binding=binding,
    )
    (folder / "CARD.md").write_text(_card(binding), encoding="utf-8")
    return folder


def _card(binding: dict[str, Any]) -> str:
    t, m = binding["trained"], binding["metrics"]

    def fig(r: dict[str, Any] | None) -> str:
        if not r:
            return "-"
        auroc = f", AUROC {r['auroc']:.3f}" if r.get("auroc") is not None else ""
        ci = r.get("accuracy_interval")
        ci_s = f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""
        return f"accuracy {r['accuracy']:.3f}{ci_s}, macro-F1 {r['macro_f1']:.3f}{auroc} (n={r['rows']})"

    lines = [
        f"# Adapter `{binding['name']}` for {binding['evaluator']}",
        "",
        f"An activated LoRA for `{binding['model']}` ({binding['prompt_version']}, {binding['precision']}): "
        f"the {binding['question_type']} question's branch runs it; options {', '.join(binding['options'])}.",
        "",
        "## Training",
        f"- rows: {t['rows']} (held out: {t['held_out_rows']} rows, by group); data: {', '.join(t['data']) or '-'}",
        f"- rank {t['rank']}, alpha {t['alpha']}, top {t['layers']} layers, modules {', '.join(t['targets'])}",
        f"- epochs {t['epochs']}, batch {t['batch_size']} branches, lr {t['lr']}, seed {t['seed']}",
        f"- seconds per epoch {t['seconds_per_epoch']} ({t['seconds_per_row']} s per row) on {t['threads']} threads",
        f"- state KV cache on disk {t['kv_cache_bytes'] / 2**20:.1f} MiB; peak memory {t['peak_rss_mb']} MiB",
        "",
        "## Held-out rows",
        f"- adapter: {fig(m)}",
        f"- zero-shot label readout: {fig(m.get('zero_shot'))}",
        f"- training majority class: {fig(m.get('majority'))}",
    ]
    if m.get("head"):
        lines.append(f"- the trained head `{m['head']['name']}` on the same rows: {fig(m['head'])}")
    for src, r in (m.get("per_source") or {}).items():
        lines.append(f"- {src}: {fig(r)}")
    return "\n".join(lines) + "\n"
