"""llama.cpp side of ``benchmarks/speed/cpu_precision.py``: runs in its own venv (``make llamacpp-env``).

    .venv-llamacpp/bin/python benchmarks/speed/llamacpp_worker.py --gguf MODEL.gguf --threads 2

Reads one JSON request per stdin line, ``{"prefix": [ids], "branches": [[ids], ...]}`` (the exact
token ids logitjudge runs: the state, then each question's branch), and answers one JSON line:
``{"seconds": s, "logits": [[...], ...]}`` with, per branch, the next-token logits at its last
token for the ids in ``"read"`` (if given). The state is evaluated once; each question runs as a
copy of the state's sequence (``Llama.save_state`` / ``load_state``: the KV cache copied, as
llama.cpp's server does for a shared prompt), then its branch tokens. On EOF it prints
``{"maxrss_mb": ...}`` (peak resident memory, ``VmHWM``). Uses llama-cpp-python only (no torch, no logitjudge).

``--no-extra-bufts`` loads the weights without llama.cpp's extra buffer types (the repacked and
AMX layouts): on a VM whose AMX tiles are not usable a source build with ``GGML_NATIVE`` crashes
(segmentation fault) on the first multi-token batch, and this is the way around it, at some cost
in llama.cpp's prompt speed. The result records which was used.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time

import llama_cpp
import numpy as np
from llama_cpp import Llama


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n-ctx", type=int, default=8192)
    ap.add_argument("--no-extra-bufts", action="store_true")
    args = ap.parse_args()
    if args.no_extra_bufts:
        default_params = llama_cpp.llama_model_default_params

        def plain_params():  # what Llama() starts from, with use_extra_bufts off
            params = default_params()
            params.use_extra_bufts = False
            return params

        llama_cpp.llama_cpp.llama_model_default_params = plain_params
        llama_cpp.llama.llama_cpp.llama_model_default_params = plain_params
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
            row = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),))  # the last token's
            logits.append([float(row[i]) for i in read])
        seconds = time.perf_counter() - t0
        print(json.dumps({"seconds": seconds, "logits": logits}), flush=True)
    print(json.dumps({"maxrss_mb": peak_rss_mb()}), flush=True)


def peak_rss_mb() -> float:
    """This process's peak resident memory (``VmHWM``: per address space, so unlike ``ru_maxrss``
    it does not carry the parent's peak over ``fork`` + ``exec``)."""
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


if __name__ == "__main__":
    main()
