"""Third-party harnesses against the served 135M: ``jevbench check``, a few ``krite-bench quality``
cases on both wires, and two ``sys1bench run`` items, with the commands and workspaces of
``benchmarks/harnesses/run_harnesses.py`` (whose functions build them).

The harnesses live in ``.venv-harness`` (``make harness-env``; ``make test`` creates it and sets
``LOGITJUDGE_TEST_HARNESSES=1``, under which a missing environment fails instead of skipping).
About 30 s on 2 CPU cores after the model has loaded; nothing is fetched but from the local server.

Regression: krite-bench 0.1.0 validates responses against a closed schema and rejected every
choice and score answer for its ``x_option_mass``; on the strict wire it accepts all of them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from support.background import serve_in_thread

from logitjudge.server.app import create_app

ROOT = Path(__file__).resolve().parents[2]
HARNESS_BIN = ROOT / ".venv-harness" / "bin"
TOOLS = ("jevbench", "sys1bench", "krite-bench")
REQUIRED = os.environ.get("LOGITJUDGE_TEST_HARNESSES") == "1"
MISSING = [t for t in TOOLS if not (HARNESS_BIN / t).exists()]

if MISSING and REQUIRED:
    raise RuntimeError(f"LOGITJUDGE_TEST_HARNESSES=1 but .venv-harness lacks {MISSING} (make harness-env)")
pytestmark = pytest.mark.skipif(bool(MISSING), reason=f".venv-harness lacks {MISSING} (make harness-env)")


def _runner() -> ModuleType:
    path = ROOT / "benchmarks" / "harnesses" / "run_harnesses.py"
    spec = importlib.util.spec_from_file_location("lj_run_harnesses", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def runner() -> ModuleType:
    return _runner()


@pytest.fixture(scope="module")
def served(default_judge) -> Iterator[dict[str, str]]:
    """The 135M on both wires: ``{"default": url, "strict": url}``."""
    with (
        serve_in_thread(create_app(default_judge)) as default,
        serve_in_thread(create_app(default_judge, strict_wire=True)) as strict,
    ):
        yield {"default": default, "strict": strict}


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        cmd, cwd=cwd, capture_output=True, text=True, timeout=600, env={**os.environ, **(env or {}), "NO_COLOR": "1"}
    )
    assert proc.returncode == 0, (cmd, proc.stdout[-3000:], proc.stderr[-3000:])
    return proc


def test_jevbench_check_reads_every_answer(served: dict[str, str], tmp_path: Path) -> None:
    for url in served.values():
        proc = _run(
            [str(HARNESS_BIN / "jevbench"), "check", "--url", f"{url}/v1/systemone", "--model", "jev-latest"], tmp_path
        )
        assert "jevbench check: OK" in proc.stdout, proc.stdout


def test_krite_bench_accepts_every_answer_on_the_strict_wire(
    served: dict[str, str], runner: ModuleType, tmp_path: Path
) -> None:
    suites, _ = runner.krite_suites(runner.canary_rows(), per_type=2, control=0)  # one case per canary question
    engines = {
        wire: runner.krite_engine(int(url.rsplit(":", 1)[1]), "smollm2-135m-instruct", f"(test server, {wire} wire)")
        for wire, url in served.items()
    }
    runner.write_krite_workspace(tmp_path, engines, suites)
    by_wire: dict[str, dict[str, Any]] = {}
    for wire in served:
        cmd = [str(HARNESS_BIN / "krite-bench"), "quality", "--engine", wire, "--suites", ",".join(suites)]
        _run(cmd, tmp_path, {"KRITE_ROOT": str(tmp_path)})
        run = {"errors": runner.krite_errors(tmp_path, wire, list(suites))}
        by_wire[wire] = runner.krite_by_type(run, suites)
    assert set(by_wire["strict"]) == {"noul", "choice", "score"}
    for qtype, counts in by_wire["strict"].items():
        assert counts["calls"] == 2 and counts["schema_errors"] == 0 and counts["other_errors"] == 0, (qtype, counts)
    # the default wire, for contrast: its x_option_mass fails krite-bench's closed schema (noul answers
    # pass only because krite-bench rebuilds them from `noul` alone)
    default = by_wire["default"]
    assert default["choice"]["schema_errors"] == default["score"]["schema_errors"] == 2, default
    assert default["noul"]["schema_errors"] == 0, default


def test_sys1bench_runs_the_canary(served: dict[str, str], runner: ModuleType, tmp_path: Path) -> None:
    (tmp_path / "logitjudge.yaml").write_text(runner.sys1bench_config(served["default"]))
    s1 = str(HARNESS_BIN / "sys1bench")
    canary = str(runner.canary_path())
    _run(
        [s1, "run", canary, "preds.jsonl", "--config", "logitjudge.yaml", "--limit", "2", "--cache", "c.sqlite"],
        tmp_path,
    )
    rows = [json.loads(line) for line in (tmp_path / "preds.jsonl").read_text().splitlines() if line.strip()]
    assert len(rows) == 6 and not [r["error"] for r in rows if r.get("error")]  # 2 items x 3 questions
    score = _run([s1, "score", "preds.jsonl", "--out", "summary.json"], tmp_path)
    assert "smollm2-135m-instruct / queue" in score.stdout
