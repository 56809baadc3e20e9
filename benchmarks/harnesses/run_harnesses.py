"""Do third-party System One harnesses accept ``logitjudge serve``, and what do they measure on a model?

Three harnesses from PyPI, each with the commands its own documentation gives, against
``logitjudge serve`` on a free loopback port:

- **jevbench 0.1.0** (coherence under meaning-preserving edits, no gold labels): ``jevbench check``
  (one request, every answer read), ``jevbench eval --suite examples`` (the hand-written demo case)
  and ``jevbench eval --suite jevbench-mini`` on a selection (``--jevbench-select``);
- **sys1bench 0.3.2** (accuracy and calibration on policy-labelled items): ``sys1bench run`` on its
  packaged drift canary (``--sys1bench-limit`` items) with its ``jev_typesafe`` adapter pointed at
  the server, then ``sys1bench score``;
- **krite-bench 0.1.0** (quality, calibration and option-order invariance; it validates every
  response against a closed schema, ``additionalProperties: false``): ``krite-bench quality`` and
  ``krite-bench invariance`` against a server started with ``--strict-wire``, and ``quality`` on a
  few cases against the default wire as a control (there every choice and score answer fails the
  schema for its ``x_option_mass``).

krite-bench builds its own suites from Hugging Face datasets (``krite-bench data``), which this
script does not reach. It writes krite-bench suites instead (krite-bench's case format: one question
``q`` per request and its gold answer) from the drift canary that the sys1bench package ships, one
suite per canary question (krite-bench scores a suite whose questions all have the same number of
options): noul ``canary-is_angry`` and ``canary-is_phishing``, choice ``canary-queue`` (6 options)
and ``canary-attack_class`` (5), score ``canary-priority`` (5 levels) and ``canary-urgency`` (4);
``--krite-cases`` per question type, half from each of its questions. The control suites
``control-<question>`` hold the first ``--krite-control-cases`` per type; the invariance run takes
``--krite-invariance-n`` of the ``queue`` cases (24 seeded option orders plus the reverse each).

The harnesses live in ``.venv-harness`` (created here when missing, or by ``make harness-env``; the
pins are in ``requirements/harness.txt``); this script runs in the project's ``.venv``. Raw outputs
(reports, prediction files, server logs) go to ``out/harnesses/<model>/``; the summary, every command
line and what each printed go to ``benchmarks/results/harnesses-<model>.json`` and ``.md``.

Command (the committed result: the embedded SmolLM2-135M, 28 minutes on 2 shared CPU cores)::

    .venv/bin/python benchmarks/harnesses/run_harnesses.py --model smollm2-135m

Options: ``--only jevbench,sys1bench,krite``, ``--jevbench-select "--dimensions BAT"``,
``--sys1bench-limit 100``, ``--krite-cases 40`` (per question type), ``--krite-control-cases 10``,
``--krite-invariance-n 4``, ``--concurrency 4`` (requests in flight for jevbench and sys1bench;
krite-bench sends one at a time).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx

sys.path.append(str(Path(__file__).resolve().parents[1]))  # benchmarks/, for _results
from _results import RESULTS, ROOT, run_metadata  # noqa: E402

HARNESS_VENV = ROOT / ".venv-harness"
REQUIREMENTS = ROOT / "requirements" / "harness.txt"
STAMP = HARNESS_VENV / ".installed"
PROJECT_BIN = Path(sys.executable).parent  # .venv/bin: logitjudge
AVOID_PORTS = {8123}  # a port others on a shared machine use
HARNESSES = ("jevbench", "sys1bench", "krite")
MODEL_ALIAS = "jev-latest"

__all__ = ["ensure_harness_venv", "harness_bin", "canary_rows", "krite_suites", "write_krite_workspace", "main"]


# -- environment --------------------------------------------------------------------------------


def harness_bin(name: str) -> Path:
    """A console script of ``.venv-harness`` (``jevbench``, ``sys1bench``, ``krite-bench``, ``python``)."""
    return HARNESS_VENV / "bin" / name


def ensure_harness_venv() -> None:
    """Create ``.venv-harness`` with ``requirements/harness.txt`` unless its stamp is newer than the
    requirements (the same steps as ``make harness-env``).

    Raises:
        subprocess.CalledProcessError: venv creation or pip failed (e.g. PyPI unreachable).
    """
    if STAMP.exists() and STAMP.stat().st_mtime >= REQUIREMENTS.stat().st_mtime:
        return
    base = getattr(sys, "_base_executable", sys.executable)  # a venv is made from the base interpreter
    subprocess.run([base, "-m", "venv", str(HARNESS_VENV)], check=True)
    pip = [str(harness_bin("python")), "-m", "pip", "install", "--quiet"]
    subprocess.run([*pip, "--upgrade", "pip"], check=True)
    subprocess.run([*pip, "-r", str(REQUIREMENTS)], check=True)
    STAMP.touch()


def installed_versions() -> dict[str, str]:
    """The harnesses' versions as installed in ``.venv-harness``."""
    code = (
        "import importlib.metadata as m, json; "
        "print(json.dumps({d: m.version(d) for d in ('jevbench', 'sys1bench', 'krite-bench')}))"
    )
    out = subprocess.run([str(harness_bin("python")), "-c", code], capture_output=True, text=True, check=True)
    return dict(json.loads(out.stdout))


