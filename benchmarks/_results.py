"""Where and on what a benchmark result was measured: one metadata block for every result file.

::

    sys.path.append(str(Path(__file__).resolve().parents[1]))  # benchmarks/, from a script in a subfolder
    from _results import RESULTS, run_metadata

    record = {"command": ..., "config": ..., "rows": ...}
    record["metadata"] = run_metadata(device="cpu")
    (RESULTS / "speed-limit-cpu.json").write_text(json.dumps(record, indent=2) + "\n")

:func:`run_metadata` returns the git commit the run started from (and whether the working tree
had uncommitted changes), the UTC date and time, the versions of logitjudge, Python, torch,
transformers and CUDA (torch's build), and the device with its name. It imports torch only when
torch is installed, so a script that does not use it (the fuzzer) can call it too.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata
import json
import platform
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
# The labelled dev sets and the source texts some benchmarks read (outside the repository).
DATA = ROOT.parent / "shared" / "data"

__all__ = ["ROOT", "RESULTS", "DATA", "answers_parser", "answers_path", "answers_record", "run_metadata"]


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _device_name(device: str | None) -> str:
    """A readable name of ``device`` ("cpu", "cuda", "cuda:1"): the GPU's model or the CPU's."""
    if device and device.startswith("cuda"):
        try:
            import torch

            return torch.cuda.get_device_name(torch.device(device))
        except Exception:  # a name is informative only; never fail a run for it
            return device
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def run_metadata(device: str | None = None) -> dict[str, Any]:
    """The metadata block of a result: commit, date, versions and device.

    Args:
        device: the device the run used ("cpu", "cuda", "cuda:0"); ``None`` records CUDA when
            torch sees a GPU and the CPU otherwise.

    Returns:
        ``{"git_sha", "git_dirty", "date", "logitjudge", "python", "torch", "transformers",
        "cuda", "device", "device_name", "platform"}``; a field that cannot be read is ``None``.
    """
    torch_version = _version("torch")
    cuda = None
    if torch_version is not None:
        import torch

        cuda = torch.version.cuda
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
    device = device or "cpu"
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {
        "git_sha": _git("rev-parse", "HEAD"),
        "git_dirty": None if status is None else bool(status),
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "logitjudge": _version("logitjudge"),
        "python": platform.python_version(),
        "torch": torch_version,
        "transformers": _version("transformers"),
        "cuda": cuda,
        "device": device,
        "device_name": _device_name(device),
        "platform": platform.platform(),
    }


def answers_parser(description: str) -> argparse.ArgumentParser:
    """The arguments of a benchmark that saves the model's answers and computes its figures from
    them: ``--model`` (name or path; default the default model), ``--batch`` and ``--rebuild``
    (the figures again from the saved answers, no model)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--model", default=None, help="model name or path (default: the default model)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--rebuild", action="store_true", help="recompute the figures from the saved answers (no model)")
    return ap


def _model_name(model: str | None) -> str:
    """The name a result file carries for ``model`` (a name or a path; None: the default model)."""
    from logitjudge.settings import MAIN_MODEL

    return Path(model or MAIN_MODEL).name.lower()


def answers_path(script: str, model: str | None) -> Path:
    """``benchmarks/results/<script's name, dashed>-<model>.json``, e.g.
    ``chunk-support-negation-qwen2.5-coder-1.5b.json`` for ``chunk_support_negation.py``."""
    return RESULTS / f"{Path(script).stem.replace('_', '-')}-{_model_name(model)}.json"


def answers_record(
    script: str, args: argparse.Namespace, answer: Callable[[], list[dict[str, Any]]]
) -> tuple[dict[str, Any], Path]:
    """The saved record of ``script`` (with ``--rebuild``), or a new one whose ``rows`` are
    ``answer()``'s (timed, with :func:`run_metadata`); and the path it goes to."""
    path = answers_path(script, args.model)
    if args.rebuild:
        return json.loads(path.read_text(encoding="utf-8")), path
    started = time.time()
    rows = answer()
    record = {
        "command": f"python {Path(script).resolve().relative_to(ROOT)}"
        + (f" --model {args.model}" if args.model else ""),
        "model": _model_name(args.model),
        "metadata": run_metadata(),
        "seconds": round(time.time() - started, 1),
        "rows": rows,
    }
    return record, path


def metadata_from_history(path: Path, record: dict[str, Any]) -> dict[str, Any]:
    """A metadata block for a result written before :func:`run_metadata` existed, from what git
    and the result itself hold: the commit that last changed the file and its date (the run came
    before it; its own start commit and date were not recorded, so ``git_sha`` is ``None``), the
    package version at that commit, and the versions the result's own ``environment`` names.
    ``source`` says so."""
    log = _git("log", "-1", "--format=%H %cI", "--", str(path.relative_to(ROOT))) or ""
    sha, _, date = log.partition(" ")
    version = None
    project = _git("show", f"{sha}:pyproject.toml") if sha else None
    for line in (project or "").splitlines():
        if line.startswith("version"):
            version = line.split("=", 1)[1].strip().strip('"')
            break
    env = record.get("environment") if isinstance(record.get("environment"), dict) else {}
    return {
        "git_sha": None,
        "git_dirty": None,
        "committed_in": sha or None,
        "date": date or None,
        "source": "git history: this result predates the run metadata; 'date' is the date of the commit "
        "that last changed it ('committed_in'), versions are those the result recorded itself",
        "logitjudge": version,
        "python": env.get("python"),
        "torch": env.get("torch"),
        "transformers": env.get("transformers"),
        "cuda": None,
        "device": env.get("device") or ("cpu" if "cpu" in path.name else None),
        "device_name": env.get("device_name") or env.get("cpu") or env.get("hardware"),
        "platform": env.get("platform"),
    }


if __name__ == "__main__":  # python benchmarks/_results.py --backfill
    import sys

    if sys.argv[1:] != ["--backfill"]:
        raise SystemExit("usage: python benchmarks/_results.py --backfill")
    for result in sorted(RESULTS.glob("*.json")):
        raw = result.read_text(encoding="utf-8")
        data = json.loads(raw)
        if isinstance(data, dict) and "metadata" not in data:
            data["metadata"] = metadata_from_history(result, data)
            lines = raw.splitlines()
            indent = len(lines[1]) - len(lines[1].lstrip()) if len(lines) > 1 else None  # keep the file's style
            text = json.dumps(data, indent=indent or None, ensure_ascii="\\u" in raw)
            result.write_text(text + "\n", encoding="utf-8")
            print("backfilled", result.name)


def write_result(out_dir: Path, stem: str, record: Mapping[str, Any], markdown: str) -> Path:
    """Write ``<out_dir>/<stem>.json`` (``record``) and ``<stem>.md`` (``markdown``); returns the
    ``.md`` path. ``stem`` is taken whole: model names hold dots, so no ``with_suffix``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{stem}.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    md = out_dir / f"{stem}.md"
    md.write_text(markdown, encoding="utf-8")
    return md
