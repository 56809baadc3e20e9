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
  The start every state shares (the chat head) runs once; each state's forward continues its KV.
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
It may ask for more or fewer epochs than the checkpoint was made for (not fewer than it has done):
the rate's schedule is recomputed from the step it resumes at, and the change is recorded.

A pass too long for one sitting can also run in parts (``part``: the k-th of n disjoint parts of
the training rows), each started from the adapter the last one wrote (``init``): the adapter folder
is 21 MB (rank 16, top 8 layers of the default model), a checkpoint with its optimizer three
times that, the KV cache gigabytes.
A part runs once a pass; once every part has trained, any part may start the next pass (its rows
in another order). The binding records the part, its pass and the chain of adapters it started from.
"""

from __future__ import annotations

import hashlib
import json
import random
import resource
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from logitjudge.engine.adapters import ADAPTER_BINDING, BranchAdapter, load_adapter, save_adapter
from logitjudge.engine.formulas import logsumexp
from logitjudge.engine.types import EngineRequest
from logitjudge.errors import AdapterError
from logitjudge.fit.adapter_parts import init_chain, part_pass, split_digest, training_rows, warm_start
from logitjudge.fit.adapter_steps import (
    AdapterTrainingConfig,
    BranchRow,
    KVStore,
    SharedStart,
    branch_logits,
    branch_rows,
    common_start,
    held_out_split,
    layers_note,
    learning_rate,
    lora_parameters,
    shared_start,
    split_with_train_only,
    state_kv,
    step_batches,
)
from logitjudge.fit.examples import Example
from logitjudge.fit.heads import classification_report

__all__ = [
    "AdapterTrainingConfig",
    "AdapterResult",
    "KVStore",
    "epochs_note",
    "start_note",
    "train_only_note",
    "train_adapter",
    "held_out_split",
    "write_adapter",
]

TRAINING_NAME = "training"


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
    train_only: Sequence[Example] = (),
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
        report_progress: called with the held-out rows each report batch answered (one pass: the
            adapted and the plain question share each state's forward).
        train_only: more examples of the same question that only train: the held-out rows are
            drawn from ``examples`` alone (:func:`~logitjudge.fit.adapter_steps.split_with_train_only`),
            so the report is on the rows a run without them reports on.

    Returns:
        an :class:`AdapterResult`; ``trained`` holds seconds per row per epoch, the KV cache's size
        on disk, peak memory; ``metrics`` the held-out report (:func:`classification_report`
        for the adapter, the zero-shot readout and the majority class, per source).

    Raises:
        ValueError: no examples, examples of several question types, multi-token labels, a
            ``config.part`` out of range or empty, a ``config.init`` folder that does not load,
            was trained for other weights or another prompt, or is of another shape, question
            or pass (:func:`~logitjudge.fit.adapter_parts.warm_start`); each names ``--init-adapter``
            or ``--train-part``.
        KeyboardInterrupt: after writing a checkpoint.
    """
    if not examples:
        raise ValueError("no examples")
    n_rows = len(examples)
    examples, train, test, extra = split_with_train_only(examples, train_only, config.holdout, config.seed)
    types = {(e.question.type, tuple(str(o.name) for o in e.question.options)) for e in examples}
    if len(types) != 1:
        raise ValueError(f"the examples hold several kinds of question: {sorted(types)}")
    ((qtype, options),) = types
    described = engine.describe()
    runner = engine.runner
    if runner.windows is not None or runner.stepwise:  # branch_logits reads every position of every layer
        kind = "sliding-window attention" if runner.windows is not None else "recurrent layers"
        raise ValueError(
            f"{described.get('model', 'this model')} has {kind}: training a branch adapter needs every "
            "position of a state's keys and values in every layer, so it is not supported on this model"
        )
    start_from = None
    if config.init is not None:  # checked before anything is written: a refusal leaves no cache behind
        try:
            start_from = load_adapter(config.init, engine.lm.model)
            start_from.check(described)
        except AdapterError as exc:
            raise ValueError(f"--init-adapter: {exc}") from None
        if not start_from.binding and log is not None:
            log(
                f"--init-adapter {config.init}: a folder without {ADAPTER_BINDING}: its module names and shapes "
                "are checked; the model, prompt and question it was trained for cannot be"
            )
    rows = branch_rows(engine, examples)
    passed, train = training_rows(train, config)
    split = split_digest(examples, passed, test)  # the pass's rows, before its part is taken
    if train_only:
        extra["rows"] = sum(i >= n_rows for i in train)  # after --max-train-rows: the ones that train
        if log is not None:
            log(
                f"training-only rows: {extra['rows']} train beside {len(train) - extra['rows']} of the rows; "
                f"{extra['left_out_held_out_group']} left out as of a held-out group, "
                f"{extra['left_out_duplicate']} as already present"
            )
    if config.report_rows is not None and config.report_rows < len(test):  # its own draw: any --max-train-rows
        test = sorted(random.Random(config.seed + 1).sample(test, config.report_rows))
    params = lora_parameters(engine.lm.model, config, config.seed)
    adapter = BranchAdapter(TRAINING_NAME, params, config.alpha / config.rank, common_start(rows))
    init = None
    if start_from is not None:
        init = warm_start(
            params,
            start_from,
            scaling=adapter.scaling,
            evaluator=evaluator,
            options=options,
            part=config.part,
            split=split,
        )
    pass_no = 1  # the pass this part makes: its rows in another order in each pass
    if config.part is not None and init is not None:
        try:
            pass_no = part_pass(config.part, init)
        except ValueError as exc:
            raise ValueError(f"--init-adapter {config.init}: {exc}") from None
    work = Path(work)
    store = KVStore(work / "kv", (described["fingerprint"], described["precision"], described["prompt_version"]))
    trainable = [p for ab in params.values() for p in ab]
    optimizer = torch.optim.AdamW(trainable, lr=config.lr, weight_decay=0.0)
    # what a checkpoint must match to be resumed: every row as the engine sees it (state, branch,
    # labels, gold), which rows train and which are held out (the groups decide: they are not in
    # the rows), the settings but the number of epochs, and the engine (weights, precision, prompt)
    seen = [[list(r.prefix), list(r.branch), list(r.labels), r.gold] for r in rows]
    bound = [described[k] for k in ("fingerprint", "precision", "prompt_version")]
    # the starting adapter by its weights, not its folder's path; part and init only when set, so
    # a checkpoint of a run without them keeps its digest
    settings = {k: v for k, v in asdict(config).items() if k not in ("epochs", "part", "init")}
    if config.part is not None:
        settings["part"] = list(config.part)
    started = [init["sha256"]] if init else []
    digest = hashlib.sha256(
        json.dumps([seen, list(train), list(test), settings, bound, evaluator, *started]).encode()
    ).hexdigest()
    checkpoint = work / "checkpoint.pt"
    state: dict[str, Any] = {"epoch": 0, "step": 0, "seconds": [], "losses": [], "epochs": [[0, config.epochs]]}
    if checkpoint.exists():
        saved = torch.load(checkpoint, weights_only=False)
        if saved.get("digest") == digest:
            done_epochs, done_steps = saved["state"]["epoch"], saved["state"]["step"]
            if done_epochs + (done_steps > 0) > config.epochs:
                raise ValueError(
                    f"{checkpoint} has trained {done_epochs} epochs and {done_steps} steps: ask for at least "
                    f"{done_epochs + (done_steps > 0)} epochs, or use another work folder"
                )
            for path, (a, b) in params.items():
                a.data.copy_(saved["weights"][path][0])
                b.data.copy_(saved["weights"][path][1])
            optimizer.load_state_dict(saved["optimizer"])
            state = saved["state"]
            done = state["epoch"] * len(train) + min(len(train), state["step"] * config.batch_size)
            if log is not None:
                log(f"resuming from {checkpoint}: epoch {state['epoch'] + 1}, step {state['step']} ({done} rows done)")
            # [global step, epochs] from that step on: the rate's schedule is recomputed over the new length
            before = state["epochs"][-1][1]
            if before != config.epochs:
                at = state["epoch"] * len(step_batches(list(train), rows, config.batch_size)) + state["step"]
                if state["epochs"][-1][0] == at:  # no step ran under the last change: it is replaced
                    state["epochs"].pop()
                if not state["epochs"] or state["epochs"][-1][1] != config.epochs:
                    state["epochs"].append([at, config.epochs])
                if log is not None:
                    log(
                        f"the checkpoint was made for {before} epochs, this run asks for {config.epochs}: "
                        f"from this step the rate follows the schedule of a {config.epochs}-epoch run"
                    )
            if progress is not None and done:
                progress(done, {"loss": state["losses"][-1] if state["losses"] else float("nan"), "tokens": 0})
        elif log is not None:
            log(
                f"{checkpoint} was made for other rows, settings, starting adapter or model: "
                "training anew (it will be replaced)"
            )

    def save_checkpoint() -> None:
        weights = {p: (a.detach().clone(), b.detach().clone()) for p, (a, b) in params.items()}
        blob = {"digest": digest, "weights": weights, "optimizer": optimizer.state_dict(), "state": state}
        torch.save(blob, checkpoint.with_suffix(".tmp"))
        checkpoint.with_suffix(".tmp").replace(checkpoint)

    engine.set_adapters([adapter])
    slot = engine.runner.adapters.slot(TRAINING_NAME)
    first = min(int(p.split(".layers.")[1].split(".")[0]) for p in params)
    start: SharedStart | None = None
    try:
        for epoch in range(state["epoch"], config.epochs):
            rng = random.Random(config.seed * 1000 + epoch + 100_000 * (pass_no - 1))
            order = list(train)
            rng.shuffle(order)
            batches = step_batches(order, rows, config.batch_size)
            t0 = time.monotonic() - (state["seconds"][epoch] if len(state["seconds"]) > epoch else 0.0)
            for step in range(state["step"], len(batches)):
                batch = [rows[i] for i in batches[step]]
                if start is None and not all(store.has(r.prefix) for r in batch):
                    start = shared_start(engine, [rows[i] for i in train])  # once, when a state is first missing
                kvs = [state_kv(engine, r.prefix, store, start) for r in batch]
                stems = [store.get_stem(r.prefix, r.branch, first) for r in batch]

                def keep(b: int, hidden: torch.Tensor, batch: list[BranchRow] = batch) -> None:
                    store.put_stem(batch[b].prefix, batch[b].branch, first, hidden)

                logits = branch_logits(engine, batch, kvs, slot, first=first, stems=stems, keep_stem=keep)
                # -log p(gold) under the softmax over the question's labels (the readout's)
                loss = torch.stack([logsumexp(z, 0) - z[r.gold] for z, r in zip(logits, batch)]).mean()
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if config.max_grad_norm > 0:
                    torch.nn.utils.clip_grad_norm_(trainable, config.max_grad_norm)
                for group in optimizer.param_groups:
                    group["lr"] = learning_rate(config, epoch * len(batches) + step, config.epochs * len(batches))
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
        raise
    finally:  # an error leaves the engine as it found it
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
        **({"train_only": extra} if train_only else {}),
        "sources": sorted({examples[i].source for i in train}),
        **({"part": list(config.part), "pass": pass_no} if config.part else {}),
        "split_sha256": split,
        **({"init": init} if init else {}),
        "epochs": config.epochs,
        "epochs_from_step": state["epochs"],
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
    adapter: str,
    batch: int,
    head: str | None = None,
    progress: Callable[[int], None] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per example (request order), (N, C) each: its options' probabilities with the adapter, the
    plain question's (read by ``head`` when given), and the plain question's label readout. One
    request per example holds both branches, so its state runs once (an installed adapter leaves
    the plain branch as it is)."""
    out: tuple[list[list[float]], list[list[float]], list[list[float]]] = ([], [], [])
    for k in range(0, len(examples), batch):
        reqs = [
            EngineRequest(
                e.state,
                (
                    replace(e.question, rotations=1, head=None, adapter=adapter),
                    replace(e.question, rotations=1, head=head, adapter=None),
                ),
            )
            for e in examples[k : k + batch]
        ]
        for res in engine.run_batch(reqs):
            if isinstance(res, Exception):
                raise res
            adapted, plain = res.answers
            out[0].append(list(adapted.probabilities))
            out[1].append(list(plain.probabilities))
            out[2].append(list(plain.label_probabilities or plain.probabilities))
        if progress is not None:
            progress(len(reqs))
    return np.array(out[0]), np.array(out[1]), np.array(out[2])


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
        probs, by_head, zero = _answers(engine, test, adapter.name, batch, head, progress)
    finally:
        engine.set_adapters([])
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
        # the config's init (a path) is recorded by the run as trained.init (path, sha256, lineage)
        "trained": {**result.trained, **asdict(result.config), "init": result.trained.get("init"), "data": list(data)},
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


def epochs_note(changes: Sequence[Sequence[int]] | None) -> str:
    """`` (started for 3 epochs; 2 from step 159)`` when a resumed run changed its epochs (``changes``:
    the binding's ``trained.epochs_from_step``, [global step, epochs] pairs), else ''."""
    changes = changes or ()
    if len(changes) < 2:
        return ""
    later = "; ".join(f"{n} from step {step}" for step, n in changes[1:])
    return f" (started for {changes[0][1]} epochs; {later})"


def train_only_note(extra: dict[str, int] | None) -> str:
    """``", N of them training-only rows (M more left out: ...)"`` for a binding's ``trained.train_only``
    (:func:`~logitjudge.fit.adapter_steps.split_with_train_only`'s counts); ``""`` for a run without them."""
    if not extra:
        return ""
    left = extra["left_out_held_out_group"] + extra["left_out_duplicate"]
    return f", {extra['rows']} of them training-only rows ({left} more left out: held-out group or already present)"


def _pass_note(trained: Mapping[str, Any]) -> str:
    """``", pass 2"`` for a part of a second or later pass (``trained.pass``), else ``""``."""
    return f", pass {trained['pass']}" if (trained.get("pass") or 1) > 1 else ""


def start_note(trained: dict[str, Any]) -> str:
    """What a run trained from, for a card or a report: ``"part 2 of 3 of the training rows;
    started from `DIR` (...)"`` from a binding's ``trained`` (``part``, ``init``); ``""`` for a whole
    run started as PEFT starts an adapter."""
    out = []
    if trained.get("part"):
        k, n = trained["part"]
        out.append(f"part {k} of {n} of the training rows{_pass_note(trained)}")
    chain = []
    for init in init_chain(trained.get("init")):
        rows = f"{init['rows']} rows" if init.get("rows") is not None else "rows not recorded"
        part = f", part {init['part'][0]} of {init['part'][1]}{_pass_note(init)}" if init.get("part") else ""
        chain.append(f"`{init['path']}` (sha256 {init['sha256'][:12]}; {rows}{part})")
    if chain:
        out.append("started from " + ", which started from ".join(chain))
    return "; ".join(out)


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
        f"- rows: {t['rows']}{train_only_note(t.get('train_only'))} (held out: {t['held_out_rows']} rows, by group); "
        f"data: {', '.join(t['data']) or '-'}",
        *([f"- {started}"] if (started := start_note(t)) else []),
        f"- rank {t['rank']}, alpha {t['alpha']}, {layers_note(t['layers'])}, modules {', '.join(t['targets'])}",
        f"- epochs {t['epochs']}{epochs_note(t.get('epochs_from_step'))}, batch {t['batch_size']} branches, "
        f"lr {t['lr']}, seed {t['seed']}",
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
