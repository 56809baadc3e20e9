"""Speed peers: other open ``/v1/systemone`` servers, driven from Python on the same model.

``Any2JevPeer`` runs **any2jev 0.1.0** (PyPI, Apache-2.0, https://github.com/hwfengcs/any2jev):
another "System One" server that packs a state and its questions into one sequence under a
block-causal mask and reads each answer with a pointer head. It needs transformers < 5, so it
lives in its own venv ``.venv-any2jev`` (``make peer-env``) and runs as a subprocess; this module
runs in ``.venv`` and talks to it over HTTP on a free loopback port. Its head is untrained
(``any2jev convert`` only: LoRA B = 0, a random pointer head), so its answers are noise and only
its speed counts.

How the model gets there:

1. our loader's transformers directory of the model (:func:`logitjudge.engine.model.resolve_model`,
   ``smollm2-135m`` by default) is mirrored into a transformers-4 ``base/`` directory in our cache
   (weights symlinked; ``config.json`` and ``tokenizer_config.json`` rewritten: transformers 5
   writes ``rope_parameters`` and ``tokenizer_class: TokenizersBackend``, which transformers 4 reads
   as ``rope_theta = 10000`` (wrong for SmolLM2's 100000) and cannot load);
2. ``any2jev convert base --out checkpoint --max-state 4096`` once (about 15 s for the 135M),
   cached by the model directory, any2jev's version and ``max_state``;
3. ``any2jev serve checkpoint`` with ``torch.set_num_threads(threads)`` and ``OMP_NUM_THREADS``.

Smoke test (a 6-question mixed request, the shapes of ``benchmarks/speed/speed.py``, over a ~300-token
state)::

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/speed/peers.py --threads 2 --state-tokens 300 --repeats 3

What any2jev's ``/v1/systemone`` accepts (read from its ``schema.py``, ``packing.py``, ``serve.py``):
noul (options ``no``/``yes``, criteria ``true``/``false`` appended as ``"yes: <text>"``), choice
(1..255 options, ``"name: description"``), score (2..255 levels, the level texts alone); Text
values (string, object, array) are flattened to text; unknown fields are ignored, ``model`` is
optional and any name is served. The state is cut silently to ``max_state`` tokens; a question
over ``max_branch`` (1024) tokens is a 500. Requests are answered one at a time (a lock, batch 1,
no prefix cache), with the LoRA adapter unmerged. The response adds ``latency_ms`` (the forward
pass only, in ms) and reports ``usage.input_tokens`` = the packed sequence's length.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from logitjudge.engine.model import resolve_model
from logitjudge.engine.types import Question
from logitjudge.settings import EMBEDDED_MODEL, cache_dir

ROOT = Path(__file__).resolve().parents[2]
ANY2JEV_VENV = ROOT / ".venv-any2jev"
ANY2JEV_VERSION = "0.1.0"
SOURCE_TEXT = ROOT.parent / "shared" / "data" / "qags" / "dev.jsonl"

# Run any2jev's CLI with torch's intra-op threads set first (its `serve` has no thread flag).
_LAUNCH = (
    "import sys, torch\n"
    "n = int(sys.argv.pop(1))\n"
    "if n > 0:\n"
    "    torch.set_num_threads(n)\n"
    "from any2jev.cli import app\n"
    "sys.argv[0] = 'any2jev'\n"
    "app()\n"
)


class PeerUnavailableError(RuntimeError):
    """The peer's environment is missing or its server would not start."""


