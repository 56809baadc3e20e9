"""Branch adapters: an activated LoRA applied to the tokens of its questions' branches only.

How an adapted branch is computed, in one place. Every targeted linear layer ``W`` of the
model gets, per token ``t`` of a forward, the update of the adapter that token belongs to::

    y_t = W x_t                                        a token of the state, or of a plain question
    y_t = W x_t + s_k * B_k (A_k x_t)                  a token of a branch answered by adapter k

with ``A_k`` (r, in), ``B_k`` (out, r) and ``s_k = lora_alpha / r`` (``/ sqrt(r)`` with
``use_rslora``): PEFT's LoRA update (Hu et al. 2021, arXiv:2106.09685), activated per token as in
activated LoRA (Greenewald et al. 2025, arXiv:2504.12397; PEFT's ``ALoraLinearVariant``, which
adapts the last ``alora_offsets[i]`` tokens of row ``i``). The runner hands each forward a
per-token adapter index, (B, L) long with -1 for "base weights", built from the packed tree
(:attr:`~logitjudge.engine.pack.PackedRow.adapter_ids`): a question's branch, its rotated views'
stem and its multi-token labels' continuations carry its adapter; the state never does. So the
state's keys and values are the base model's whatever the questions, the state cache serves
adapted and plain questions alike, and several adapters answer in one packed pass: each layer
adds each adapter's update on its own tokens only (an index-select, two thin matmuls and an
index-add per adapter per layer).

**Files** (one folder per adapter): PEFT's own layout, ``adapter_config.json`` (``peft_type``
``LORA`` with ``alora_invocation_tokens``) and ``adapter_model.safetensors`` (keys
``base_model.model.<module>.lora_A.weight`` / ``.lora_B.weight``), so a folder loads in
``peft.PeftModel.from_pretrained`` and a folder saved by PEFT serves here; beside them our
binding, ``logitjudge_adapter.json``::

    {"format": 1, "name": "faithfulness", "model": "...", "fingerprint": "<sha256>",
     "prompt_version": "lj-prompt-1.1", "evaluator": "faithfulness@5", "trained": {...}, "metrics": {...}}

A folder without the binding file (saved by PEFT alone) loads unbound: its module names and
shapes are still checked against the model. With it, the fingerprint and prompt version must
match the engine (:meth:`BranchAdapter.check`).

Refused, each with an :class:`~logitjudge.errors.AdapterError` naming the file and key: a plain
LoRA (no ``alora_invocation_tokens``: it would change the state's keys and values), DoRA, LoRA
biases, ``fan_in_fan_out``, ``modules_to_save``, rank or alpha patterns, and weights whose
module is missing from this model or has another shape.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from logitjudge.engine.types import Question
from logitjudge.errors import AdapterError, InvalidRequestError

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_BINDING = "logitjudge_adapter.json"
ADAPTER_FORMAT = 1
BOUND_KEYS = ("fingerprint", "prompt_version")
"""What a bound adapter must match on the engine; ``model`` is reported, not matched."""
SHIPPED = "shipped"
"""The ``adapters`` setting that installs the package's adapters bound to the engine, if any."""
NONE = "none"
_PREFIX = "base_model.model."
_REFUSED_TRUE = {
    "use_dora": "DoRA rescales the base weights' columns per token set; not supported on branches",
    "fan_in_fan_out": "fan_in_fan_out (Conv1D weights) is not supported",
}


