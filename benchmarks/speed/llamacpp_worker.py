"""llama.cpp side of ``benchmarks/speed/cpu_precision.py``: runs in its own venv (``make llamacpp-env``).

    .venv-llamacpp/bin/python benchmarks/speed/llamacpp_worker.py --gguf MODEL.gguf --threads 2

Reads one JSON request per stdin line, ``{"prefix": [ids], "branches": [[ids], ...]}`` (the exact
token ids logitjudge runs: the state, then each question's branch), and answers one JSON line:
``{"seconds": s, "logits": [[...], ...]}`` with, per branch, the next-token logits at its last
token for the ids in ``"read"`` (if given). The state is evaluated once; each question runs as a
copy of the state's sequence (``Llama.save_state`` / ``load_state``: the KV cache copied, as
llama.cpp's server does for a shared prompt), then its branch tokens. On EOF it prints
``{"maxrss_mb": ...}``. Uses llama-cpp-python only (no torch, no logitjudge).
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time

from llama_cpp import Llama


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n-ctx", type=int, default=8192)
    args = ap.parse_args()
    llm = Llama(
        model_path=args.gguf,
        n_ctx=args.n_ctx,
        n_threads=args.threads,
        n_threads_batch=args.threads,
        n_batch=512,
        verbose=False,
    )
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        read = req.get("read") or []
        t0 = time.perf_counter()
        llm.reset()
        llm.eval(req["prefix"])
        state = llm.save_state()
        logits = []
        for branch in req["branches"]:
            llm.load_state(state)
            llm.eval(branch)
            row = llm.scores[llm.n_tokens - 1]
            logits.append([float(row[i]) for i in read])
        seconds = time.perf_counter() - t0
        print(json.dumps({"seconds": seconds, "logits": logits}), flush=True)
    print(json.dumps({"maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}), flush=True)


if __name__ == "__main__":
    main()
