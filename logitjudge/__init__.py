"""logitjudge: an open, local judge engine.

Typed questions about a state (yes/no *noul*, *choice*, ordered *score*) answered from the
next-token logits of an open-weight causal LM, the state once and every question in one forward
pass. See ``README.md``; the Python API is :class:`Judge`.
"""

from importlib.metadata import PackageNotFoundError, version

from logitjudge.errors import (
    ConfigurationError,
    ContextOverflowError,
    EngineDeadError,
    EngineError,
    InvalidRequestError,
    LogitJudgeError,
    OverloadedError,
    RequestError,
    UnknownModelError,
    UnsupportedModelError,
)
from logitjudge.judge import Judge

try:
    # single-sourced from pyproject.toml's [project] version, through the installed metadata
    __version__ = version("logitjudge")
except PackageNotFoundError:  # a source tree on sys.path that was never installed
    __version__ = "0+unknown"

__all__ = [
    "Judge",
    "LogitJudgeError",
    "RequestError",
    "InvalidRequestError",
    "ContextOverflowError",
    "UnknownModelError",
    "UnsupportedModelError",
    "ConfigurationError",
    "EngineError",
    "OverloadedError",
    "EngineDeadError",
    "__version__",
]
