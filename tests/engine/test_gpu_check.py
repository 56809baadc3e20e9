"""benchmarks/checks/gpu_check.py keeps working: its CPU run (tiny config) passes parity and writes a
complete report. Timings are recorded, never asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_gpu_check_runs_on_cpu(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "checks" / "gpu_check.py"),
            "--device",
            "cpu",
            "--out",
            str(tmp_path),
            "--long-tokens",
            "512",
            "--long-questions",
            "4",
            "--repeats",
            "3",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert "MFU" in lines[-4] and lines[-1].startswith("parity: ok")  # the table comes last
    (report_file,) = tmp_path.glob("gpu-*.json")
    report = json.loads(report_file.read_text())
    assert report["parity_ok"] and {r["dtype"] for r in report["parity"]} == {"float32", "bfloat16"}
    assert [(r["size"], r["scenario"]) for r in report["runs"]] == [("tiny", "long"), ("tiny", "short")]
    for run in report["runs"]:
        for key in ("tokens_per_s", "latency_p50_ms", "latency_p95_ms", "peak_memory_gib", "mfu"):
            assert run[key] > 0
    assert (ROOT / "benchmarks" / "checks" / "gpu_check.sh").stat().st_mode & 0o111  # executable