def free_port() -> int:
    """A free loopback port (never one of :data:`AVOID_PORTS`)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in AVOID_PORTS:
            return port


# -- the server ---------------------------------------------------------------------------------


@contextlib.contextmanager
def serve(
    model: str | None,
    port: int,
    log: Path,
    *,
    strict: bool,
    timeout: float = 600.0,
    extra: Sequence[str] = (),
) -> Iterator[dict[str, Any]]:
    """Run ``logitjudge serve`` on ``port`` (with ``extra`` flags) until the block ends; yields what
    describes it (command, ``/healthz``, ``/v1/models``, start-up seconds).

    Raises:
        RuntimeError: the server exited or did not answer ``/healthz`` within ``timeout`` seconds.
    """
    cmd = [str(PROJECT_BIN / "logitjudge"), "serve", "--port", str(port), "--log-level", "warning"]
    if model:
        cmd += ["--model", model]
    if strict:
        cmd.append("--strict-wire")
    cmd += list(extra)
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
        try:
            url = f"http://127.0.0.1:{port}"
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"logitjudge serve exited with {proc.returncode}; see {log}")
                if time.monotonic() - started > timeout:
                    raise RuntimeError(f"logitjudge serve did not come up in {timeout:.0f} s; see {log}")
                with contextlib.suppress(httpx.HTTPError):
                    health = httpx.get(f"{url}/healthz", timeout=5)
                    if health.status_code == 200:
                        break
                time.sleep(1)
            yield {
                "command": display(cmd),
                "url": url,
                "startup_s": round(time.monotonic() - started, 1),
                "healthz": health.json(),
                "models": httpx.get(f"{url}/v1/models", timeout=30).json()["models"],
            }
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)  # drains, then exits 0
                try:
                    proc.wait(timeout=120)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


# -- running a harness command --------------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def display(cmd: Sequence[str], env: dict[str, str] | None = None) -> str:
    """The command as a user types it: programs by name, paths relative to the repository root."""

    def short(arg: str) -> str:
        for prefix, name in ((str(HARNESS_VENV / "bin") + "/", ""), (str(PROJECT_BIN) + "/", "")):
            if arg.startswith(prefix):
                return name + arg[len(prefix) :]
        return arg.replace(str(ROOT) + "/", "")

    words = [f"{k}={short(v)}" for k, v in (env or {}).items()] + [short(a) for a in cmd]
    return shlex.join(words)


def clean(text: str, limit: int = 12_000) -> str:
    """Printed text without ANSI colours and progress redraws, its last ``limit`` characters."""
    text = text.replace(str(ROOT) + "/", "")  # paths as the commands name them: from the repository root
    lines = [_ANSI.sub("", line.rsplit("\r", 1)[-1]).rstrip() for line in text.splitlines()]
    out = "\n".join(line for line in lines if line.strip())
    return out if len(out) <= limit else "...\n" + out[-limit:]


def run_step(name: str, cmd: Sequence[str], work: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run one harness command; returns its record (command, exit code, seconds, what it printed).
    Its full output is also written to ``work/<name>.log``."""
    print(f"[{name}] {display(cmd, env)}", flush=True)
    started = time.monotonic()
    proc = subprocess.run(
        list(cmd), capture_output=True, text=True, cwd=work, env={**os.environ, **(env or {}), "NO_COLOR": "1"}
    )
    wall = time.monotonic() - started
    (work / f"{name}.log").write_text(proc.stdout + "\n--- stderr ---\n" + proc.stderr, encoding="utf-8")
    printed = clean(proc.stdout + ("\n" + proc.stderr if proc.stderr.strip() else ""))
    print(f"[{name}] exit {proc.returncode} in {wall:.0f} s", flush=True)
    return {
        "name": name,
        "command": display(cmd, env),
        "exit_code": proc.returncode,
        "wall_s": round(wall, 1),
        "printed": printed,
    }


