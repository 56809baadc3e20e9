"""Run the public conformance suite ``jevcompat`` against a served URL (the server tests' helper)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = ["run_jevcompat", "JEVCOMPAT"]

JEVCOMPAT = Path(sys.executable).with_name("jevcompat")


def run_jevcompat(url: str, out: Path, *, key: str | None = None) -> dict[str, Any]:
    """Run the jevcompat suite against ``url``; assert it is conformant with every MUST (32) and
    SHOULD it tests, and return its summary (``key``: the Bearer key to test auth with)."""
    cmd = [str(JEVCOMPAT), "test", url, "--json", str(out), "--timeout", "300"]
    env = dict(os.environ)
    if key:
        env["LJ_TEST_KEY"] = key
        cmd += ["--key-env", "LJ_TEST_KEY"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    assert out.exists(), proc.stderr[-3000:]
    report = json.loads(out.read_text(encoding="utf-8"))
    summary = report["summary"]
    failing = [r for r in report["results"] if r.get("status") not in ("pass", "skip")]
    assert summary["verdict"] == "conformant" and summary["conformant"], (
        summary,
        failing,
        proc.stdout[-3000:],
    )
    assert summary["MUST"]["failed"] == 0 and summary["MUST"]["passed"] == summary["MUST"]["tested"] == 32
    assert summary["SHOULD"]["failed"] == 0 and summary["SHOULD"]["passed"] == summary["SHOULD"]["tested"]
    assert proc.returncode == 0
    return summary
