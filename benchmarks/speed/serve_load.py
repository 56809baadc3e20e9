"""Load benchmark of ``logitjudge serve``: batched scheduler vs one request at a time.

Command (the committed result was made with exactly this)::

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/speed/serve_load.py --clients 1 8 32 --duration 15 --max-num-batched-tokens 4096

For each mode the server runs as its own process (``python -m logitjudge.cli serve``) on a free
loopback port, on the default model unless ``--model`` says otherwise:

- ``batched``: the scheduler groups concurrent requests into one engine call (up to 64 requests
  under ``--max-num-batched-tokens``, default 2048 estimated tokens: about 11 of these requests);
- ``one-at-a-time``: ``--max-batch-requests 1``, every request is its own engine call;
- ``vllm``: ``--backend vllm`` (needs vLLM: run this script with ``.venv-vllm/bin/python``); the
  scheduler hands every request to vLLM at once and vLLM batches continuously.

The vLLM rows (``benchmarks/results/serve_load-vllm.json``) were made with::

    HF_HUB_OFFLINE=1 .venv-vllm/bin/python benchmarks/speed/serve_load.py --modes batched vllm --clients 8 32 --duration 15 --max-num-batched-tokens 4096 --out benchmarks/results/serve_load-vllm.json

Against each, closed-loop clients (1, 8, 32 by default) each send a request, wait for the answer,
and send the next, for ``--duration`` seconds; requests still running at the deadline are waited
for. Every request is a support ticket with 3 questions (noul, 3-way choice, 3-level score) over
one of 8 states. Printed: requests/s, questions/s, latency p50/p95/p99 and the mean requests per
engine call (from ``/metrics``). Written: ``benchmarks/results/serve_load.json`` (config,
environment, the table's rows, and one row per request).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

import httpx

sys.path.append(str(Path(__file__).resolve().parents[1]))  # benchmarks/: the result helper
from _results import run_metadata  # noqa: E402

STATES = [
    "The parcel arrived broken and I want my money back.",
    "Hi! Just wanted to say the new app update is great, thanks.",
    "I have been charged twice for my subscription this month. Please fix this today.",
    "Where is my order? It was supposed to arrive last Tuesday and tracking shows nothing.",
    "Your support agent was rude to me on the phone. I am cancelling my account.",
    "Can I change the delivery address for order 4471 before it ships?",
    "The invoice PDF does not open on my laptop; could you resend it as plain text?",
    "This is the third time the courier left my package in the rain. Unacceptable.",
]
QUESTIONS = {
    "refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"},
    "team": {
        "type": "choice",
        "instructions": "Which team should handle the ticket?",
        "criteria": {"Billing": "charges, invoices", "Shipping": "deliveries, couriers", "Support": None},
    },
    "anger": {
        "type": "score",
        "instructions": "How angry is the customer?",
        "criteria": ["Calm", "Annoyed", "Furious"],
    },
}
MODES: dict[str, list[str]] = {
    "batched": ["--max-batch-requests", "64"],
    "one-at-a-time": ["--max-batch-requests", "1"],
    # vLLM batches continuously: the scheduler hands it up to 64 engine calls at once
    "vllm": ["--backend", "vllm", "--kv-cache-gib", "2"],
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(args: argparse.Namespace, mode_flags: list[str]) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "logitjudge.cli",
        "serve",
        "--port",
        str(port),
        "--log-level",
        "warning",
        *mode_flags,
        "--max-queue",
        "1024",
    ]
    if args.model:
        cmd += ["--model", args.model]
    cmd += ["--max-num-batched-tokens", str(args.max_num_batched_tokens)]
    proc = subprocess.Popen(cmd, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}")
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.kill()
    raise RuntimeError("the server did not start in 600 s")


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()


def batch_stats(url: str) -> tuple[float, float]:
    """(sum, count) of the server's ``logitjudge_batch_size`` histogram."""
    total = count = 0.0
    for line in httpx.get(f"{url}/metrics", timeout=30).text.splitlines():
        if line.startswith("logitjudge_batch_size_sum"):
            total = float(line.split()[-1])
        elif line.startswith("logitjudge_batch_size_count"):
            count = float(line.split()[-1])
    return total, count