# -- jevbench -----------------------------------------------------------------------------------


def jevbench_summary(report_path: Path) -> dict[str, Any]:
    """The figures of a ``jevbench eval --out`` report: overall, per dimension, group and relation."""
    if not report_path.exists():
        return {"error": f"no report at {report_path.name}"}
    report = json.loads(report_path.read_text())
    scores, result = report["scores"], report["result"]
    return {
        "suite": result.get("suite"),
        "selection": result.get("selection"),
        "min_n": scores.get("min_n"),
        "tolerance": scores.get("tolerance"),
        "cases": scores.get("n_cases"),
        "requests": result.get("requests"),
        "errors": len(result.get("errors") or []),
        "overall": scores.get("overall"),
        "dimensions": scores.get("pillars"),
        "groups": scores.get("groups"),
        "relations": scores.get("relations"),
        "ci": scores.get("ci"),
        "excluded": scores.get("excluded"),
        "wall_seconds": result.get("wall_seconds"),
    }


def run_jevbench(url: str, work: Path, select: str, concurrency: int) -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=True)
    jb, endpoint = str(harness_bin("jevbench")), f"{url}/v1/systemone"
    target = ["--url", endpoint, "--model", MODEL_ALIAS]
    steps = [run_step("jevbench-check", [jb, "check", *target], work)]
    examples = work / "jevbench-examples.json"
    steps.append(
        run_step(
            "jevbench-examples",
            [jb, "eval", *target, "--suite", "examples", "--no-cache", "--out", str(examples)],
            work,
        )
    )
    mini = work / "jevbench-mini.json"
    if select.strip() == "none":  # check and examples only (a large model on a small machine)
        return {
            "steps": steps,
            "check_ok": steps[0]["exit_code"] == 0 and "OK" in steps[0]["printed"],
            "examples": jevbench_summary(examples),
            "mini": {"error": "not run (--jevbench-select none)"},
        }
    steps.append(
        run_step(
            "jevbench-mini",
            [jb, "eval", *target, "--suite", "jevbench-mini", *shlex.split(select)]
            + ["--concurrency", str(concurrency), "--no-cache", "--out", str(mini)],
            work,
        )
    )
    return {
        "steps": steps,
        "check_ok": steps[0]["exit_code"] == 0 and "OK" in steps[0]["printed"],
        "examples": jevbench_summary(examples),
        "mini": jevbench_summary(mini),
    }


# -- sys1bench ----------------------------------------------------------------------------------


def sys1bench_config(url: str) -> str:
    """The sys1bench model config of a local TypeSafe-API server (as its packaged ``kev_4b``)."""
    return "\n".join(
        [
            "adapter: jev_typesafe",
            f"model_id: {MODEL_ALIAS}",
            f"url: {url}/v1/systemone",
            "api_key: local",
            "allow_alias: true",
            "probe_models: true",
            "deployment: local",
            "timeout_s: 300",
            "max_retries: 3",
            "",
        ]
    )


