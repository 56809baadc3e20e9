"""Soak ``logitjudge serve`` on loopback: many clients, small and large states, a bounded queue.

Command (the committed result was made with exactly this)::

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/reliability/load_soak.py --clients 200 --duration 60 --warmup 15

The server runs as its own process (``python -m logitjudge.cli serve``, the default model,
``--max-queue 64``) on a free loopback port. ``--clients`` closed-loop clients each send a
request, wait for the answer, and send the next; one request in five carries a large state
(~6,000 characters, ~1,300 tokens), the rest a one-line support ticket; each has 3 questions. A
client refused with 429/529 waits ``Retry-After`` seconds (capped at the time left) before its
next request. Clients start sending at once; the first ``--warmup`` seconds are warm-up, then
``--duration`` seconds are measured. Requests still running at the end are awaited.

Checked and reported:

- statuses: only 2xx, 429 or 529, and every 429/529 with ``Retry-After``; no connection errors;
- the server's resident memory (``/proc/<pid>/status`` VmRSS, sampled every second): at the end
  of warm-up, its maximum and last value after it, and the least-squares slope after warm-up;
- afterwards, the same request as before the load is answered 200 with the same probabilities
  (max |dp| reported).

Printed: a table of these figures. Written: ``benchmarks/results/load_soak.json`` (config,
environment, metrics, the RSS samples, and per-request rows).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import platform
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.append(str(ROOT / "benchmarks" / "speed"))  # serve_load: the load benchmark
sys.path.append(str(ROOT / "benchmarks"))  # the result helper
from _results import run_metadata  # noqa: E402
from serve_load import QUESTIONS  # noqa: E402  the same ticket questions as the load benchmark

SMALL = "The parcel arrived broken and I want my money back."
LARGE = " ".join(
    f"Message {i}: I wrote to you about order {4400 + i} because the courier left it in the rain again."
    for i in range(60)
)


def body(state: str) -> dict[str, Any]:
    return {"model": "jev-latest", "state": state, "questions": QUESTIONS}


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_healthy(url: str, proc: subprocess.Popen[bytes], limit: float = 900) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("the server exited during start-up")
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError("the server did not start")


async def soak(url: str, clients: int, seconds: float, large_share: float, seed: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    started = time.monotonic()
    deadline = started + seconds
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)

    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as http:

        async def client(k: int) -> None:
            rng = random.Random(seed * 1000 + k)
            while time.monotonic() < deadline:
                large = rng.random() < large_share
                sent = time.monotonic()
                row: dict[str, Any] = {"client": k, "large": large, "sent": sent - started}
                try:
                    r = await http.post("/v1/systemone", json=body(LARGE if large else SMALL))
                    row["status"] = r.status_code
                    row["retry_after"] = r.headers.get("retry-after")
                except httpx.HTTPError as exc:
                    row["status"] = None
                    row["error"] = type(exc).__name__
                row["seconds"] = time.monotonic() - sent
                rows.append(row)
                if row["status"] in (429, 529):
                    wait = float(row["retry_after"] or 1)
                    await asyncio.sleep(max(0.0, min(wait, deadline - time.monotonic())))

        await asyncio.gather(*(client(k) for k in range(clients)))
    return rows


def slope_mb_per_min(samples: list[tuple[float, int]]) -> float:
    """Least-squares slope of RSS over time, in MiB per minute."""
    n = len(samples)
    if n < 2:
        return 0.0
    mt = sum(t for t, _ in samples) / n
    mr = sum(r for _, r in samples) / n
    num = sum((t - mt) * (r - mr) for t, r in samples)
    den = sum((t - mt) ** 2 for t, _ in samples) or 1.0
    return num / den * 60 / 2**20


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--duration", type=float, default=60.0, help="measured seconds after warm-up")
    parser.add_argument("--warmup", type=float, default=15.0)
    parser.add_argument("--large-share", type=float, default=0.2)
    parser.add_argument("--max-queue", type=int, default=64)
    parser.add_argument("--model", default=None)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "load_soak.json"))
    args = parser.parse_args()

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [
        sys.executable,
        "-m",
        "logitjudge.cli",
        "serve",
        "--port",
        str(port),
        "--max-queue",
        str(args.max_queue),
    ]
    cmd += ["--log-level", "warning"] + (["--model", args.model] if args.model else [])
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(cmd, env=env)
    samples: list[tuple[float, int]] = []
    stop = threading.Event()
    try:
        wait_healthy(url, proc)
        reference = httpx.post(f"{url}/v1/systemone", json=body(SMALL), timeout=120).json()
        engine = httpx.get(f"{url}/healthz").json()
        t0 = time.monotonic()

        def sample() -> None:
            while not stop.is_set():
                samples.append((time.monotonic() - t0, rss_bytes(proc.pid)))
                stop.wait(1.0)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        rows = asyncio.run(soak(url, args.clients, args.warmup + args.duration, args.large_share, args.seed))
        ended = time.monotonic() - t0
        stop.set()
        sampler.join()
        after = httpx.post(f"{url}/v1/systemone", json=body(SMALL), timeout=120)
        after_json = after.json()
        dp = max(
            abs(a - b)
            for qid in ("refund", "team", "anger")
            for a, b in zip(_probs(reference["answers"][qid]), _probs(after_json["answers"][qid]), strict=True)
        )
        health_after = httpx.get(f"{url}/healthz").json()
    finally:
        stop.set()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=300)

    statuses = collections.Counter(str(r["status"]) for r in rows)
    refused = [r for r in rows if r["status"] in (429, 529)]
    bad = [r for r in rows if r["status"] not in (200, 429, 529)]
    post = [(t, r) for t, r in samples if t >= args.warmup]
    at_warmup = post[0][1] if post else samples[-1][1]
    measured = [r for r in rows if r["sent"] >= args.warmup]
    ok = [r for r in measured if r["status"] == 200]
    lat = sorted(r["seconds"] for r in ok)
    metrics = {
        "requests": len(rows),
        "statuses": dict(statuses),
        "unexpected": len(bad),
        "refused_without_retry_after": sum(1 for r in refused if not r.get("retry_after")),
        "answered_per_s_after_warmup": len(ok) / args.duration,
        "latency_p50_s": lat[len(lat) // 2] if lat else None,
        "latency_p95_s": lat[int(len(lat) * 0.95)] if lat else None,
        "large_share_answered": sum(1 for r in ok if r["large"]) / len(ok) if ok else None,
        "rss_mib_at_warmup_end": at_warmup / 2**20,
        "rss_mib_max_after_warmup": max(r for _, r in post) / 2**20 if post else None,
        "rss_mib_last": samples[-1][1] / 2**20,
        "rss_growth_mib_after_warmup": (samples[-1][1] - at_warmup) / 2**20,
        "rss_slope_mib_per_min_after_warmup": slope_mb_per_min(post),
        "soak_seconds_incl_tail": ended,
        "after_status": after.status_code,
        "after_max_abs_dp": dp,
        "after_queue": health_after["queue"],
        "exit_code_on_sigterm": code,
    }
    print(f"{'figure':40s} value")
    for k, v in metrics.items():
        print(f"{k:40s} {round(v, 4) if isinstance(v, float) else v}")
    out = {
        "command": "HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/reliability/load_soak.py "
        f"--clients {args.clients} --duration {args.duration:g} --warmup {args.warmup:g}",
        "metadata": run_metadata(),
        "config": {**vars(args), "server_cmd": cmd[1:], "large_state_chars": len(LARGE)},
        "environment": {
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "torch": version("torch"),
            "httpx": version("httpx"),
            "uvicorn": version("uvicorn"),
            "server": engine,
        },
        "metrics": metrics,
        "rss_samples": [{"t": round(t, 2), "rss_mib": round(r / 2**20, 2)} for t, r in samples],
        "rows": rows,
    }
    Path(args.out).write_text(json.dumps(out, indent=1, default=str) + "\n")
    print(f"wrote {args.out}")
    return 1 if bad or metrics["refused_without_retry_after"] or after.status_code != 200 else 0


def _probs(answer: dict[str, Any]) -> list[float]:
    if answer["type"] == "noul":
        return [answer["noul"]]
    return list(answer["probabilities"].values())


if __name__ == "__main__":
    raise SystemExit(main())
