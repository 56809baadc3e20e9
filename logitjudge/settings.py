"""Every ``LOGITJUDGE_*`` environment variable is read here, and only when called (never at import).

| variable | meaning | default |
|---|---|---|
| ``LOGITJUDGE_CACHE_DIR`` | where converted models (safetensors) are cached | the platform's user cache dir |
| ``LOGITJUDGE_API_KEYS`` | comma-separated API keys; auth is on when set | unset (auth off) |
| ``LOGITJUDGE_API_KEYS_FILE`` | a file with one API key per line (``#`` comments) | unset |
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


# An answer whose ``x_option_mass`` (the probability the model put on the answer labels before
# renormalising over them) is below this is flagged: the prompt fits the model badly there, and
# the renormalised probabilities rest on almost nothing (seen: 0.0019 at an 8,192-token state).
LOW_OPTION_MASS = 0.05