def canary_path() -> Path:
    """The drift canary that the sys1bench package ships (200 items)."""
    code = "from sys1bench.data import canary_path; print(canary_path())"
    out = subprocess.run([str(harness_bin("python")), "-c", code], capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def canary_rows() -> list[dict[str, Any]]:
    return [json.loads(line) for line in canary_path().read_text(encoding="utf-8").splitlines() if line.strip()]


def run_sys1bench(url: str, work: Path, limit: int, concurrency: int) -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=True)
    (work / "logitjudge.yaml").write_text(sys1bench_config(url), encoding="utf-8")
    s1 = str(harness_bin("sys1bench"))
    for stale in ("preds.jsonl", "cache.sqlite"):  # every run asks the server afresh
        (work / stale).unlink(missing_ok=True)
    steps = [
        run_step(
            "sys1bench-run",
            [s1, "run", str(canary_path()), "preds.jsonl", "--config", "logitjudge.yaml"]
            + ["--limit", str(limit), "--concurrency", str(concurrency), "--cache", "cache.sqlite"],
            work,
        ),
        run_step(
            "sys1bench-score", [s1, "score", "preds.jsonl", "--out", "summary.json", "--table", "summary.md"], work
        ),
    ]
    rows = (
        [json.loads(line) for line in (work / "preds.jsonl").read_text().splitlines() if line.strip()]
        if (work / "preds.jsonl").exists()
        else []
    )
    errors = Counter(str(r.get("error")) for r in rows if r.get("error"))
    cards = json.loads((work / "summary.json").read_text()) if (work / "summary.json").exists() else {}
    drop = ("framing_variants", "quantisation_steps", "cost")
    return {
        "steps": steps,
        "items": limit,
        "prediction_rows": len(rows),
        "rows_with_errors": sum(errors.values()),
        "errors": dict(errors.most_common(5)),
        "scorecards": {name: {k: v for k, v in card.items() if k not in drop} for name, card in cards.items()},
        "table": (work / "summary.md").read_text() if (work / "summary.md").exists() else None,
    }


# -- krite-bench ----------------------------------------------------------------------------------

KRITE_QUESTIONS = {  # question type -> its canary questions (one per domain), each a suite
    "noul": ("is_angry", "is_phishing"),
    "choice": ("queue", "attack_class"),
    "score": ("priority", "urgency"),
}


def _krite_bucket(qtype: str, k: int) -> str:
    """krite-bench's calibration bucket (``krite_bench.data.bucket``)."""
    if qtype == "noul":
        return "noul"
    if qtype == "choice":
        return f"choice/{k}" if k <= 4 else ("choice/5-8" if k <= 8 else "choice/9+")
    return f"score/{k}" if k <= 5 else "score/6+"


def _krite_case(suite: str, row: dict[str, Any], key: str) -> dict[str, Any]:
    """One canary question as a krite-bench case (its ``benchmarks/data/<suite>.jsonl`` rows)."""
    q = row["questions"][key]
    question: dict[str, Any] = {"type": q["type"], "instructions": q["instructions"]}
    gold: Any = q["ground_truth"]
    if q["type"] == "choice":
        question["criteria"] = {c["key"]: c.get("description") for c in q["criteria"]}
    elif q["type"] == "score":
        levels = sorted(q["criteria"], key=lambda c: c["level"])
        question["criteria"] = [c["description"] for c in levels]
        gold = int(gold)
    else:
        gold = bool(gold)
    k = 2 if q["type"] == "noul" else len(q["criteria"])
    return {
        "case_id": f"{suite}/{row['task_id']}/{key}",
        "suite": suite,
        "dataset": "sys1bench-canary",
        "lang": row.get("language", "en"),
        "type": q["type"],
        "bucket": _krite_bucket(q["type"], k),
        "request": {"state": row["state"], "questions": {"q": question}},
        "gold": {"q": gold},
    }


def krite_suites(
    rows: Sequence[dict[str, Any]], per_type: int, control: int
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, list[dict[str, Any]]]]:
    """krite-bench suites from the canary, one per canary question (krite-bench scores a suite
    whose questions all have the same number of options): per question type ``per_type`` cases,
    half from each of its two questions, in canary order (``canary-<question>``); and the control
    suites, the first ``control`` of those (``control-<question>``).

    Returns:
        (the suites, the control suites), each ``{suite id: cases}``.
    """
    suites: dict[str, list[dict[str, Any]]] = {}
    controls: dict[str, list[dict[str, Any]]] = {}
    for keys in KRITE_QUESTIONS.values():
        for i, key in enumerate(keys):
            n, c = (per_type + 1 - i) // 2, (control + 1 - i) // 2  # the first question gets the odd one
            sid, ctl = f"canary-{key}", f"control-{key}"
            suites[sid] = [_krite_case(sid, r, key) for r in rows if key in r["questions"]][:n]
            controls[ctl] = [_krite_case(ctl, r, key) for r in rows if key in r["questions"]][:c]
    return suites, controls


