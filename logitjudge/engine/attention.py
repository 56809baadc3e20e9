"""Attention for packed rows: which implementation runs, and FlexAttention block masks.

Two ways to isolate the question branches of a packed row (see ``engine.pack``):

``dense``  an additive float (Lq, Lk) mask per layer type (:func:`logitjudge.engine.pack.additive_mask`).
           Simple and exact, but quadratic in memory: a 32k-token state with 64 questions is a
           ~36k-token row, whose mask alone is 2.6 GiB in bf16 (5.2 GiB in fp32) per layer type.
           Built only for rows of at most
           :attr:`~logitjudge.engine.config.EngineConfig.dense_mask_max_tokens` tokens (4096).
``flex``   torch's FlexAttention with a :class:`BlockMask` built here straight from the segment
           tree: a ``mask_mod`` that reads segment ids, the ancestor table and positions, plus the
           list of (q block, kv block) tiles that hold any allowed pair. Memory is O(L) for the
           tensors and O((L/128)^2) for the tile lists; no L x L tensor ever exists (tiles are
           classified a few query blocks at a time, each chunk at most ``_CHUNK_ELEMENTS``).

Which implementation the model runs (``attn``):
``auto``  on CUDA, ``flex_attention`` when the model supports it and its layers use masks;
          otherwise (CPU, or no flex support) the implementation the model loaded with (sdpa).
          On the CPU flex works too (torch compiles it with the C++ backend, ~25 s once per
          process on 2 cores), so it is selectable there but never chosen automatically.
``eager`` / ``sdpa`` / ``flex_attention``  as transformers names them.
"""

from __future__ import annotations

from typing import Any

import torch

from logitjudge.engine.config import ATTN_CHOICES
from logitjudge.engine.pack import PackedRow, allowed_rows
from logitjudge.errors import ConfigurationError

FLEX_BLOCK = 128  # FlexAttention's default tile (torch's _DEFAULT_SPARSE_BLOCK_SIZE)
_CHUNK_ELEMENTS = 1 << 24  # bools per tile-classification chunk: 16 MiB


def attention_windows(config: Any) -> dict[str, int | None] | int | None:
    """How masks must be built for this model's attention layers.

    Returns ``None`` (one causal-style mask for every layer), an ``int`` (every layer uses a
    sliding window of that span), or a dict ``{layer_type: window or None}`` when layer types
    differ (e.g. Gemma 3's sliding and full layers): one mask per type, passed as a dict. One
    mask for all layers would silently disable the window.
    """
    window = getattr(config, "sliding_window", None)
    layer_types = getattr(config, "layer_types", None)
    if layer_types:
        kinds = {t: (window if t == "sliding_attention" else None) for t in set(layer_types)}
        return kinds if any(v is not None for v in kinds.values()) else None
    if window and getattr(config, "use_sliding_window", True):
        return int(window)
    return None


def flex_available() -> bool:
    """True when this torch has ``torch.nn.attention.flex_attention``."""
    try:
        import torch.nn.attention.flex_attention  # noqa: F401
    except ImportError:
        return False
    return True


def supports_flex(model: Any) -> bool:
    """True when the transformers model class declares FlexAttention support and torch has it."""
    return bool(getattr(model, "_supports_flex_attn", False)) and flex_available()


def resolve_attn(attn: str, model: Any, device: torch.device, *, mask_ignoring: bool) -> str:
    """The attention implementation to run: see the module docstring.

    Raises:
        ConfigurationError: an unknown name, or ``flex_attention`` for a model (or a torch)
            without it.
    """
    if attn not in ATTN_CHOICES:
        raise ConfigurationError(f"unknown attention {attn!r}; one of {ATTN_CHOICES}", field=("attn",))
    current = str(getattr(model.config, "_attn_implementation", None) or "eager")
    if attn == "auto":
        if device.type == "cuda" and not mask_ignoring and supports_flex(model):
            return "flex_attention"
        return current
    if attn == "flex_attention" and not supports_flex(model):
        raise ConfigurationError(f"{model.config.model_type} does not support flex_attention here", field=("attn",))
    return attn


