"""CPU precision modes side by side: fp32, mixed (the state in bf16), pure bf16 and llama.cpp.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/speed/cpu_precision.py --threads 2 \
        --shapes 266x6,2000x16,2000x64 --repeats 2 --llamacpp-no-extra-bufts

On the default model (``--model``), for each request shape (state tokens x questions, the question
mix of ``benchmarks/speed/speed.py``: noul, choice of 4, score of 4 in turn), every contender runs
the same request, interleaved round robin (a, b, c, d, a, ...) so the noise of this shared machine
falls on each alike, after one warm-up each; the best and the median of ``--repeats`` are kept:

- ``float32``: ``Engine(dtype="float32")``, every forward in fp32 (the exact reference);
- ``mixed``: ``Engine(dtype="mixed")`` on the same loaded weights: the state's forward in bf16
  (autocast), its KV cache upcast, questions and readout in fp32;
- ``bfloat16``: a bf16 copy of the weights, every forward in bf16 (``--no-bf16`` skips it);
- ``llama.cpp``: llama-cpp-python (``make llamacpp-env``) on the shipped GGUF the fp32 weights
  were dequantized from, the same token ids, the state evaluated once and each question run as a
  copy of the state's sequence (``benchmarks/speed/llamacpp_worker.py``); skipped when its venv
  is missing.

Ours is timed through ``Engine.run_batch`` (tokenization, planning, forward, readout) with the
state cache off (a state never seen). The precision contract: each mode's answers against fp32's
on the same requests (max and p99 |dp|), and isolation in mixed precision (``auto`` against
``separate`` in the same mode, the 1e-4 contract). Peak memory: each of our modes in a fresh
process (``--memory-probe``: load, one request of the largest shape, ``ru_maxrss``), llama.cpp's
worker at exit. Writes ``benchmarks/results/cpu-precision-<model>.{json,md}``.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
from speed import questions, round_robin_times, state_of

from logitjudge.engine.core import Engine
from logitjudge.engine.model import LoadedModel, load_model
from logitjudge.engine.packaged import locate_packaged_gguf
from logitjudge.engine.precision import cpu_has_native_bf16
from logitjudge.engine.types import EngineRequest
from logitjudge.settings import MAIN_MODEL

sys.path.append(str(Path(__file__).resolve().parents[1]))  # benchmarks/: the result helper
from _results import RESULTS, ROOT, run_metadata, write_result  # noqa: E402

LLAMACPP_PY = ROOT / ".venv-llamacpp" / "bin" / "python"


def engines(lm: LoadedModel, with_bf16: bool) -> dict[str, Engine]:
    """Our contenders over one fp32 load (plus a bf16 copy of the weights for pure bf16)."""
    out = {
        "float32": Engine(lm, dtype="float32", state_cache_mb=0),
        "mixed": Engine(lm, dtype="mixed", state_cache_mb=0),
    }
    if with_bf16:
        half = copy.deepcopy(lm.model).to(torch.bfloat16)
        lm16 = LoadedModel(half, lm.tokenizer, lm.name, lm.source, lm.device, torch.bfloat16, lm.fingerprint)
        out["bfloat16"] = Engine(lm16, dtype="bfloat16", state_cache_mb=0)
    return out


def llama_request(engine: Engine, request: EngineRequest) -> dict[str, Any]:
    """The token ids our plan runs: the state, then one branch per question view (a multi-token
    label adds its tokens but the last, as our rows do); ``read``: every single-token label."""
    plan = engine.plan(request)
    branches, read = [], set()
    for q in plan.questions:
        for view in q.views:
            branches.append(list(view.branch) + [t for lab in view.labels if len(lab) > 1 for t in lab[:-1]])
            read.update(lab[0] for lab in view.labels)
    return {"prefix": list(plan.prefix), "branches": branches, "read": sorted(read)}


class LlamaCpp:
    """The llama.cpp worker process (its own venv), one request per call."""

    def __init__(self, python: Path, gguf: Path, threads: int, extra: list[str]):
        worker = Path(__file__).with_name("llamacpp_worker.py")
        self.proc = subprocess.Popen(
            [str(python), str(worker), "--gguf", str(gguf), "--threads", str(threads), *extra],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert json.loads(self._line())["ready"]

    def _line(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the llama.cpp worker exited")
        return line

    def run(self, req: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        return json.loads(self._line())

    def close(self) -> float:
        """Ends the worker; its peak resident memory in MB."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        peak = json.loads(self._line())["maxrss_mb"]
        self.proc.wait(timeout=60)
        return float(peak)


def probabilities(result: Any) -> list[float]:
    return [p for a in result.answers for p in a.probabilities]