async def run_load(url: str, clients: int, duration: float) -> tuple[list[dict[str, Any]], float]:
    """Closed-loop clients for ``duration`` s; returns per-request rows and the wall time."""
    rows: list[dict[str, Any]] = []
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:
        start = time.perf_counter()
        deadline = start + duration

        async def one_client(cid: int) -> None:
            i = cid
            while time.perf_counter() < deadline:
                body = {"model": "jev-latest", "state": STATES[i % len(STATES)], "questions": QUESTIONS}
                t0 = time.perf_counter()
                r = await client.post("/v1/systemone", json=body)
                t1 = time.perf_counter()
                rows.append(
                    {
                        "client": cid,
                        "start_s": round(t0 - start, 4),
                        "latency_s": round(t1 - t0, 4),
                        "status": r.status_code,
                    }
                )
                i += clients

        await asyncio.gather(*(one_client(c) for c in range(clients)))
        return rows, time.perf_counter() - start


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="model directory or id (default: the embedded model)")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of load per (mode, clients)")
    parser.add_argument("--max-num-batched-tokens", type=int, default=2048, help="batch budget of the batched mode")
    parser.add_argument("--modes", nargs="+", default=["batched", "one-at-a-time"], choices=list(MODES))
    parser.add_argument("--out", default="benchmarks/results/serve_load.json")
    args = parser.parse_args()

    load_before = os.getloadavg()
    table: list[dict[str, Any]] = []
    per_request: list[dict[str, Any]] = []
    described: dict[str, Any] = {}
    for mode in args.modes:
        proc, url = start_server(args, MODES[mode])
        try:
            health = httpx.get(f"{url}/healthz", timeout=30).json()
            described = health["engine"]
            httpx.post(
                f"{url}/v1/systemone",
                json={"model": "jev-latest", "state": STATES[0], "questions": QUESTIONS},
                timeout=600,
            ).raise_for_status()  # warm-up
            for clients in args.clients:
                before = batch_stats(url)
                rows, wall = asyncio.run(run_load(url, clients, args.duration))
                after = batch_stats(url)
                ok = [r for r in rows if r["status"] == 200]
                lat = [r["latency_s"] for r in ok]
                calls = after[1] - before[1]
                row = {
                    "mode": mode,
                    "batching": health["batching"],
                    "clients": clients,
                    "requests": len(ok),
                    "errors": len(rows) - len(ok),
                    "seconds": round(wall, 3),
                    "requests_per_s": round(len(ok) / wall, 3),
                    "questions_per_s": round(len(ok) * len(QUESTIONS) / wall, 3),
                    "latency_p50_s": round(percentile(lat, 0.50), 4),
                    "latency_p95_s": round(percentile(lat, 0.95), 4),
                    "latency_p99_s": round(percentile(lat, 0.99), 4),
                    "mean_batch_size": round((after[0] - before[0]) / calls, 3) if calls else None,
                }
                table.append(row)
                per_request += [{"mode": mode, "clients": clients, **r} for r in rows]
                print(f"  {mode:>13} {clients:>3} clients: {row['requests_per_s']:.2f} req/s", file=sys.stderr)
        finally:
            stop_server(proc)

    header = (
        f"{'mode':>13} {'clients':>7} {'req':>5} {'req/s':>7} {'q/s':>7} "
        f"{'p50 s':>7} {'p95 s':>7} {'p99 s':>7} {'batch':>6}"
    )
    print(header)
    print("-" * len(header))
    for r in table:
        batch = f"{r['mean_batch_size']:.1f}" if r["mean_batch_size"] else "-"
        print(
            f"{r['mode']:>13} {r['clients']:>7} {r['requests']:>5} "
            f"{r['requests_per_s']:>7.2f} {r['questions_per_s']:>7.2f} "
            f"{r['latency_p50_s']:>7.3f} {r['latency_p95_s']:>7.3f} {r['latency_p99_s']:>7.3f} {batch:>6}"
        )

    result = {
        "command": "HF_HUB_OFFLINE=1 .venv/bin/python " + " ".join(sys.argv),
        "config": {
            "clients": args.clients,
            "duration_s": args.duration,
            "modes": {m: MODES[m] for m in args.modes},
            "max_num_batched_tokens": args.max_num_batched_tokens,
            "questions_per_request": len(QUESTIONS),
            "states": len(STATES),
            "model": args.model or "default",
        },
        "metadata": run_metadata(),
        "environment": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpu_count": os.cpu_count(),
            **{pkg: version(pkg) for pkg in ("torch", "transformers", "fastapi", "uvicorn", "httpx")},
            "engine": described,
            # The machine may be shared: 1-minute load averages at the start and the end of the run.
            "load_average_1m": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        },
        "metrics": table,
        "requests": per_request,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