def set_attn(model: Any, attn: str) -> None:
    """Switch the model's attention implementation (a no-op when it already runs ``attn``)."""
    if getattr(model.config, "_attn_implementation", None) != attn:
        model.set_attn_implementation(attn)


def flex_block_mask(row: PackedRow, window: int | None, device: torch.device) -> Any:
    """A FlexAttention ``BlockMask`` equal to ``allowed_matrix(row, window=window)``.

    Args:
        row: the packed row (segment ids, ancestor table, positions).
        window: a sliding-window span in positions, or ``None``.
        device: where the attention runs (the mask's tensors live there).

    Returns:
        A ``BlockMask`` of shape (1, 1, L, L) whose ``mask_mod`` decides partial tiles and whose
        tile lists skip every (q block, kv block) pair with nothing allowed.
    """
    from torch.nn.attention.flex_attention import BlockMask

    L = row.input_ids.numel()
    n_seg = row.ancestors.shape[0]
    nb = -(-L // FLEX_BLOCK)  # blocks per side
    padded = nb * FLEX_BLOCK
    # Padding tokens form one extra segment that only sees itself: real queries never see it,
    # and padded query rows (discarded) are never fully masked.
    seg = torch.full((padded,), n_seg, dtype=torch.long)
    seg[:L] = row.segment_ids
    pos = torch.zeros(padded, dtype=torch.long)
    pos[:L] = row.position_ids
    anc = torch.zeros(n_seg + 1, n_seg + 1, dtype=torch.bool)
    anc[:n_seg, :n_seg] = row.ancestors
    anc[n_seg, n_seg] = True
    seg, pos, anc = seg.to(device), pos.to(device), anc.to(device)

    def mask_mod(b: Any, h: Any, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        sq, sk = seg[q], seg[kv]
        ok = anc[sq, sk] & ((sq != sk) | (kv <= q))
        if window is not None:
            ok = ok & (pos[q] - pos[kv] < window)
        return ok

    # Classify tiles a few query blocks at a time: (blocks, 128, nb, 128) bools per chunk.
    tiles_any = torch.zeros(nb, nb, dtype=torch.bool, device=device)
    tiles_all = torch.zeros(nb, nb, dtype=torch.bool, device=device)
    dev_row = PackedRow(row.input_ids, pos, seg, anc, row.read_index)  # padded, on device
    step = max(1, _CHUNK_ELEMENTS // (FLEX_BLOCK * padded))
    for qb in range(0, nb, step):
        q0, q1 = qb * FLEX_BLOCK, min(nb, qb + step) * FLEX_BLOCK
        a = allowed_rows(dev_row, q0, q1, window=window)  # (q1 - q0, padded)
        a = a.view(-1, FLEX_BLOCK, nb, FLEX_BLOCK)  # (blocks, 128, nb, 128)
        tiles_any[qb : qb + a.shape[0]] = a.any(dim=3).any(dim=1)  # (blocks, nb)
        tiles_all[qb : qb + a.shape[0]] = a.all(dim=3).all(dim=1)
    partial = tiles_any & ~tiles_all  # (nb, nb) tiles that need mask_mod

    def lists(flags: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        count = flags.sum(-1).to(torch.int32)  # (nb,)
        order = torch.argsort((~flags).to(torch.int8), dim=-1, stable=True).to(torch.int32)  # (nb, nb) set tiles first
        return count[None, None], order[None, None]  # (1, 1, nb), (1, 1, nb, nb)

    kv_num, kv_idx = lists(partial)
    full_num, full_idx = lists(tiles_all)
    return BlockMask.from_kv_blocks(
        kv_num, kv_idx, full_num, full_idx, BLOCK_SIZE=FLEX_BLOCK, mask_mod=mask_mod, seq_lengths=(L, L)
    )