def diffs(a: list[float], b: list[float]) -> dict[str, float]:
    d = np.abs(np.asarray(a) - np.asarray(b))
    return {"max": float(d.max()), "p99": float(np.percentile(d, 99)), "mean": float(d.mean())}


def memory_probe(model: str, mode: str, shape: str, threads: int) -> None:
    """Load ``mode`` in this fresh process, answer one request, print the peak RSS (MB)."""
    torch.set_num_threads(threads)
    dtype = "bfloat16" if mode == "bfloat16" else mode
    lm = load_model(model, device="cpu", dtype=dtype)
    engine = Engine(lm, dtype=dtype, state_cache_mb=0)
    s, n = (int(x) for x in shape.split("x"))
    engine.run_batch([EngineRequest(state_of(engine, s), questions(n))])
    print(json.dumps({"maxrss_mb": peak_rss_mb()}))


def peak_rss_mb() -> float:
    """This process's peak resident memory in MB (``VmHWM``: per address space, so unlike
    ``ru_maxrss`` it does not carry a parent's peak over ``fork`` + ``exec``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def probe(model: str, mode: str, shape: str, threads: int) -> float:
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--model",
            model,
            "--memory-probe",
            mode,
            "--shapes",
            shape,
            "--threads",
            str(threads),
        ],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    return float(json.loads(out.stdout.strip().splitlines()[-1])["maxrss_mb"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=MAIN_MODEL)
    ap.add_argument("--shapes", default="266x6,2000x16,2000x64")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-bf16", action="store_true", help="skip pure bf16 (a second copy of the weights)")
    ap.add_argument("--no-llamacpp", action="store_true")
    ap.add_argument(
        "--llamacpp-no-extra-bufts",
        action="store_true",
        help="llama.cpp without its repacked/AMX weight layouts (see benchmarks/speed/llamacpp_worker.py)",
    )
    ap.add_argument("--no-memory", action="store_true", help="skip the peak-memory probes (one process each)")
    ap.add_argument("--memory-probe", default=None, help=argparse.SUPPRESS)
    ap.add_argument(
        "--memory-only",
        action="store_true",
        help="re-measure only the peak memory and update the result file's peak_rss_mb",
    )
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    if args.memory_probe:
        return memory_probe(args.model, args.memory_probe, args.shapes.split(",")[-1], args.threads)
    if args.memory_only:
        return memory_only(args)
    torch.set_num_threads(args.threads)
    lm = load_model(args.model, device="cpu", dtype="float32")
    ours = engines(lm, with_bf16=not args.no_bf16)
    ref = ours["float32"]
    llama = None
    if not args.no_llamacpp and LLAMACPP_PY.exists():
        gguf, _ = locate_packaged_gguf(args.model)
        llama = LlamaCpp(LLAMACPP_PY, gguf, args.threads, ["--no-extra-bufts"] if args.llamacpp_no_extra_bufts else [])
    rows, answers = [], {}
    for s, n in shapes:
        request = EngineRequest(state_of(ref, s), questions(n))
        fns: dict[str, Any] = {name: (lambda e=e, r=request: e.run_batch([r])[0]) for name, e in ours.items()}
        if llama is not None:
            lreq = llama_request(ref, request)
            fns["llama.cpp"] = lambda w=llama, r=lreq: w.run(r)
        for fn in fns.values():  # warm-up
            fn()
        got = {name: fn() for name, fn in fns.items() if name != "llama.cpp"}
        times = round_robin_times(fns, {k: args.repeats for k in fns})
        tokens = ref.plan(request).n_tokens
        row: dict[str, Any] = {"shape": f"{s}x{n}", "tokens": tokens}
        for name, t in times.items():
            row[name] = {"best_s": min(t), "median_s": statistics.median(t), "runs_s": t}
        base = row["float32"]["best_s"]
        for name in times:
            row[name]["speedup_vs_float32"] = base / row[name]["best_s"]
        fp = probabilities(got["float32"])
        row["vs_float32"] = {name: diffs(probabilities(r), fp) for name, r in got.items() if name != "float32"}
        mixed = ours["mixed"]
        plan = mixed.plan(request)
        sep = probabilities(mixed.run_plans([plan], "separate")[0])
        row["mixed_isolation"] = diffs(probabilities(mixed.run_plans([plan], "auto")[0]), sep)
        answers[row["shape"]] = {name: probabilities(r) for name, r in got.items()}
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "runs_s"}, default=str), flush=True)
    memory: dict[str, float] = {}
    if llama is not None:
        memory["llama.cpp"] = llama.close()
    if not args.no_memory:
        big = f"{shapes[-1][0]}x{shapes[-1][1]}"
        for mode in ours:
            memory[mode] = probe(args.model, mode, big, args.threads)
    n_params = sum(p.numel() for p in lm.model.parameters())
    metadata = run_metadata("cpu")
    record = {
        "metadata": {
            **metadata,
            "threads": args.threads,
            "cpu_native_bf16": cpu_has_native_bf16(),
            "llamacpp": None if llama is None else {"extra_bufts": not args.llamacpp_no_extra_bufts},
        },
        "model": lm.name,
        "cpu": metadata["device_name"],
        "rows": rows,
        "peak_rss_mb": memory,
        "weights_mb": {"float32": n_params * 4 / 2**20, "bfloat16": n_params * 2 / 2**20},
        "answers": answers,
    }
    write(record, args.out or RESULTS / f"cpu-precision-{lm.name}")


def write(record: dict[str, Any], out: Path) -> None:
    write_result(out.parent, out.name, record, markdown(record))
    print(markdown(record))


def memory_only(args: argparse.Namespace) -> None:
    """Each contender's peak memory on the largest shape, one fresh process each, into the result."""
    from logitjudge.engine.model import resolve_model

    _, name = resolve_model(args.model)
    out = args.out or RESULTS / f"cpu-precision-{name}"
    record = json.loads(Path(f"{out}.json").read_text())
    big = args.shapes.split(",")[-1]
    memory = {mode: probe(args.model, mode, big, args.threads) for mode in ("float32", "mixed", "bfloat16")}
    if not args.no_llamacpp and LLAMACPP_PY.exists():
        lm = load_model(args.model, device="cpu", dtype="float32")
        engine = Engine(lm, dtype="float32", state_cache_mb=0)
        s, n = (int(x) for x in big.split("x"))
        lreq = llama_request(engine, EngineRequest(state_of(engine, s), questions(n)))
        del engine, lm
        gguf, _ = locate_packaged_gguf(args.model)
        worker = LlamaCpp(LLAMACPP_PY, gguf, args.threads, ["--no-extra-bufts"] if args.llamacpp_no_extra_bufts else [])
        worker.run(lreq)
        memory["llama.cpp"] = worker.close()
    record["peak_rss_mb"] = memory
    write(record, out)


