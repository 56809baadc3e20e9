"""Fixtures of the server tests: apps over the scripted engine (routing, errors, auth)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from server_helpers import BODY, rising
from support.scripted import ScriptedEngine

from logitjudge import Judge
from logitjudge.server.app import create_app


@pytest.fixture
def scripted_judge() -> Judge:
    return Judge(ScriptedEngine(rising, name="scripted-1"))


@pytest.fixture
def client(scripted_judge: Judge) -> Iterator[TestClient]:
    with TestClient(create_app(scripted_judge), raise_server_exceptions=False) as c:
        yield c


@pytest.fixture
def body() -> dict[str, Any]:
    import copy

    return copy.deepcopy(BODY)
