"""The state cache: KV caches of state prefixes kept across requests, an LRU bounded in bytes.

A request's prefix (system prompt + state, ``RequestPlan.prefix``) depends on the state only,
so its KV cache is the same for every request over that state: a RAG item judged by several
calls, an agent's follow-up questions, ``evaluate`` runs over the same documents. The runner's
prefix strategies (``prefix_packed``, ``prefix_rows``) look the prefix up here before running it
and store what they computed; a hit skips the prefix forward entirely.

Keys are ``(namespace, prefix token ids)``: the namespace is the engine's (model fingerprint,
dtype, prompt version), so a cache never serves KV of another model, precision or template;
the token ids are compared exactly (the key holds them, not a hash of them). Entries are
evicted least recently used first once their bytes exceed ``max_bytes``; an entry larger than
``max_bytes`` is not stored. ``max_bytes = 0`` disables the cache.

Exactness: a stored cache is never modified. Users get :func:`fork_cache`, a copy that a
forward may extend: transformers' ``DynamicLayer.update`` concatenates into new tensors, so a
fork of a plain ``DynamicCache`` shares the stored tensors without copying them; any other
cache (sliding-window layers, recurrent / SSM states, which update in place) is deep-copied.
An entry stored by a prefix strategy holds the keys and values of a forward over the prefix
alone, so a hit gives them bit for bit. An entry stored by a one-question request, which runs
state and branch in one forward (``Runner.choose``), holds the first positions of that longer
forward: the same numbers up to float32 rounding (the kernels sum in another order for another
length), which moves answers by a few 1e-6 (2.8e-6 seen on the 135M), inside the engine's
1e-4 tolerance (``tests/engine/test_state_cache.py`` checks answers against uncached ones).

Memory: the cache holds at most ``max_bytes`` of KV (per token, ``2 x layers x kv_heads x
head_dim x dtype bytes``: 45 KiB for SmolLM2-135M in fp32, 56 KiB for Qwen2.5-1.5B in fp32),
on the model's device, on top of the model and the running forward. Under load the bound holds
at every moment: a forward over a fork allocates only its own new keys and values.
"""

from __future__ import annotations

import copy
import threading
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["StateCache", "StateCacheStats", "cache_nbytes", "can_repeat", "fork_cache", "output_cache", "repeat_cache"]


@dataclass(frozen=True)
class StateCacheStats:
    """Counters of a :class:`StateCache` since it was made (plain ints: no torch on the wire).

    Attributes:
        hits / misses: lookups that found / did not find the prefix.
        stores: entries stored; evictions: entries dropped to stay under ``max_bytes``.
        too_large: caches not stored because one alone exceeds ``max_bytes``.
        entries / bytes: what the cache holds now; max_bytes: its bound (0 = disabled).
        hit_tokens: prefix tokens that hits did not have to run.
    """

    hits: int
    misses: int
    stores: int
    evictions: int
    too_large: int
    entries: int
    bytes: int
    max_bytes: int
    hit_tokens: int


def cache_nbytes(cache: Any) -> int:
    """Bytes of the tensors a transformers cache holds (keys, values, recurrent states)."""
    seen: set[int] = set()
    total = 0

    def walk(obj: Any, depth: int = 0) -> None:
        nonlocal total
        if isinstance(obj, torch.Tensor):
            if id(obj) not in seen:
                seen.add(id(obj))
                total += obj.numel() * obj.element_size()
        elif isinstance(obj, (list, tuple)):
            for x in obj:
                walk(x, depth)
        elif isinstance(obj, dict):
            for x in obj.values():
                walk(x, depth)
        elif depth < 2 and hasattr(obj, "__dict__"):
            for x in vars(obj).values():
                walk(x, depth + 1)

    walk(cache)
    return total


def fork_cache(cache: Any) -> Any:
    """A copy of ``cache`` that a forward may extend without touching ``cache``.

    A ``DynamicCache`` whose layers are all plain ``DynamicLayer`` s (each ``update`` makes new
    tensors by concatenation) is copied shallowly: the fork shares the tensors, at no cost.
    Anything else (layers that update in place) is deep-copied.
    """
    layers = getattr(cache, "layers", None)
    if layers is not None and _all_concatenating(layers):
        fork = copy.copy(cache)
        fork.layers = [copy.copy(layer) for layer in layers]
        return fork
    return copy.deepcopy(cache)