def markdown(record: dict[str, Any]) -> str:
    md = record["metadata"]
    names = [k for k in ("float32", "mixed", "bfloat16", "llama.cpp") if k in record["rows"][0]]
    lines = [
        f"# CPU precision modes: {record['model']}",
        "",
        f"{md['date']}, commit {str(md['git_sha'])[:10]}, {record['cpu']}, {md['threads']} threads, "
        f"native bf16: {md['cpu_native_bf16']}, torch {md['torch']}. Best of the round-robin runs (median in "
        "brackets), seconds per request; ratio = float32 / mode.",
        "",
        "| shape | tokens | " + " | ".join(names) + " |",
        "|---|---|" + "---|" * len(names),
    ]
    for r in record["rows"]:
        cells = [f"{r[n]['best_s']:.2f} ({r[n]['median_s']:.2f}) x{r[n]['speedup_vs_float32']:.2f}" for n in names]
        lines.append(f"| {r['shape']} | {r['tokens']} | " + " | ".join(cells) + " |")
    lines += ["", "Answers against float32 (|dp| over every option probability), and mixed isolation:", ""]
    lines += ["| shape | mode | max | p99 | mean |", "|---|---|---|---|---|"]
    for r in record["rows"]:
        for name, d in r["vs_float32"].items():
            lines.append(f"| {r['shape']} | {name} | {d['max']:.2e} | {d['p99']:.2e} | {d['mean']:.2e} |")
        d = r["mixed_isolation"]
        lines.append(f"| {r['shape']} | mixed: auto vs separate | {d['max']:.2e} | {d['p99']:.2e} | {d['mean']:.2e} |")
    if record["peak_rss_mb"]:
        lines += ["", "Peak resident memory (MB, one process each, largest shape):", ""]
        lines += ["| " + " | ".join(record["peak_rss_mb"]) + " |", "|" + "---|" * len(record["peak_rss_mb"])]
        lines.append("| " + " | ".join(f"{v:.0f}" for v in record["peak_rss_mb"].values()) + " |")
    w = record["weights_mb"]
    lines += [
        "",
        f"Weights: {w['float32']:.0f} MB in fp32; a bf16-only copy would hold {w['bfloat16']:.0f} MB "
        f"(saving {w['float32'] - w['bfloat16']:.0f} MB), at the price of bf16 rounding in every weight.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
