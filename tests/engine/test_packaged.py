"""Packaged split models: the parts are reassembled only into a file with the pinned sha256."""

from __future__ import annotations

import hashlib

import pytest

from logitjudge.engine.model import load_model
from logitjudge.engine.packaged import PACKAGED_MODELS, reassemble_parts
from logitjudge.errors import UnsupportedModelError


def _parts(tmp_path, chunks):
    paths = []
    for i, data in enumerate(chunks):
        p = tmp_path / f"part{i:02d}.bin"
        p.write_bytes(data)
        paths.append(p)
    return paths


def test_parts_are_concatenated_in_order_and_verified(tmp_path):
    chunks = [b"GGUF" + bytes(range(256)) * 50, b"\x00middle" * 1000, b"tail"]
    digest = hashlib.sha256(b"".join(chunks)).hexdigest()
    target = tmp_path / "cache" / "model.gguf"
    assert reassemble_parts(_parts(tmp_path, chunks), digest, target) == target
    assert target.read_bytes() == b"".join(chunks)
    assert reassemble_parts([], digest, target) == target  # an existing verified file is reused


def test_a_wrong_hash_is_refused_and_leaves_nothing(tmp_path):
    parts = _parts(tmp_path, [b"GGUF", b"tampered"])
    target = tmp_path / "cache" / "model.gguf"
    with pytest.raises(UnsupportedModelError, match="sha256"):
        reassemble_parts(parts, "0" * 64, target)
    assert not target.exists() and list(target.parent.iterdir()) == []


def test_missing_parts_name_the_extra(monkeypatch, tmp_path):
    monkeypatch.setenv("LOGITJUDGE_CACHE_DIR", str(tmp_path))
    spec = PACKAGED_MODELS["qwen2.5-coder-1.5b"]
    assert len(spec.packages) == 22 and spec.version == "0.2.0"
    try:
        import importlib.metadata

        importlib.metadata.distribution(spec.packages[0])
    except importlib.metadata.PackageNotFoundError:
        with pytest.raises(UnsupportedModelError, match=r"logitjudge\[qwen15b\]"):
            load_model("qwen2.5-coder-1.5b")
    else:  # pragma: no cover - the extra is installed here
        pytest.skip("the qwen15b extra is installed")