def write_krite_workspace(
    root: Path, engines: dict[str, dict[str, Any]], suites: dict[str, list[dict[str, Any]]]
) -> None:
    """A krite-bench workspace (``$KRITE_ROOT``): ``benchmarks/baselines/engines.toml`` naming each
    engine, and ``benchmarks/data/<suite>.jsonl``. Earlier results there are removed."""
    lines = []
    for name, cfg in engines.items():
        lines.append(f"[{name}]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in cfg.items()]
        lines.append("")
    (root / "benchmarks" / "baselines").mkdir(parents=True, exist_ok=True)
    (root / "benchmarks" / "baselines" / "engines.toml").write_text("\n".join(lines), encoding="utf-8")
    data = root / "benchmarks" / "data"
    data.mkdir(parents=True, exist_ok=True)
    for sid, cases in suites.items():
        (data / f"{sid}.jsonl").write_text(
            "".join(json.dumps(c, ensure_ascii=False) + "\n" for c in cases), encoding="utf-8"
        )
    results = root / "benchmarks" / "results" / "baselines"
    if results.exists():
        for stale in results.glob("*.jsonl"):
            stale.unlink()


def krite_engine(port: int, model_name: str, command: str) -> dict[str, Any]:
    """An ``engines.toml`` entry for ``logitjudge serve``: requests carry ``model: jev-latest``
    (krite-bench's cases have no ``model``), responses are read in its ``jev`` dialect (no
    ``latency_ms``, score probabilities by level index)."""
    return {
        "port": port,
        "model": model_name,
        "backend": "logitjudge serve (transformers)",
        "precision": "fp32",
        "request_model": MODEL_ALIAS,
        "dialect": "jev",
        "start": command,
    }


def krite_errors(root: Path, engine: str, suites: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Per suite: calls, schema errors (``error`` starting ``schema:``), other errors, and the
    first schema message, from krite-bench's ``pred-<engine>-<suite>.jsonl``."""
    out: dict[str, dict[str, Any]] = {}
    for sid in suites:
        path = root / "benchmarks" / "results" / "baselines" / f"pred-{engine}-{sid}.jsonl"
        if not path.exists():
            out[sid] = {"error": "no prediction file"}
            continue
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        schema = [r["error"] for r in rows if str(r.get("error") or "").startswith("schema:")]
        other = [r["error"] for r in rows if r.get("error") and not str(r["error"]).startswith("schema:")]
        out[sid] = {
            "calls": len(rows),
            "schema_errors": len(schema),
            "schema_error_rate": len(schema) / len(rows) if rows else None,
            "other_errors": len(other),
            "first_schema_error": schema[0] if schema else None,
            "first_other_error": other[0] if other else None,
        }
    return out


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def run_krite(
    root: Path, engine: str, suites: Sequence[str], invariance_suite: str | None, invariance_n: int
) -> dict[str, Any]:
    """``krite-bench quality`` on ``suites`` (and ``invariance`` on ``invariance_suite``) for one engine."""
    kb, env = str(harness_bin("krite-bench")), {"KRITE_ROOT": str(root)}
    steps = [
        run_step(
            f"krite-quality-{engine}", [kb, "quality", "--engine", engine, "--suites", ",".join(suites)], root, env
        )
    ]
    if invariance_suite:
        steps.append(
            run_step(
                f"krite-invariance-{engine}",
                [kb, "invariance", "--engine", engine, "--suites", invariance_suite, "--n", str(invariance_n)],
                root,
                env,
            )
        )
    results = root / "benchmarks" / "results" / "baselines"
    meta = ("engine", "model", "backend", "precision", "commit", "timestamp")
    quality = [
        {k: v for k, v in r.items() if k not in meta}
        for r in _jsonl(results / "quality.jsonl")
        if r["engine"] == engine
    ]
    invariance = [
        {k: v for k, v in r.items() if k not in meta}
        for r in _jsonl(results / "invariance.jsonl")
        if r["engine"] == engine
    ]
    return {"steps": steps, "quality": quality, "invariance": invariance, "errors": krite_errors(root, engine, suites)}


def krite_by_type(run: dict[str, Any], suites: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Schema-error rate per question type over the quality suites of one run."""
    by: dict[str, Counter[str]] = defaultdict(Counter)
    for sid, err in run["errors"].items():
        if "calls" not in err or not suites.get(sid):
            continue
        qtype = suites[sid][0]["type"]
        by[qtype]["calls"] += err["calls"]
        by[qtype]["schema_errors"] += err["schema_errors"]
        by[qtype]["other_errors"] += err["other_errors"]
    return {
        t: {**c, "schema_error_rate": c["schema_errors"] / c["calls"] if c["calls"] else None}
        for t, c in sorted(by.items())
    }


# -- the report -----------------------------------------------------------------------------------


def finite(value: Any) -> Any:
    """``value`` with every NaN or infinity replaced by None (the harnesses' reports hold NaN; JSON does not)."""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def _fmt(x: Any, digits: int = 3) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def render_markdown(record: dict[str, Any]) -> str:
    """The ``.md`` beside the JSON: what ran, the figures, then each command and what it printed."""
    meta, out = record["metadata"], []
    out += [
        f"# Third-party harnesses on `logitjudge serve`: {record['model_name']}",
        "",
        f"Written by `{record['command']}` (`benchmarks/harnesses/run_harnesses.py`).",
        f"Run {meta['date']} at commit `{(meta['git_sha'] or '?')[:12]}`{' (uncommitted changes)' if meta['git_dirty'] else ''},"
        f" logitjudge {meta['logitjudge']}, torch {meta['torch']}, transformers {meta['transformers']},"
        f" {meta['device']} ({meta['device_name']}); harnesses {', '.join(f'{k} {v}' for k, v in record['harness_versions'].items())}.",
        f"Model `{record['model_name']}` served as `{MODEL_ALIAS}`; {record['total_wall_s'] / 60:.1f} minutes in all.",
    ]
    if "load_average" in record:
        load = record["load_average"]
        out.append(f"Load average (1, 5, 15 min) at the start {load['start']}, at the end {load['end']}.")
    out += [
        "Figures in seconds depend on what else ran on the machine; the others do not.",
        "",
    ]
    kr = record.get("krite")
    if kr:
        out += ["## krite-bench: schema errors per question type", ""]
        out += ["| question type | wire | calls | schema errors | rate | other errors |", "|---|---|---|---|---|---|"]
        for wire in ("strict", "default"):
            for t, c in kr.get(f"{wire}_by_type", {}).items():
                out.append(
                    f"| {t} | {wire} | {c['calls']} | {c['schema_errors']} | {_fmt(c['schema_error_rate'])} | {c['other_errors']} |"
                )
        first = next(
            (e["first_schema_error"] for e in kr["default"]["errors"].values() if e.get("first_schema_error")), None
        )
        if first:
            out += [
                "",
                "On the default wire krite-bench rejects each choice and score answer for its `x_option_mass`"
                f" (its message, which it cuts at 300 characters: `{first}`).",
            ]
        out += ["", f"Suites: {kr['suites_note']}", "", "Quality (strict wire):", ""]
        out += [
            "| suite | type | n | error rate | accuracy | AUROC / macro-F1 / MAE | ECE | NLL |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for q in kr["strict"]["quality"]:
            raw = q.get("raw") or {}
            other = next(
                (f"{name} {_fmt(q[name])}" for name in ("auroc", "macro_f1", "mae") if q.get(name) is not None), "-"
            )
            out.append(
                f"| {q['suite']} | {q['type']} | {q['n']} | {_fmt(q['error_rate'])} | {_fmt(q.get('accuracy'))} |"
                f" {other} | {_fmt(raw.get('ece'))} | {_fmt(raw.get('nll'))} |"
            )
        for inv in kr["strict"]["invariance"]:
            out += [
                "",
                f"Option-order invariance ({inv['suite']}, {inv['cases']} cases, {inv['calls']} calls, error rate"
                f" {_fmt(inv['error_rate'])}): argmax flips under a permutation {_fmt(inv.get('full_permutation_flip_rate'))},"
                f" under the reversed order {_fmt(inv.get('reverse_flip_rate'))}; largest probability change"
                f" {_fmt(inv.get('max_prob_dev'))}, mean {_fmt(inv.get('mean_prob_dev'))}.",
            ]
        out.append("")
    jb = record.get("jevbench")
    if jb:
        out += ["## jevbench", "", f"`jevbench check`: {'OK' if jb['check_ok'] else 'FAILED'}.", ""]
        for label in ("examples", "mini"):
            s = jb[label]
            if "error" in s:
                out += [f"{label}: {s['error']}", ""]
                continue
            dims = ", ".join(f"{k} {_fmt(v)}" for k, v in (s.get("dimensions") or {}).items() if v is not None)
            suite = s["suite"].get("name") if isinstance(s["suite"], dict) else s["suite"]
            out += [
                f"- `{suite}` ({s['cases']} cases, {s['requests']} requests, {s['errors']} errors, min_n {s['min_n']}):"
                f" overall {_fmt(s['overall'])} (reported only when all five dimensions ran); dimensions: {dims or '-'}",
            ]
            groups = ", ".join(f"{k} {_fmt(v)}" for k, v in (s.get("groups") or {}).items() if v is not None)
            out.append(f"  groups: {groups or '-'}")
        out.append("")
    s1 = record.get("sys1bench")
    if s1:
        out += [
            "## sys1bench",
            "",
            f"{s1['items']} canary items, {s1['prediction_rows']} prediction rows, {s1['rows_with_errors']} with errors.",
            "",
            (s1.get("table") or "").strip(),
            "",
        ]
    out += ["## Commands and what they printed", ""]
    for server in record["servers"]:
        out += [f"Server ({server['wire']} wire): `{server['command']}` (ready in {server['startup_s']} s)."]
    out.append("")
    for step in record["steps"]:
        out += [
            f"### {step['name']} (exit {step['exit_code']}, {step['wall_s']} s)",
            "",
            "```",
            f"$ {step['command']}",
            step["printed"],
            "```",
            "",
        ]
    return "\n".join(out).rstrip() + "\n"


# -- main -----------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--model", default=None, help="logitjudge serve --model (default: LOGITJUDGE_MODEL or the default model)"
    )
    p.add_argument("--only", default=",".join(HARNESSES), help="comma-separated: jevbench, sys1bench, krite")
    p.add_argument("--concurrency", type=int, default=4, help="requests in flight for jevbench and sys1bench")
    p.add_argument(
        "--jevbench-select",
        default="--dimensions BAT",
        help='jevbench eval selection on jevbench-mini (e.g. "--dimensions BAT,CHO", "" for all, "none": not run)',
    )
    p.add_argument("--sys1bench-limit", type=int, default=100, help="canary items for sys1bench run (200: all)")
    p.add_argument("--krite-cases", type=int, default=40, help="cases per question type on the strict wire")
    p.add_argument("--krite-control-cases", type=int, default=10, help="cases per question type on the default wire")
    p.add_argument("--krite-invariance-n", type=int, default=4, help="queue cases for krite-bench invariance (0: none)")
    p.add_argument(
        "--krite-suites",
        default="",
        help="krite-bench's own suite ids instead of the canary suites (runs `krite-bench data`; needs the Hugging Face hub)",
    )
    p.add_argument("--work", type=Path, default=None, help="raw outputs (default out/harnesses/<model>)")
    p.add_argument("--no-write", action="store_true", help="do not write benchmarks/results/")
    args = p.parse_args(argv)
    only = {h.strip() for h in args.only.split(",") if h.strip()}
    if only - set(HARNESSES):
        p.error(f"--only: unknown {sorted(only - set(HARNESSES))}")

    started = time.monotonic()
    metadata = run_metadata()  # the commit and working tree the run starts from
    load_start = os.getloadavg()  # a shared machine: other work slows every figure in seconds
    ensure_harness_venv()
    versions = installed_versions()
    work = (args.work or ROOT / "out" / "harnesses" / (args.model or "default")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    python = Path(sys.executable)  # shown as its venv names it: .venv/bin/python
    python_shown = (
        str(Path(python.parent.parent.name, "bin", python.name)) if python.parent.name == "bin" else python.name
    )
    record: dict[str, Any] = {
        "command": shlex.join([python_shown, *(a.replace(str(ROOT) + "/", "") for a in sys.argv)]),
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "harness_versions": versions,
        "servers": [],
        "steps": [],
    }

    default_port = free_port()
    with serve(args.model, default_port, work / "serve-default.log", strict=False) as server:
        record["servers"].append({"wire": "default", **server})
        record["model_name"] = server["healthz"]["model"]
        url = server["url"]
        if "jevbench" in only:
            record["jevbench"] = run_jevbench(url, work / "jevbench", args.jevbench_select, args.concurrency)
        if "sys1bench" in only:
            record["sys1bench"] = run_sys1bench(url, work / "sys1bench", args.sys1bench_limit, args.concurrency)
        if "krite" in only:
            krite_root = work / "krite"
            strict_port = free_port()
            model_flag = f" --model {args.model}" if args.model else ""
            engines = {
                "logitjudge-strict": krite_engine(
                    strict_port,
                    record["model_name"],
                    f"logitjudge serve{model_flag} --port {strict_port} --strict-wire",
                ),
                "logitjudge-default": krite_engine(
                    default_port, record["model_name"], f"logitjudge serve{model_flag} --port {default_port}"
                ),
            }
            suites, controls = krite_suites(canary_rows(), args.krite_cases, args.krite_control_cases)
            write_krite_workspace(krite_root, engines, {**suites, **controls})
            quality_ids, control_ids = list(suites), list(controls)
            suites = {**suites, **controls}
            inv_suite = "canary-queue" if args.krite_invariance_n else None
            note = (
                "krite-bench's case format (one question `q` per request, a gold answer), written from the "
                "sys1bench canary, since krite-bench's own suites are built from Hugging Face datasets: "
                + "; ".join(
                    f"{t}: {' and '.join(f'`canary-{k}`' for k in keys)}" for t, keys in KRITE_QUESTIONS.items()
                )
                + f"; {args.krite_cases} cases per type, half per question; the control (default wire): the first"
                f" {args.krite_control_cases} per type; invariance: {args.krite_invariance_n} `queue` cases"
                " (6 options: 24 seeded orders plus the reverse)."
            )
            control = run_krite(krite_root, "logitjudge-default", control_ids, None, 0)
            with serve(args.model, strict_port, work / "serve-strict.log", strict=True) as strict_server:
                record["servers"].append({"wire": "strict", **strict_server})
                strict = run_krite(krite_root, "logitjudge-strict", quality_ids, inv_suite, args.krite_invariance_n)
            record["krite"] = {
                "suites_note": note,
                "strict": strict,
                "default": control,
                "strict_by_type": krite_by_type(strict, suites),
                "default_by_type": krite_by_type(control, suites),
            }
    for h in ("jevbench", "sys1bench"):
        record["steps"] += record.get(h, {}).get("steps", [])
    if "krite" in record:
        record["steps"] += record["krite"]["default"]["steps"] + record["krite"]["strict"]["steps"]
    record["total_wall_s"] = round(time.monotonic() - started, 1)
    record["load_average"] = {"start": [round(x, 2) for x in load_start], "end": [round(x, 2) for x in os.getloadavg()]}
    device = str(record["servers"][0]["healthz"]["engine"].get("device", "cpu"))
    if device != metadata["device"]:  # the server's device, as it reports it
        metadata.update(device=device, device_name=run_metadata(device)["device_name"])
    record["metadata"] = metadata
    record = finite(record)
    (work / "record.json").write_text(json.dumps(record, indent=2, allow_nan=False) + "\n")
    if not args.no_write:
        stem = f"harnesses-{record['model_name']}"
        (RESULTS / f"{stem}.json").write_text(json.dumps(record, indent=2, allow_nan=False) + "\n")
        (RESULTS / f"{stem}.md").write_text(render_markdown(record))
        print(f"wrote {RESULTS / stem}.json and .md")
    failed = [s["name"] for s in record["steps"] if s["exit_code"] != 0]
    if failed:
        print(f"commands that failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
