"""The commands of README.md and docs/getting-started run as written.

Every fenced block of those pages is taken as it stands and either run or named below as one
that is not run here (setup that CI itself performs, a synopsis, an excerpt of output): a new
block fails :func:`test_every_block_is_run_or_named` until it is classified. The runs use the
embedded SmolLM2-135M (``LOGITJUDGE_MODEL=smollm2-135m``, the variable the CLI and
``Judge.load()`` read for the default model) so they fit the suite; the commands are otherwise
unchanged, except the server's port (8000 becomes a free one, in every block that names it).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs" / "getting-started").glob("*.md"))]
BIN = Path(sys.executable).parent
MODEL = "smollm2-135m"

# Blocks that are not run here, by the start of their text: why each is safe to leave out.
NOT_RUN = {
    "make demo": "CI runs `make check`, which builds the same environments; `make demo` loads the 1.5B",
    "make test": "CI runs it (`make check` ends with `make test`)",
    "pip install": "the environment CI builds with the Makefile is this one",
    "evaluator   ": "an excerpt of the printed summary",
    "request -> contract": "the request diagram",
    "@software": "the citation",
    "logitjudge ask REQUEST.json [": "a synopsis (the request below it is run through `ask`)",
    "logitjudge serve [": "a synopsis (`logitjudge serve --port 8000` is run)",
    '{"model": "qwen2.5-coder-1.5b-instruct"': "an example response (checked against the wire schema below)",
}


def _blocks() -> list[tuple[str, str, str]]:
    """(page name, info string, text) of every fenced block of :data:`PAGES`."""
    md = MarkdownIt()
    out = []
    for page in PAGES:
        for token in md.parse(page.read_text(encoding="utf-8")):
            if token.type == "fence":
                out.append((page.relative_to(ROOT).as_posix(), token.info.strip(), token.content))
    return out


BLOCKS = _blocks()


def _kind(text: str) -> str:
    """How a block is checked: a key of :data:`NOT_RUN`, or one of the run kinds."""
    start = text.lstrip()
    for prefix in NOT_RUN:
        if start.startswith(prefix):
            return prefix
    if start.startswith("logitjudge evaluate"):
        return "evaluate"
    if start.startswith("logitjudge serve --port"):
        return "serve"
    if start.startswith("curl "):
        return "curl"
    if "from logitjudge import Judge" in text:
        return "python"
    if "from typesafe_sdk import" in text:
        return "sdk"
    if start.startswith("{") and '"questions"' in text:
        return "request"
    return "unknown"


def _env() -> dict[str, str]:
    env = dict(os.environ, LOGITJUDGE_MODEL=MODEL, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop("LOGITJUDGE_API_KEYS", None)
    env.pop("LOGITJUDGE_API_KEYS_FILE", None)
    return env


def _run(args: list[str] | str, cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    """Run a block's command (a string: through the shell, as a user types it) with :func:`_env`;
    a failure shows its stderr."""
    proc = subprocess.run(
        args, shell=isinstance(args, str), cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _of_kind(kind: str) -> list[str]:
    """The distinct blocks of ``kind`` (a command shown on two pages runs once)."""
    return list(dict.fromkeys(text for _, _, text in BLOCKS if _kind(text) == kind))


def test_every_block_is_run_or_named():
    unknown = [(page, text.splitlines()[0]) for page, _, text in BLOCKS if _kind(text) == "unknown"]
    assert not unknown, f"blocks neither run nor named in NOT_RUN: {unknown}"
    kinds = {_kind(text) for _, _, text in BLOCKS}
    assert {"evaluate", "serve", "curl", "python", "sdk", "request"} <= kinds  # the runs below have blocks


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """A folder with the repository's ``examples/``, where the commands run (they write ``out/``)."""
    path = tmp_path_factory.mktemp("readme")
    shutil.copytree(ROOT / "examples", path / "examples")
    return path


@pytest.fixture(scope="module")
def served(workdir):
    """``logitjudge serve --port 8000`` as written, on a free port; yields that port."""
    (command,) = _of_kind("serve")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        command.strip().replace("8000", str(port)),
        shell=True,
        cwd=workdir,
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"serve exited: {proc.stderr.read()[-3000:] if proc.stderr else ''}"
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(1)
        else:
            pytest.fail("serve did not become ready in 600 s")
        yield port
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=60)
        if proc.stderr is not None:
            proc.stderr.close()


def test_the_evaluate_quickstart_runs_as_written(workdir):
    for command in _of_kind("evaluate"):
        proc = _run(command, workdir, 1800)
        for path in re.findall(r"--(?:out|report) (\S+)", command):
            assert (workdir / path).stat().st_size > 0, path
        rows = [json.loads(line) for line in (workdir / "out" / "rag_sample.results.jsonl").read_text().splitlines()]
        assert rows and any(r["results"].get("faithfulness", {}).get("status") == "ok" for r in rows)
        assert "faithfulness" in proc.stdout  # the printed summary the README excerpts


def test_the_curl_quickstart_answers_every_question(served, workdir):
    for command in _of_kind("curl"):
        proc = _run(command.replace("8000", str(served)), workdir, 600)
        body = json.loads(proc.stdout)
        assert set(body["answers"]) == {"refund", "team", "anger"}, body
        assert 0.0 <= body["answers"]["refund"]["noul"] <= 1.0
        assert body["answers"]["team"]["choice"] in {"Billing", "Shipping"}


def test_the_sdk_swap_runs_as_written(served, workdir):
    for code in _of_kind("sdk"):
        proc = _run([sys.executable, "-c", code.replace("8000", str(served))], workdir, 600)
        noul, choice, score = proc.stdout.split()
        assert 0.0 <= float(noul) <= 1.0 and choice in {"Billing", "Shipping"} and 0.0 <= float(score) <= 2.0


def test_the_python_quickstarts_run_as_written(workdir):
    for code in _of_kind("python"):
        _run([sys.executable, "-c", code], workdir, 1200)


def test_the_request_is_answered_by_ask_and_the_example_response_is_wire_valid(workdir):
    from logitjudge.contract.systemone import SystemOneResponse

    for text in _of_kind("request"):
        path = workdir / "REQUEST.json"
        path.write_text(text, encoding="utf-8")
        proc = _run([str(BIN / "logitjudge"), "ask", "REQUEST.json"], workdir, 1200)
        body = json.loads(proc.stdout)
        assert set(body["answers"]) == set(json.loads(text)["questions"])
    responses = [t for _, _, t in BLOCKS if _kind(t).startswith('{"model"')]
    assert responses  # the quickstart's example response is checked, not skipped
    for text in responses:
        SystemOneResponse.model_validate_json(text)
