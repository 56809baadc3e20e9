"""logitjudge: an open, local judge engine.

Typed questions about a state (yes/no *noul*, *choice*, ordered *score*) answered from the
next-token logits of an open-weight causal LM, the state once and every question in one forward
pass. See ``README.md``; the Python API is :class:`Judge`.
"""

from logitjudge.errors import (
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

__version__ = "0.1.0"

__all__ = [
    "Judge",
    "LogitJudgeError",
    "RequestError",
    "InvalidRequestError",
    "ContextOverflowError",
    "UnknownModelError",
    "UnsupportedModelError",
    "EngineError",
    "OverloadedError",
    "EngineDeadError",
    "__version__",
]