def free_port() -> int:
    """A free TCP port on the loopback interface."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def transformers4_base(model_dir: Path, target: Path) -> Path:
    """Mirror a transformers-5 model directory as one transformers 4 loads the same way; return it.

    Weights are symlinked; ``config.json`` gets ``rope_theta``/``rope_scaling`` back from
    ``rope_parameters`` and ``torch_dtype`` from ``dtype``; ``tokenizer_config.json`` names
    ``PreTrainedTokenizerFast`` (the same ``tokenizer.json``). Written to a temporary directory,
    then renamed.
    """
    if (target / "config.json").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-base-", dir=target.parent))
    try:
        for f in model_dir.iterdir():
            if f.name in ("config.json", "tokenizer_config.json"):
                continue
            if f.suffix == ".safetensors" or f.name.endswith(".safetensors.index.json"):
                (tmp / f.name).symlink_to(f.resolve())
            elif f.is_file():
                shutil.copy2(f, tmp / f.name)
        config = json.loads((model_dir / "config.json").read_text())
        rope = config.pop("rope_parameters", None)
        if isinstance(rope, dict):
            rope = dict(rope)
            config["rope_theta"] = rope.pop("rope_theta", config.get("rope_theta", 10000.0))
            config["rope_scaling"] = None if rope.get("rope_type", "default") == "default" else rope
        if "dtype" in config:
            config["torch_dtype"] = config.pop("dtype")
        (tmp / "config.json").write_text(json.dumps(config, indent=2))
        tok = json.loads((model_dir / "tokenizer_config.json").read_text())
        for key in ("backend", "is_local", "local_files_only"):
            tok.pop(key, None)
        if tok.get("tokenizer_class") == "TokenizersBackend":
            tok["tokenizer_class"] = "PreTrainedTokenizerFast"
        (tmp / "tokenizer_config.json").write_text(json.dumps(tok, indent=2))
        os.replace(tmp, target)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not (target / "config.json").exists():  # a concurrent run may have won the rename
            raise
    return target


def wire_question(q: Question) -> dict[str, Any]:
    """One engine :class:`~logitjudge.engine.types.Question` as a ``/v1/systemone`` wire question.

    The inverse of :func:`logitjudge.convert.question_to_engine`: noul -> criteria ``true``/``false``
    (left out when both are ``None``), choice -> ``{name: description}``, score -> the level
    descriptions (the level's name where it has none).
    """
    if q.type == "noul":
        crit = {o.name: o.description for o in q.options}
        out: dict[str, Any] = {"type": "noul", "instructions": q.instructions}
        if any(v is not None for v in crit.values()):
            out["criteria"] = crit
        return out
    if q.type == "choice":
        return {
            "type": "choice",
            "instructions": q.instructions,
            "criteria": {o.name: o.description for o in q.options},
        }
    levels = [o.description if o.description is not None else o.name for o in q.options]
    return {"type": "score", "instructions": q.instructions, "criteria": levels}


class Any2JevPeer:
    """any2jev 0.1.0's server on one model, as a subprocess of this process.

    Args:
        model: a model spec for :func:`logitjudge.engine.model.resolve_model` (default: the
            embedded ``smollm2-135m``); any2jev loads the very same weights (fp32 safetensors).
        threads: torch CPU threads of the server (``torch.set_num_threads`` and
            ``OMP_NUM_THREADS``); ``None`` leaves torch's default.
        max_state: any2jev's state cap in tokens (``convert --max-state``; longer states are cut).
        dtype: any2jev's ``serve --dtype`` (``fp32``, ``bf16``, ``fp16``); ``None`` keeps the
            checkpoint's fp32.
        venv: the any2jev venv (``make peer-env``).
        start_timeout: seconds to wait for the server to answer ``/health``.

    Raises:
        PeerUnavailableError: no ``venv`` (run ``make peer-env``), or the server did not start.

    Use as a context manager, or call :meth:`close`.
    """

    def __init__(
        self,
        model: str | None = EMBEDDED_MODEL,
        *,
        threads: int | None = None,
        max_state: int = 4096,
        dtype: str | None = None,
        venv: Path = ANY2JEV_VENV,
        start_timeout: float = 300.0,
    ) -> None:
        self.python = venv / "bin" / "python"
        if not self.python.exists() or not (venv / "bin" / "any2jev").exists():
            raise PeerUnavailableError(f"any2jev is not installed in {venv}: run make peer-env")
        self.model_dir, self.model_name = resolve_model(model)
        self.threads = threads
        self.max_state = max_state
        self.env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        if threads:
            self.env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
        self.checkpoint = self.convert()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = self.checkpoint.parent / f"serve-{self.port}.log"
        cmd = [str(self.python), "-c", _LAUNCH, str(threads or 0), "serve", str(self.checkpoint)]
        cmd += ["--host", "127.0.0.1", "--port", str(self.port)] + (["--dtype", dtype] if dtype else [])
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(cmd, env=self.env, stdout=self._log, stderr=subprocess.STDOUT)
        self.http = httpx.Client(base_url=self.url, timeout=600)
        try:
            self._wait_ready(start_timeout)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ set-up
    def convert(self) -> Path:
        """The any2jev checkpoint of ``model_dir`` (``convert`` run once, then cached); its path."""
        key = hashlib.sha256(f"{self.model_dir.resolve()}|{ANY2JEV_VERSION}|{self.max_state}".encode()).hexdigest()
        root = cache_dir() / "peers" / f"any2jev-{ANY2JEV_VERSION}-{self.model_dir.name}-{key[:12]}"
        target = root / "checkpoint"
        if (target / "any2jev.json").exists():
            return target
        base = transformers4_base(self.model_dir, root / "base")  # the checkpoint names this path
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-ckpt-", dir=root))
        cmd = [str(self.python), "-c", _LAUNCH, str(self.threads or 0), "convert", str(base)]
        cmd += ["--out", str(tmp), "--max-state", str(self.max_state)]
        done = subprocess.run(cmd, env=self.env, capture_output=True, text=True)
        if done.returncode != 0 or not (tmp / "any2jev.json").exists():
            shutil.rmtree(tmp, ignore_errors=True)
            raise PeerUnavailableError(
                f"any2jev convert failed ({done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
            )
        try:
            os.replace(tmp, target)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
            if not (target / "any2jev.json").exists():
                raise
        return target

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise PeerUnavailableError(f"any2jev serve exited ({self.proc.returncode}):\n{self.log_tail()}")
            try:
                if self.http.get("/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        raise PeerUnavailableError(f"any2jev serve did not answer /health in {timeout:.0f} s:\n{self.log_tail()}")

    def log_tail(self, n: int = 3000) -> str:
        """The last ``n`` characters of the server's log."""
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    # ------------------------------------------------------------------ requests
    def answer(
        self, state: str | Mapping[str, Any] | Sequence[Any], questions: Sequence[Mapping[str, Any]]
    ) -> tuple[float, dict[str, Any]]:
        """Post one ``/v1/systemone`` request; return (wall seconds, the response).

        Args:
            state: the state (a string, or a JSON object or array, which any2jev flattens).
            questions: wire questions (``{"type": ..., "instructions": ..., "criteria": ...}``),
                sent as ids ``q0``, ``q1``, ... in this order.

        Returns:
            The seconds from sending the request to the parsed JSON response (HTTP on loopback
            included), and the response: ``answers``, ``usage.input_tokens`` (the packed tokens
            any2jev ran: see :func:`input_tokens`) and ``latency_ms`` (its forward pass, in ms).

        Raises:
            RuntimeError: any status other than 200.
        """
        body = {"model": "jev-latest", "state": state, "questions": {f"q{i}": dict(q) for i, q in enumerate(questions)}}
        t0 = time.perf_counter()
        r = self.http.post("/v1/systemone", json=body)
        out = r.json() if r.status_code == 200 else None
        seconds = time.perf_counter() - t0
        if out is None:
            raise RuntimeError(f"any2jev answered {r.status_code}: {r.text[:2000]}")
        return seconds, out

    def health(self) -> dict[str, Any]:
        """any2jev's ``/health``: model, mode, device, and request / latency counters."""
        return dict(self.http.get("/health").json())

    def close(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 20 s) and release the connection."""
        self.http.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()

    def __enter__(self) -> Any2JevPeer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def input_tokens(response: Mapping[str, Any]) -> int | None:
    """The tokens any2jev reports it ran for a request (state + every question, packed)."""
    usage = response.get("usage") or {}
    n = usage.get("input_tokens")
    return int(n) if n is not None else None


def state_text(model_dir: Path, n_tokens: int) -> str:
    """A real text (QAGS news articles, read-only from shared/data) cut to ``n_tokens`` tokens of
    the model's tokenizer (as ``benchmarks/speed/speed.py``'s ``state_of``)."""
    from tokenizers import Tokenizer

    texts: list[str] = []
    if SOURCE_TEXT.exists():
        for line in SOURCE_TEXT.read_text().splitlines():
            texts += json.loads(line).get("context") or []
    text = "\n".join(texts) or ("The committee met on Tuesday to review the budget. " * 400)
    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    ids = tok.encode(text, add_special_tokens=False).ids[:n_tokens]
    return str(tok.decode(ids))


def main() -> None:
    import statistics

    from speed import questions  # the same question shapes as the speed benchmark

    ap = argparse.ArgumentParser(description="Smoke test of the any2jev speed peer: one mixed request, timed.")
    ap.add_argument("--model", default=EMBEDDED_MODEL)
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads of the server")
    ap.add_argument("--state-tokens", type=int, default=300)
    ap.add_argument("--questions", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=3, help="timed requests after one warm-up")
    args = ap.parse_args()
    t0 = time.perf_counter()
    with Any2JevPeer(args.model, threads=args.threads) as peer:
        print(f"any2jev {ANY2JEV_VERSION} ready in {time.perf_counter() - t0:.1f} s on {peer.url} ({peer.checkpoint})")
        state = state_text(peer.model_dir, args.state_tokens)
        qs = [wire_question(q) for q in questions(args.questions)]
        peer.answer(state, qs)  # warm-up
        runs = [peer.answer(state, qs) for _ in range(args.repeats)]
        seconds = [s for s, _ in runs]
        resp = runs[-1][1]
        print(
            f"state {args.state_tokens} tokens, {len(qs)} questions: any2jev ran {input_tokens(resp)} tokens; "
            f"wall {statistics.median(seconds):.3f} s median of {[round(s, 3) for s in seconds]}, "
            f"its forward {resp.get('latency_ms')} ms (last run)"
        )
        print(json.dumps(resp, indent=1))
        print(json.dumps(peer.health()))


if __name__ == "__main__":
    main()