def _all_concatenating(layers: Sequence[Any]) -> bool:
    try:
        from transformers.cache_utils import DynamicLayer
    except ImportError:  # pragma: no cover - transformers < 4.56 has no layer classes
        return False
    return all(type(layer) is DynamicLayer for layer in layers)


class StateCache:
    """LRU of state-prefix KV caches, bounded in bytes; safe to share between threads.

    Args:
        max_bytes: the most bytes of KV held; 0 disables the cache (every lookup misses,
            nothing is stored).
        namespace: what else the key holds: the engine's (model fingerprint, dtype, prompt
            version).
    """

    def __init__(self, max_bytes: int, namespace: tuple[str, ...] = ()) -> None:
        if max_bytes < 0:
            raise ValueError(f"state cache max_bytes must be >= 0, got {max_bytes}")
        self.max_bytes = max_bytes
        self.namespace = namespace
        self._entries: OrderedDict[tuple[Any, ...], tuple[Any, int, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self._n = dict.fromkeys(("hits", "misses", "stores", "evictions", "too_large", "hit_tokens"), 0)

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0

    def _key(self, prefix: Sequence[int]) -> tuple[Any, ...]:
        return (*self.namespace, array("q", prefix).tobytes())

    def get(self, prefix: Sequence[int]) -> Any | None:
        """The stored cache of ``prefix`` (most recently used from now on), or ``None``.

        The result must not be modified: extend a :func:`fork_cache` of it.
        """
        if not self.enabled:
            return None
        key = self._key(prefix)
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self._n["misses"] += 1
                return None
            self._entries.move_to_end(key)
            self._n["hits"] += 1
            self._n["hit_tokens"] += entry[2]
            return entry[0]

    def contains(self, prefix: Sequence[int]) -> bool:
        """Whether ``prefix`` is held (no hit or miss is counted, the LRU order is unchanged)."""
        if not self.enabled:
            return False
        with self._lock:
            return self._key(prefix) in self._entries

    def put(self, prefix: Sequence[int], cache: Any) -> bool:
        """Store ``cache`` (which must not be modified afterwards) for ``prefix``; evict the least
        recently used entries to stay within ``max_bytes``. Returns whether it was stored."""
        if not self.enabled:
            return False
        size = cache_nbytes(cache)
        key = self._key(prefix)
        with self._lock:
            if size > self.max_bytes:
                self._n["too_large"] += 1
                return False
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            while self._entries and self._bytes + size > self.max_bytes:
                _, (_, dropped, _) = self._entries.popitem(last=False)
                self._bytes -= dropped
                self._n["evictions"] += 1
            self._entries[key] = (cache, size, len(prefix))
            self._bytes += size
            self._n["stores"] += 1
            return True

    def clear(self) -> None:
        """Drop every entry (the counters stay)."""
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    def stats(self) -> StateCacheStats:
        """The counters and the current size."""
        with self._lock:
            return StateCacheStats(**self._n, entries=len(self._entries), bytes=self._bytes, max_bytes=self.max_bytes)


def output_cache(out: Any) -> Any | None:
    """The KV cache (or recurrent state) a forward with ``use_cache=True`` returned, under any of
    the names transformers models use, or None."""
    return next(
        (getattr(out, n) for n in ("cache", "cache_params", "past_key_values") if getattr(out, n, None) is not None),
        None,
    )


def can_repeat(cache: Any) -> bool:
    """True when every layer of the cache can be repeated along the batch dimension."""
    layers = getattr(cache, "layers", None)
    if layers is None:
        return hasattr(cache, "batch_repeat_interleave")
    return all(hasattr(layer, "batch_repeat_interleave") for layer in layers)


def repeat_cache(cache: Any, n: int) -> Any:
    """A copy of a batch-1 KV cache repeated to batch ``n`` (the prefix is shared, never mutated)."""
    c = copy.deepcopy(cache)
    if n > 1:
        c.batch_repeat_interleave(n)
    return c