@dataclass(frozen=True)
class BranchAdapter:
    """A loaded activated LoRA.

    Attributes:
        name: what questions call it by (``Question.adapter``; the wire's ``x_adapter``).
        weights: per module path of the model (``model.layers.3.self_attn.q_proj``), ``(A, B)``:
            A (r, in) and B (out, r), fp32.
        scaling: ``s`` of the module docstring.
        invocation_tokens: ``alora_invocation_tokens`` (what PEFT searches for to find where a
            branch begins; the engine knows its branches and does not search).
        binding: the binding file's content (empty when the folder has none).
        path: the folder it came from, if any.
    """

    name: str
    weights: Mapping[str, tuple[torch.Tensor, torch.Tensor]]
    scaling: float
    invocation_tokens: tuple[int, ...]
    binding: Mapping[str, Any] = field(default_factory=dict)
    path: Path | None = None

    @property
    def rank(self) -> int:
        """r, the update's rank."""
        return int(next(iter(self.weights.values()))[0].shape[0])

    def check(self, engine: Mapping[str, Any]) -> None:
        """Refuse an adapter bound to other weights or another prompt template.

        Args:
            engine: the engine's ``describe()`` (``fingerprint``, ``prompt_version``, ``model``).

        Raises:
            AdapterError: a bound key differs (the message names each, adapter value first).
        """
        bad = {k: (self.binding.get(k), engine.get(k)) for k in BOUND_KEYS if k in self.binding}
        bad = {k: v for k, v in bad.items() if v[0] != v[1]}
        if bad:
            said = ", ".join(f"{k}: adapter {a!r}, engine {b!r}" for k, (a, b) in bad.items())
            raise AdapterError(
                f"adapter {self.name!r} ({ADAPTER_BINDING}) was trained for other weights or another prompt ({said}); "
                "train one for this model with `logitjudge fit --adapter`",
                field=(ADAPTER_BINDING, next(iter(bad))),
            )


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise AdapterError(f"{path.parent}: no {path.name}", field=(path.name,)) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise AdapterError(f"{path}: not valid JSON ({exc})", field=(path.name,)) from None
    if not isinstance(data, dict):
        raise AdapterError(f"{path}: must be a JSON object", field=(path.name,))
    return data


def shipped_dir() -> Path:
    """Where the package's adapters live: ``logitjudge/adapters/<model>/<adapter>/``."""
    return Path(__file__).resolve().parent.parent / "adapters"


def shipped_folders(describe: Mapping[str, Any] | None, root: str | Path | None = None) -> list[Path]:
    """The package's adapter folders bound to this very engine (its ``describe()``: fingerprint and
    prompt version), in name order; adapters bound to other engines are skipped, not refused.

    Args:
        describe: the engine's ``describe()``; ``None``: every shipped folder, whatever its engine.
        root: the folder of ``<model>/<adapter>/`` folders (default :func:`shipped_dir`).

    Raises:
        AdapterError: a shipped binding cannot be read (a packaging error).
    """
    folder = Path(root) if root is not None else shipped_dir()
    if not folder.is_dir():
        return []
    return [
        binding.parent
        for binding in sorted(folder.glob(f"*/*/{ADAPTER_BINDING}"))
        if describe is None or all(_read_json(binding).get(k) == describe.get(k) for k in BOUND_KEYS)
    ]


def adapter_folders(spec: str | Sequence[str | Path] | None) -> tuple[list[str | Path], bool]:
    """What an ``adapters`` setting names: ``(folders, shipped)``; ``shipped`` is True when it names
    ``"shipped"`` (alone, or as an item of a list, comma-separated in a string: the package's
    adapters, resolved once the engine is loaded by :func:`shipped_folders`). ``"none"`` or ``None``
    names nothing."""
    if spec is None or spec == NONE:
        return [], False
    items = [p for p in spec.split(",") if p] if isinstance(spec, str) else list(spec)
    return [p for p in items if p != SHIPPED], SHIPPED in items


def check_folder(path: str | Path) -> None:
    """The checks of :func:`load_adapter` that need no model (the folder, its config): run before a
    model loads, so a wrong path fails in a second, not after the load.

    Raises:
        AdapterError: like :func:`load_adapter`.
    """
    folder = Path(path)
    if not folder.exists():
        raise AdapterError(f"{folder}: does not exist", field=("adapters",))
    read_config(folder)


