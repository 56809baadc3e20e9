"""The forward pass: hidden states at the read positions of packed requests.

Strategies behind one interface, ``run(plans) -> Reads``:

``packed``         prefix + all branches of one or more requests in one row, with a block mask:
                   a FlexAttention block mask when the model runs ``flex_attention``, else a
                   dense additive mask for rows of at most ``EngineConfig.dense_mask_max_tokens``;
                   a longer row falls back to ``prefix_rows`` (never a dense L x L mask).
``prefix_packed``  the prefix once into a KV cache, then all branches in one row after it,
                   block-masked among themselves.
``prefix_rows``    the prefix once into a KV cache, then one row per question from copies of the
                   cache, no mask. Required where layers ignore masks (recurrent, SSM, linear
                   attention); right padding is harmless because reads come before it.
``separate``       the naive reference: one full causal forward per question, nothing shared.
                   Used by the start-up self-check, the parity tests and the speed benchmark.

Only hidden states at read positions leave this module; the LM head runs in ``readout`` on them.
With :attr:`Runner.taps` set (the layers trained heads read, :mod:`logitjudge.engine.heads`),
each read row also carries those layers' states at the same position, captured by forward hooks
on the decoder layers during the same forwards (no extra tokens, no extra pass).
Every forward records the path it took in ``Reads.paths`` (``packed:dense``, ``packed:flex``,
``packed>prefix_rows`` ...), and the runner counts the dense masks it builds and their largest
side, so tests can assert which path ran at which length.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import torch

from logitjudge.engine.adapters import AdapterSlots
from logitjudge.engine.attention import attention_windows, flex_block_mask
from logitjudge.engine.config import STRATEGIES, EngineConfig
from logitjudge.engine.pack import (
    LabelTerm,
    RequestPlan,
    Tree,
    add_request,
    additive_mask,
    allowed_matrix,
    lay_out,
    padded_allowed,
)
from logitjudge.engine.precision import state_autocast, upcast_cache
from logitjudge.engine.rows import (
    Reads,
    branch_groups,
    counting_tokens,
    groups_tag,
    one_row,
    relabel,
    row_adapters,
    rows_of,
    shift_labels,
)
from logitjudge.engine.state_cache import StateCache, can_repeat, fork_cache, output_cache, repeat_cache

PREFIX_GROUP_TOKENS = 256
"""Most branch tokens per ``prefix_packed`` forward after the prefix. Measured on CPU (1 thread,
SmolLM2-135M fp32, a 2,041-token state with 64 mixed questions = 2,897 branch tokens; plain
causal forward over the same 4,938 tokens = 1.00): one group 1.19, groups of <= 1,024 tokens
0.91, <= 512 0.90, <= 256 0.84. SDPA on CPU with a float mask costs 1.36x the unmasked kernel
per score (2,900 x 4,941, measured), so fewer masked scores win over fewer calls."""


class Runner:
    """Runs packed requests through a loaded causal LM.

    Args:
        model: a transformers ``*ForCausalLM`` in eval mode.
        device: where input tensors go (the input embeddings' device).
        dtype: the model's dtype (masks are built in it).
        max_row_tokens: the most tokens one ``packed`` row holds (several requests share a row
            up to this; a larger request runs alone); ``prefix_rows`` batches rows up to it.
        stepwise: advance rows after a cache one token at a time (recurrent/SSM layers).
        dense_mask_max_tokens: the longest row that gets a dense L x L mask; the thin masks
            after a prefix cache get at most its square in cells.
        state_cache: prefix KV caches kept across calls (:mod:`logitjudge.engine.state_cache`),
            used by ``prefix_packed`` and ``prefix_rows``; ``None``: none kept.
        state_dtype: run every state (prefix) forward in this dtype under autocast and upcast its
            KV cache to ``dtype`` (mixed precision, :mod:`logitjudge.engine.precision`); the state
            then always runs in its own forward (``packed`` is refused, ``separate`` continues
            each question from the state's cache). ``None``: everything in ``dtype``.

    The attention implementation is the model's own (``config._attn_implementation``, set by the
    engine): with ``flex_attention`` packed rows get FlexAttention block masks at every length.
    """

    def __init__(
        self,
        model: Any,
        device: torch.device,
        dtype: torch.dtype,
        *,
        max_row_tokens: int = EngineConfig.max_row_tokens,
        stepwise: bool = False,
        dense_mask_max_tokens: int = EngineConfig.dense_mask_max_tokens,
        state_cache: StateCache | None = None,
        state_dtype: torch.dtype | None = None,
    ):
        self.model = model
        self.state_dtype = state_dtype
        self.decoder = getattr(model, model.base_model_prefix)
        self.device = device
        self.dtype = dtype
        self.max_row_tokens = max_row_tokens
        self.dense_mask_max_tokens = dense_mask_max_tokens
        self.dense_masks_built = 0  # instrumentation: dense masks built so far ...
        self.largest_dense_side = 0  # ... and the longest side of any of them
        self.largest_dense_cells = 0  # ... and the most cells (Lq x Lk) of any of them
        self.state_cache = state_cache
        self.group_tokens = PREFIX_GROUP_TOKENS  # most branch tokens per prefix_packed forward
        self.windows = attention_windows(model.config)
        # Recurrent/SSM layers (e.g. transformers' Mamba) treat a multi-token input after a cache
        # as a fresh prefill; rows after the prefix then advance one token per step, as in decoding.
        self.stepwise = stepwise
        self.pad_id = int(getattr(model.config, "pad_token_id", None) or 0)
        # transformers renamed ``past_key_values`` to ``cache`` in 5.x; accept either.
        params = inspect.signature(self.decoder.forward).parameters
        self.cache_kw = "cache" if "cache" in params else "past_key_values"
        self.taps: tuple[int, ...] = ()
        """Layers (1..N, see :mod:`logitjudge.engine.heads`) whose states every read also carries."""
        self._tapped: dict[int, torch.Tensor] = {}  # layer -> (B, L, H) of the latest forward
        self.n_layers = int(getattr(model.config, "num_hidden_layers", 0) or len(getattr(self.decoder, "layers", ())))
        self.adapters = AdapterSlots(model)
        """The branch adapters questions may run (:mod:`logitjudge.engine.adapters`)."""

    def counting_tokens(self, callback: Callable[[int], None]) -> AbstractContextManager[None]:
        """While open, ``callback(tokens)`` as each forward pass moves through the model
        (:func:`~logitjudge.engine.rows.counting_tokens` on this model's decoder layers)."""
        return counting_tokens(self.decoder, callback)

    @property
    def flex(self) -> bool:
        """True when the model runs FlexAttention (packed rows then get block masks)."""
        return getattr(self.model.config, "_attn_implementation", None) == "flex_attention"

    @property
    def mixed(self) -> bool:
        """True when states run in :attr:`state_dtype` and questions in :attr:`dtype`."""
        return self.state_dtype is not None and self.state_dtype != self.dtype

    def allows(self, strategy: str) -> bool:
        """False for ``packed`` in mixed precision (state and questions share its one forward)
        and for ``prefix_packed`` on sliding-window models; True for the other strategies."""
        if strategy == "packed":
            return not self.mixed
        if strategy == "prefix_packed":
            return self.windows is None
        return strategy in STRATEGIES

    @staticmethod
    def uses_windows(config: Any) -> bool:
        """True when some attention layer of this model uses a sliding window."""
        return attention_windows(config) is not None

    # -- masks -------------------------------------------------------------------------------

    def _mask(self, allowed_for: Any, q_len: int, k_len: int, *, cells: bool = False) -> Any:
        """Build the dense attention mask(s); ``allowed_for(window)`` gives the (Lq, Lk) bool matrix.

        The limit is ``dense_mask_max_tokens`` per side, or with ``cells=True`` (the thin masks
        after a prefix cache) ``dense_mask_max_tokens ** 2`` cells: the same memory.

        Raises:
            RuntimeError: over the limit (callers route such rows elsewhere).
        """
        limit = self.dense_mask_max_tokens
        if (q_len * k_len > limit**2) if cells else (max(q_len, k_len) > limit):
            raise RuntimeError(f"refusing a dense {q_len} x {k_len} mask (limit {limit} per side)")
        self.dense_masks_built += 1
        self.largest_dense_side = max(self.largest_dense_side, q_len, k_len)
        self.largest_dense_cells = max(self.largest_dense_cells, q_len * k_len)
        if isinstance(self.windows, dict):
            return {t: additive_mask(allowed_for(w), self.dtype).to(self.device) for t, w in self.windows.items()}
        return additive_mask(allowed_for(self.windows), self.dtype).to(self.device)

    def _decode(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor,
        cache: Any = None,
        adapter_ids: torch.Tensor | None = None,
        **kw: Any,
    ) -> Any:
        """One decoder forward; ``adapter_ids`` (shaped like ``input_ids``): each token's adapter
        slot, -1 or ``None`` for the base weights (:meth:`AdapterSlots.tokens`)."""
        if cache is not None:
            kw[self.cache_kw] = cache
        hooks = []
        self._tapped = {}
        for layer in self.taps:
            if layer == self.n_layers:
                continue  # the final state is last_hidden_state
            if not 1 <= layer < self.n_layers:
                raise ValueError(f"tapped layer {layer} is not in 1..{self.n_layers}")

            def keep(_module: Any, _args: Any, output: Any, layer: int = layer) -> None:
                self._tapped[layer] = output[0] if isinstance(output, tuple) else output

            hooks.append(self.decoder.layers[layer - 1].register_forward_hook(keep))
        try:
            with self.adapters.tokens(adapter_ids):
                return self.decoder(
                    input_ids=input_ids.to(self.device), position_ids=position_ids.to(self.device), **kw
                )
        finally:
            for hook in hooks:
                hook.remove()

    def _states(self, out: Any) -> torch.Tensor:
        """(B, L, H * (1 + K)) of the latest forward: its final states, then each tapped layer's."""
        final = out.last_hidden_state
        if not self.taps:
            return final
        return torch.cat([final] + [final if t == self.n_layers else self._tapped[t] for t in self.taps], dim=-1)

    def _gather(self, out: Any, b: int, index: torch.Tensor) -> torch.Tensor:
        """(R, H * (1 + K)) rows ``index`` of batch row ``b`` of the latest forward (see :class:`Reads`)."""
        final = out.last_hidden_state[b, index]
        if not self.taps:
            return final
        parts = [final if t == self.n_layers else self._tapped[t][b, index] for t in self.taps]
        return torch.cat([final, *parts], dim=-1)

    # -- strategies --------------------------------------------------------------------------

    @torch.inference_mode()
    def run(self, plans: list[RequestPlan], strategy: str) -> Reads:
        """Hidden states at every read position of ``plans`` with the given strategy
        (``auto``: :meth:`choose` per request)."""
        if strategy == "auto":
            return self._auto(plans)
        if strategy == "packed":
            if self.mixed:
                raise ValueError("packed runs the state with the questions; mixed precision needs its own forward")
            return self._packed(plans)
        if strategy == "prefix_packed":
            return self._prefix_packed(plans)
        if strategy == "prefix_rows":
            return self._prefix_rows(plans)
        if strategy == "separate":
            return self._separate(plans)
        raise ValueError(f"unknown strategy {strategy!r}; one of {STRATEGIES}")

    def choose(self, plan: RequestPlan) -> str:
        """The exact strategy that is fastest for ``plan`` on this model and device (``auto``).

        - layers that ignore masks (recurrent, SSM): ``prefix_rows``, the only exact one;
        - the state's KV is in the state cache: ``prefix_packed`` (``prefix_rows`` for
          sliding-window models), which skips the prefix forward;
        - one question read in one row (one view, single-token labels) without FlexAttention:
          ``separate``, one causal forward over state and branch, its state KV cropped into the
          state cache. Splitting such a request into a prefix forward and a branch forward costs
          about 17% more on CPU (SmolLM2-135M, 266 + 70 tokens, 2 threads: 293 vs 348 ms);
          ``benchmarks/speed/decision_pipeline.py`` measures it against transformers' pipeline;
        - FlexAttention (CUDA): ``packed``, one row for many requests, no dense mask at all;
        - sliding-window layers: ``packed`` (a windowed prefix cache cannot serve packed branches);
        - mixed precision (:attr:`state_dtype`): the state in its own forward, then
          ``prefix_rows`` (sliding windows, or one question in one row) or ``prefix_packed``;
        - otherwise ``prefix_packed``: the prefix through the causal fast path (no mask) into a
          KV cache, then the branches with a thin (Lb, S + Lb) mask. Measured on CPU (2 cores,
          fp32, SmolLM2-135M, ``benchmarks/results/speed-cpu.md``): at the plain-forward limit,
          where ``packed``'s L x L mask costs SDPA 10-35% (and above 4,096 tokens ``packed`` has
          to fall back to ``prefix_rows``).
        """
        if self.stepwise:
            return "prefix_rows"
        if self.cached(plan):
            return "prefix_rows" if self.windows is not None else "prefix_packed"
        if self.mixed:  # the state in its own (bf16) forward, then the questions
            return "prefix_rows" if self.windows is not None or one_row(plan) else "prefix_packed"
        if not self.flex and one_row(plan):
            return "separate"
        if self.flex or self.windows is not None:
            return "packed"
        return "prefix_packed"

    def _auto(self, plans: list[RequestPlan]) -> Reads:
        """Each request with :meth:`choose`'s strategy; requests that share one run together."""
        by: dict[str, list[int]] = {}
        for i, plan in enumerate(plans):
            by.setdefault(self.choose(plan), []).append(i)
        if len(by) == 1:
            return self.run(plans, next(iter(by)))
        hidden: list[torch.Tensor] = []
        labels: list[LabelTerm] = []
        run, paths = 0, []
        for strategy, idx in by.items():
            sub = self.run([plans[i] for i in idx], strategy)
            labels += relabel(sub.labels, idx, sum(h.shape[0] for h in hidden))
            hidden.append(sub.hidden)
            run += sub.tokens_run
            paths += sub.paths
        return Reads(torch.cat(hidden), labels, run, paths)

    def _flex_mask(self, row: Any) -> Any:
        """FlexAttention block mask(s) for a packed row: one per layer type where windows differ."""
        if isinstance(self.windows, dict):
            return {t: flex_block_mask(row, w, self.device) for t, w in self.windows.items()}
        return flex_block_mask(row, self.windows, self.device)

    def _packed(self, plans: list[RequestPlan]) -> Reads:
        """FlexAttention: requests share one row (the block mask skips cross-request tiles).
        Dense masks: one row per request, rows right-padded into a batch of at most
        ``max_row_tokens`` cells, so mask and attention cost grow with the batch, not with its
        square (one shared row of 8 requests ran 0.62 s per request vs 0.49 s alone on CPU)."""
        if self.flex:
            return self._packed_flex(plans)
        hidden: list[torch.Tensor] = []
        labels: list[LabelTerm] = []
        run, paths = 0, []
        too_long = [i for i, p in enumerate(plans) if p.n_tokens > self.dense_mask_max_tokens]
        if too_long:  # too long for a dense mask and no flex: prefix cache + rows
            sub = self._prefix_rows([plans[i] for i in too_long])
            hidden.append(sub.hidden)
            labels += relabel(sub.labels, too_long, 0)
            run += sub.tokens_run
            paths.append("packed>prefix_rows")
        batch: list[tuple[int, Tree]] = []
        width = 0  # the longest row in the batch (a request's row is plan.n_tokens long)
        for i, plan in enumerate(plans):
            if plan.n_tokens > self.dense_mask_max_tokens:
                continue
            if batch and max(width, plan.n_tokens) * (len(batch) + 1) > self.max_row_tokens:
                run += self._packed_dense_batch(batch, hidden, labels)
                paths.append("packed:dense")
                batch, width = [], 0
            tree = Tree()
            add_request(tree, plan, i)
            batch.append((i, tree))
            width = max(width, plan.n_tokens)
        if batch:
            run += self._packed_dense_batch(batch, hidden, labels)
            paths.append("packed:dense")
        return Reads(torch.cat(hidden), labels, run, paths)

    def _packed_dense_batch(
        self, batch: list[tuple[int, Tree]], hidden: list[torch.Tensor], labels: list[LabelTerm]
    ) -> int:
        """Run requests as rows of one padded batch; append their reads; return tokens run."""
        rows = [lay_out(tree) for _, tree in batch]
        width = max(r.input_ids.numel() for r in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)  # (B, W)
        pos = torch.zeros((len(rows), width), dtype=torch.long)  # (B, W)
        slots = torch.full((len(rows), width), -1, dtype=torch.long)  # (B, W)
        for b, r in enumerate(rows):
            n = r.input_ids.numel()
            ids[b, :n], pos[b, :n], slots[b, :n] = r.input_ids, r.position_ids, r.adapter_ids
        mask = self._mask(lambda w: padded_allowed(rows, width, window=w), width, width)  # (B, 1, W, W)
        out = self._decode(ids, pos, adapter_ids=slots, attention_mask=mask, use_cache=False)
        for b, ((_, tree), r) in enumerate(zip(batch, rows)):
            base = sum(h.shape[0] for h in hidden)
            hidden.append(self._gather(out, b, r.read_index.to(self.device)))  # (R_b, H')
            labels += shift_labels(tree.labels, base)
        return sum(r.input_ids.numel() for r in rows)

    def _packed_flex(self, plans: list[RequestPlan]) -> Reads:
        groups: list[list[int]] = []
        size = 0
        for i, p in enumerate(plans):
            if groups and size + p.n_tokens <= self.max_row_tokens:
                groups[-1].append(i)
                size += p.n_tokens
            else:
                groups.append([i])
                size = p.n_tokens
        hidden, labels, run, paths = [], [], 0, []
        for group in groups:
            tree = Tree()
            for i in group:
                add_request(tree, plans[i], i)
            row = lay_out(tree)
            out = self._decode(
                row.input_ids[None],
                row.position_ids[None],
                adapter_ids=row.adapter_ids[None],
                attention_mask=self._flex_mask(row),
                use_cache=False,
            )
            hidden.append(self._gather(out, 0, row.read_index.to(self.device)))  # (R_g, H')
            labels += shift_labels(tree.labels, sum(h.shape[0] for h in hidden[:-1]))
            run += row.input_ids.numel()
            paths.append("packed:flex")
        return Reads(torch.cat(hidden), labels, run, paths)

    def _prefix_cache(self, plan: RequestPlan) -> tuple[Any, bool]:
        """The KV cache of ``plan.prefix``, which the caller may extend, and whether it came from
        the state cache: a fork of its entry on a hit, else one causal forward over the prefix
        (stored there)."""
        if self.state_cache is not None:
            hit = self.state_cache.get(plan.prefix)
            if hit is not None:
                return fork_cache(hit), True
        ids = torch.tensor(plan.prefix, dtype=torch.long)[None]  # (1, S)
        with state_autocast(self.device, self.state_dtype if self.mixed else None):
            out = self._decode(ids, torch.arange(ids.shape[1])[None], use_cache=True)
        cache = output_cache(out)
        if cache is None:
            raise RuntimeError("the model returned no cache")
        if self.mixed:
            upcast_cache(cache, self.dtype)
        if self.state_cache is not None and self.state_cache.put(plan.prefix, cache):
            return fork_cache(cache), False
        return cache, False

    def state_forward(self, plan: RequestPlan) -> Any:
        """The KV cache of ``plan.prefix`` as serving computes it (base weights, the state's
        precision; from the state cache where it holds it): what adapter training continues."""
        return self._prefix_cache(plan)[0]

    def _keep_state(self, plan: RequestPlan, out: Any) -> None:
        """Put the state's KV, the first ``len(plan.prefix)`` positions of ``out``'s cache (a
        causal forward over the state and one branch, in one dtype), in the state cache. Caches that cannot be
        cropped (recurrent states) are not kept."""
        assert self.state_cache is not None
        cache = output_cache(out)
        if cache is None or not hasattr(cache, "crop"):
            return
        # a negative count removes that many tokens (transformers 5; 4.x read it the same way)
        cache.crop(len(plan.prefix) - cache.get_seq_length())
        self.state_cache.put(plan.prefix, cache)

    def cached(self, plan: RequestPlan) -> bool:
        """True when the state cache holds ``plan``'s prefix (a lookup that counts no hit)."""
        return self.state_cache is not None and self.state_cache.contains(plan.prefix)

    def branch_groups(self, plan: RequestPlan) -> list[list[int]] | None:
        """:func:`~logitjudge.engine.rows.branch_groups` under this runner's budgets."""
        return branch_groups(plan, self.dense_mask_max_tokens**2, self.group_tokens)

    def _prefix_packed(self, plans: list[RequestPlan]) -> Reads:
        """Per request: the prefix through the causal fast path into a KV cache (or from the state
        cache), then its branches, in as few forwards as the mask budget allows, each over a fork
        of that cache with an (Lg, S + Lg) mask: branches see the whole prefix and themselves."""
        hidden, labels, run, paths = [], [], 0, []
        for i, plan in enumerate(plans):
            groups = self.branch_groups(plan)
            if groups is None:  # one question's (Lq, S + Lq) mask alone is over the budget
                sub = self._prefix_rows([plan])
                hidden.append(sub.hidden)
                labels += relabel(sub.labels, [i], sum(h.shape[0] for h in hidden[:-1]))
                run += sub.tokens_run
                paths.append("prefix_packed>prefix_rows")
                continue
            cache, hit = self._prefix_cache(plan)
            S = len(plan.prefix)
            run += 0 if hit else S
            for g, group in enumerate(groups):
                tree = Tree()
                add_request(tree, plan, i, with_prefix=False, questions=group)
                row = lay_out(tree)
                Lb = row.input_ids.numel()

                def allowed_for(w: int | None, row: Any = row, S: int = S) -> torch.Tensor:
                    prefix = torch.ones(row.input_ids.numel(), S, dtype=torch.bool)  # (Lb, S)
                    if w is not None:
                        prefix &= (row.position_ids[:, None] - torch.arange(S)[None, :]) < w
                    return torch.cat([prefix, allowed_matrix(row, window=w)], dim=1)  # (Lb, S + Lb)

                out = self._decode(
                    row.input_ids[None],
                    row.position_ids[None],
                    adapter_ids=row.adapter_ids[None],
                    attention_mask=self._mask(allowed_for, Lb, S + Lb, cells=True),
                    cache=cache if g == len(groups) - 1 else fork_cache(cache),
                    use_cache=True,
                )
                hidden.append(self._gather(out, 0, row.read_index.to(self.device)))  # (R_g, H')
                labels += shift_labels(tree.labels, sum(h.shape[0] for h in hidden[:-1]))
                run += Lb
            paths.append(("prefix_packed:cached" if hit else "prefix_packed:dense") + groups_tag(groups))
        return Reads(torch.cat(hidden), labels, run, paths)

    def _prefix_rows(self, plans: list[RequestPlan]) -> Reads:
        hidden: list[Any] = []
        labels: list[Any] = []
        run = 0
        for i, plan in enumerate(plans):
            cache, _ = self._prefix_cache(plan)
            rows, reads_local = rows_of(plan, i)
            slots = row_adapters(plan)
            S = len(plan.prefix)
            run += S + sum(len(r) for r, _ in rows)
            base = sum(h.shape[0] for h in hidden)
            per_row = max(1, self.max_row_tokens // max(len(r) for r, _ in rows))
            if not can_repeat(cache):
                per_row = 1  # e.g. linear-attention / SSM state caches: one row per copy
            row_hidden: list[torch.Tensor] = []
            for start in range(0, len(rows), per_row):
                chunk = rows[start : start + per_row]
                width = max(len(r) for r, _ in chunk)
                ids = torch.full((len(chunk), width), self.pad_id, dtype=torch.long)  # (B, W) right-padded
                for b, (r, _) in enumerate(chunk):
                    ids[b, : len(r)] = torch.tensor(r)
                pos = torch.arange(S, S + width)[None].expand(len(chunk), -1)
                c = repeat_cache(cache, len(chunk))
                a = torch.tensor(slots[start : start + per_row])[:, None].expand(-1, width)  # (B, W)
                h = self._continue(ids, pos, c, a)  # (B, W, H)
                for b, (_, offsets) in enumerate(chunk):
                    row_hidden.append(h[b, torch.tensor(offsets, device=self.device)])
            hidden.append(torch.cat(row_hidden))
            labels += shift_labels(reads_local, base)
        return Reads(torch.cat(hidden), labels, run, ["prefix_rows"] * len(plans))

    def _continue(
        self, ids: torch.Tensor, pos: torch.Tensor, cache: Any, adapter_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        """States (B, W, H') of rows ``ids`` (B, W) that continue a prefix held in ``cache``
        (final, then tapped layers: :meth:`_states`); ``adapter_ids`` (B, W) as in :meth:`_decode`."""
        if not self.stepwise:
            return self._states(
                self._decode(
                    ids,
                    pos,
                    cache=cache,
                    adapter_ids=adapter_ids,
                    use_cache=True,
                    cache_position=pos[0].to(self.device),
                )
            )
        steps = []
        for t in range(ids.shape[1]):
            out = self._decode(
                ids[:, t : t + 1],
                pos[:, t : t + 1],
                cache=cache,
                adapter_ids=None if adapter_ids is None else adapter_ids[:, t : t + 1],
                use_cache=True,
                cache_position=pos[0, t : t + 1].to(self.device),
            )
            cache = output_cache(out)
            steps.append(self._states(out))
        return torch.cat(steps, dim=1)

    def _separate(self, plans: list[RequestPlan]) -> Reads:
        """One forward per question row over the state and that row (the reference every other
        strategy is checked against). In mixed precision the state runs in its own forward (its
        KV cache shared, as in every strategy) and each row continues a fork of it alone."""
        if self.mixed:
            return self._separate_after_state(plans)
        hidden: list[Any] = []
        labels: list[Any] = []
        run = 0
        for i, plan in enumerate(plans):
            rows, reads_local = rows_of(plan, i)
            slots = row_adapters(plan)
            base = sum(h.shape[0] for h in hidden)
            parts = []
            # one row: its forward also gives the state's KV (the first S positions of a causal
            # forward do not depend on what follows them), kept for a later request on the state
            fill = len(rows) == 1 and self.windows is None and self.state_cache is not None and self.state_cache.enabled
            for (r, offsets), slot in zip(rows, slots):
                ids = torch.tensor(plan.prefix + r, dtype=torch.long)[None]  # (1, S + q)
                a = torch.tensor([-1] * len(plan.prefix) + [slot] * len(r))[None]  # (1, S + q)
                out = self._decode(ids, torch.arange(ids.shape[1])[None], adapter_ids=a, use_cache=fill)
                at = torch.tensor([len(plan.prefix) + o for o in offsets], device=self.device)
                parts.append(self._gather(out, 0, at))
                run += ids.shape[1]
                if fill:
                    self._keep_state(plan, out)
            hidden.append(torch.cat(parts))
            labels += shift_labels(reads_local, base)
        return Reads(torch.cat(hidden), labels, run, ["separate"] * len(plans))

    def _separate_after_state(self, plans: list[RequestPlan]) -> Reads:
        hidden: list[Any] = []
        labels: list[Any] = []
        run = 0
        for i, plan in enumerate(plans):
            cache, hit = self._prefix_cache(plan)
            rows, reads_local = rows_of(plan, i)
            S = len(plan.prefix)
            run += (0 if hit else S) + sum(len(r) for r, _ in rows)
            base = sum(h.shape[0] for h in hidden)
            parts = []
            for (r, offsets), slot in zip(rows, row_adapters(plan)):
                ids = torch.tensor(r, dtype=torch.long)[None]  # (1, q)
                a = torch.full((1, len(r)), slot)  # (1, q)
                h = self._continue(ids, torch.arange(S, S + len(r))[None], fork_cache(cache), a)  # (1, q, H')
                parts.append(h[0, torch.tensor(offsets, device=self.device)])
            hidden.append(torch.cat(parts))
            labels += shift_labels(reads_local, base)
        return Reads(torch.cat(hidden), labels, run, ["separate:state"] * len(plans))
