"""``logitjudge ask --backend vllm`` answers the demo's ticket like the transformers backend, and exits.

Its own vLLM engine (the CLI's process), so it also checks that the engine's processes are
stopped and the command returns.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "support_ticket.json"
LOGITJUDGE = Path(sys.executable).with_name("logitjudge")


def test_ask_on_vllm_equals_transformers(default_judge) -> None:
    out = subprocess.run(
        [str(LOGITJUDGE), "ask", str(EXAMPLE), "--backend", "vllm", "--kv-cache-gib", "1"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout)
    ref = default_judge.ask(json.loads(EXAMPLE.read_text()))
    assert got["usage"] == ref["usage"] and set(got["answers"]) == set(ref["answers"])
    for qid, a in ref["answers"].items():
        b = got["answers"][qid]
        values = [a["noul"]] if a["type"] == "noul" else list(a["probabilities"].values())
        others = [b["noul"]] if b["type"] == "noul" else list(b["probabilities"].values())
        assert max(abs(x - y) for x, y in zip(values, others)) <= 1e-4, qid


def test_a_bad_vllm_option_is_exit_2_naming_it() -> None:
    out = subprocess.run(
        [str(LOGITJUDGE), "ask", str(EXAMPLE), "--backend", "vllm", "--gpu-memory-utilization", "1.5"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 2, out.stderr[-3000:]
    detail = json.loads(out.stderr.strip().splitlines()[-1])["detail"]
    assert "gpu_memory_utilization" in detail["message"] and detail["field"] == ["vllm"]