def read_config(folder: Path) -> tuple[float, tuple[int, ...]]:
    """Check a PEFT ``adapter_config.json`` for an activated LoRA we can serve.

    Returns:
        ``(scaling, invocation_tokens)``.

    Raises:
        AdapterError: naming ``adapter_config.json`` and the offending key.
    """
    cfg = _read_json(folder / ADAPTER_CONFIG)

    def bad(key: str, why: str) -> AdapterError:
        return AdapterError(f"{folder / ADAPTER_CONFIG}: {key}: {why}", field=(ADAPTER_CONFIG, key))

    if cfg.get("peft_type") != "LORA":
        raise bad("peft_type", f"must be 'LORA', not {cfg.get('peft_type')!r}")
    tokens = cfg.get("alora_invocation_tokens")
    if not tokens:
        raise bad(
            "alora_invocation_tokens",
            "missing: a plain LoRA would run on the state's tokens too and change its keys and values; "
            "only an activated LoRA (PEFT's alora_invocation_tokens) is applied to question branches",
        )
    if not isinstance(tokens, list) or not all(isinstance(t, int) and t >= 0 for t in tokens):
        raise bad("alora_invocation_tokens", "must be a list of token ids")
    for key, why in _REFUSED_TRUE.items():
        if cfg.get(key):
            raise bad(key, why)
    if cfg.get("bias", "none") != "none" or cfg.get("lora_bias"):
        raise bad("bias", "LoRA biases are not supported")
    for key in ("modules_to_save", "rank_pattern", "alpha_pattern", "layer_replication", "trainable_token_indices"):
        if cfg.get(key):
            raise bad(key, "not supported on branch adapters (it would change weights outside the branch update)")
    r, alpha = cfg.get("r"), cfg.get("lora_alpha")
    if not isinstance(r, int) or r < 1:
        raise bad("r", f"must be a positive integer, not {r!r}")
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool):
        raise bad("lora_alpha", f"must be a number, not {alpha!r}")
    scaling = float(alpha) / (math.sqrt(r) if cfg.get("use_rslora") else r)
    return scaling, tuple(tokens)


def read_weights(folder: Path) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """An adapter folder's ``adapter_model.safetensors`` as ``{module path: (A (r, in), B (out, r))}``,
    in the file's dtype (PEFT's keys ``base_model.model.<module>.lora_A.weight`` / ``.lora_B.weight``).

    Raises:
        AdapterError: the file is missing or unreadable, holds a key that is not a LoRA A or B
            weight, holds none, or an A without its B (naming the key).
    """
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        tensors = load_file(str(folder / ADAPTER_WEIGHTS))
    except FileNotFoundError:
        raise AdapterError(f"{folder}: no {ADAPTER_WEIGHTS}", field=(ADAPTER_WEIGHTS,)) from None
    except (SafetensorError, OSError) as exc:
        raise AdapterError(f"{folder / ADAPTER_WEIGHTS}: unreadable ({exc})", field=(ADAPTER_WEIGHTS,)) from None
    pairs: dict[str, dict[str, torch.Tensor]] = {}
    for key, tensor in tensors.items():
        stem = key.removeprefix(_PREFIX)
        for part in ("lora_A", "lora_B"):
            if stem.endswith(f".{part}.weight"):
                pairs.setdefault(stem[: -len(f".{part}.weight")], {})[part] = tensor
                break
        else:
            raise AdapterError(
                f"{folder / ADAPTER_WEIGHTS}: {key}: not a LoRA A or B weight", field=(ADAPTER_WEIGHTS, key)
            )
    if not pairs:
        raise AdapterError(f"{folder / ADAPTER_WEIGHTS}: holds no LoRA weights", field=(ADAPTER_WEIGHTS,))
    for module_path, ab in pairs.items():
        if set(ab) != {"lora_A", "lora_B"}:
            key = _PREFIX + module_path
            raise AdapterError(f"{folder}: {key} lacks its A or B weight", field=(ADAPTER_WEIGHTS, key))
    return {path: (ab["lora_A"], ab["lora_B"]) for path, ab in pairs.items()}


def load_adapter(path: str | Path, model: Any, *, name: str | None = None) -> BranchAdapter:
    """Read an adapter folder and check its weights against ``model``'s modules.

    Args:
        path: the folder (``adapter_config.json``, ``adapter_model.safetensors``, optionally
            ``logitjudge_adapter.json``).
        model: the transformers model it will run on.
        name: what questions call it (default: the binding's ``name``, else the folder's name).

    Raises:
        AdapterError: a missing or malformed file, a refused config (see the module docstring),
            a weight for a module this model lacks or of another shape (naming the weight key).
    """
    folder = Path(path)
    if not folder.exists():
        raise AdapterError(f"{folder}: does not exist", field=("adapters",))
    if not folder.is_dir():
        raise AdapterError(f"{folder}: not an adapter folder (a folder holding {ADAPTER_CONFIG})", field=("adapters",))
    scaling, tokens = read_config(folder)
    binding = _read_json(folder / ADAPTER_BINDING) if (folder / ADAPTER_BINDING).exists() else {}
    if binding and binding.get("format") != ADAPTER_FORMAT:
        raise AdapterError(f"{folder / ADAPTER_BINDING}: unknown format", field=(ADAPTER_BINDING, "format"))
    pairs = read_weights(folder)
    weights: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    for module_path, ab in sorted(pairs.items()):
        key = _PREFIX + module_path
        try:
            module = model.get_submodule(module_path)
        except AttributeError:
            raise AdapterError(
                f"{folder}: {key}: this model has no module {module_path!r} (an adapter for other weights?)",
                field=(ADAPTER_WEIGHTS, key),
            ) from None
        a, b = ab[0].float(), ab[1].float()
        if not isinstance(module, torch.nn.Linear) or a.dim() != 2 or b.dim() != 2:
            raise AdapterError(f"{folder}: {key}: only linear layers are adapted", field=(ADAPTER_WEIGHTS, key))
        if a.shape[1] != module.in_features or b.shape[0] != module.out_features or a.shape[0] != b.shape[1]:
            raise AdapterError(
                f"{folder}: {key}: A {tuple(a.shape)} / B {tuple(b.shape)} do not fit {module_path} "
                f"({module.in_features} -> {module.out_features}); an adapter for other weights?",
                field=(ADAPTER_WEIGHTS, key),
            )
        weights[module_path] = (a, b)
    return BranchAdapter(
        name=name or str(binding.get("name") or folder.name),
        weights=weights,
        scaling=scaling,
        invocation_tokens=tokens,
        binding=binding,
        path=folder,
    )


def check_adapter(adapters: Mapping[str, BranchAdapter], q: Question, i: int) -> None:
    """A question that names an adapter: it is loaded and, where its binding says which
    question it was trained on, this is that type with those options."""
    where = ("questions", i, "adapter")
    adapter = adapters.get(q.adapter or "")
    if adapter is None:
        raise InvalidRequestError(
            f"questions[{i}].adapter: no adapter {q.adapter!r} loaded (loaded: {sorted(adapters) or 'none'})",
            field=where,
        )
    trained_type, trained_options = adapter.binding.get("question_type"), adapter.binding.get("options")
    names = sorted(str(o.name) for o in q.options)
    if trained_type is not None and (q.type != trained_type or (trained_options and names != sorted(trained_options))):
        raise InvalidRequestError(
            f"questions[{i}].adapter: adapter {q.adapter!r} was trained on a {trained_type} question with options "
            f"{list(trained_options or [])}, not a {q.type} with {names}",
            field=where,
        )


class AdapterSlots:
    """The adapters installed on one model, and the per-token index of the forward that runs.

    Slot ``k`` is the k-th adapter of :meth:`install`; :meth:`tokens` sets which slot each token
    of the next forwards belongs to. Forward hooks on the targeted linear layers add the update
    (module docstring) to those tokens' outputs; with no index set (the state's forward) or no
    adapter loaded the hooks add nothing. Training (:mod:`logitjudge.fit.adapters`) installs
    ``torch.nn.Parameter`` A and B and runs the same hooks with gradients on.
    """

    def __init__(self, model: Any) -> None:
        self.model = model
        self.names: tuple[str, ...] = ()
        self._index: torch.Tensor | None = None  # (B*L,) long, -1 = base
        self._handles: list[Any] = []
        self._per_module: dict[str, list[tuple[int, torch.Tensor, torch.Tensor, float]]] = {}

    def slot(self, name: str) -> int:
        """The slot of adapter ``name`` (KeyError when it is not installed)."""
        return self.names.index(name)

    def install(self, adapters: Sequence[BranchAdapter], *, device: torch.device, dtype: torch.dtype) -> None:
        """Replace the installed adapters by ``adapters`` (slots in this order; empty: none).

        Weights move to ``device`` in ``dtype`` (the questions' dtype); parameters are kept as
        they are, so a trainer's updates reach the forward."""
        for h in self._handles:
            h.remove()
        self._handles, self._per_module = [], {}
        self.names = tuple(a.name for a in adapters)
        for k, adapter in enumerate(adapters):
            for path, (a, b) in adapter.weights.items():
                if not isinstance(a, torch.nn.Parameter):
                    a, b = a.to(device=device, dtype=dtype), b.to(device=device, dtype=dtype)
                self._per_module.setdefault(path, []).append((k, a, b, adapter.scaling))
        for path in self._per_module:
            module = self.model.get_submodule(path)
            self._handles.append(module.register_forward_hook(self._hook_for(path)))

    def _hook_for(self, path: str) -> Any:
        def hook(_module: Any, args: tuple[Any, ...], out: torch.Tensor) -> torch.Tensor | None:
            index = self._index
            if index is None:
                return None
            x = args[0].reshape(-1, args[0].shape[-1])  # (B*L, in)
            if x.shape[0] != index.shape[0]:
                raise RuntimeError(f"adapter index covers {index.shape[0]} tokens, the forward {x.shape[0]}")
            flat = out.reshape(-1, out.shape[-1])  # (B*L, out)
            for k, a, b, scaling in self._per_module[path]:
                rows = (index == k).nonzero(as_tuple=True)[0]
                if rows.numel():
                    delta = (x.index_select(0, rows).to(a.dtype) @ a.T) @ b.T * scaling  # (n_k, out)
                    flat = flat.index_add(0, rows, delta.to(flat.dtype))
            return flat.view_as(out)

        return hook

    @contextmanager
    def tokens(self, index: torch.Tensor | None) -> Iterator[None]:
        """While open, forwards of ``index.shape`` tokens run slot ``index[b, t]`` on token
        ``(b, t)`` (-1: base weights). ``None``, or an index without any adapted token, runs the
        base weights everywhere at no cost."""
        saved = self._index
        if index is None or not self._per_module or not bool((index >= 0).any()):
            self._index = None
        else:
            self._index = index.reshape(-1).to(next(iter(self._per_module.values()))[0][1].device)
        try:
            yield
        finally:
            self._index = saved


def save_adapter(
    folder: str | Path,
    weights: Mapping[str, tuple[torch.Tensor, torch.Tensor]],
    *,
    rank: int,
    alpha: int,
    invocation_tokens: Sequence[int],
    base_model: str,
    binding: Mapping[str, Any],
) -> Path:
    """Write an adapter folder PEFT loads (``peft.LoraConfig`` writes the config) plus our binding.

    Args:
        folder: created if missing; its three files are replaced.
        weights: per module path, ``(A (r, in), B (out, r))``.
        rank, alpha: ``r`` and ``lora_alpha`` (scaling ``alpha / rank``).
        invocation_tokens: the token ids a branch begins with (PEFT finds the branch by them).
        base_model: ``base_model_name_or_path`` for PEFT (informational).
        binding: ``name``, ``fingerprint``, ``prompt_version``, ``evaluator``, ``trained``, ... .

    Returns:
        the folder.
    """
    from peft import LoraConfig
    from safetensors.torch import save_file

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    targets = sorted({p.rsplit(".", 1)[-1] for p in weights})
    layers = sorted({int(p.split(".layers.")[1].split(".")[0]) for p in weights if ".layers." in p})
    config = LoraConfig(
        r=rank,
        lora_alpha=alpha,
        target_modules=targets,
        layers_to_transform=layers or None,
        lora_dropout=0.0,
        bias="none",
        task_type="CAUSAL_LM",
        alora_invocation_tokens=list(invocation_tokens),
        base_model_name_or_path=base_model,
    )
    config.save_pretrained(str(out))
    tensors: dict[str, torch.Tensor] = {}
    for path, (a, b) in weights.items():
        tensors[f"{_PREFIX}{path}.lora_A.weight"] = a.detach().float().contiguous().cpu()
        tensors[f"{_PREFIX}{path}.lora_B.weight"] = b.detach().float().contiguous().cpu()
    save_file(tensors, str(out / ADAPTER_WEIGHTS))
    (out / ADAPTER_BINDING).write_text(
        json.dumps({"format": ADAPTER_FORMAT, **binding}, indent=2, sort_keys=True) + "\n", encoding="utf-8"
    )
    return out
