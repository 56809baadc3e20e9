"""GPU check: device, parity per dtype on the device, and timings of real-size random models.

::

    .venv/bin/python benchmarks/checks/gpu_check.py                      # CUDA: ~1B, ~4B, ~8B configs
    .venv/bin/python benchmarks/checks/gpu_check.py --device cpu         # CI: a tiny config, < 2 min
    benchmarks/checks/gpu_check.sh                                       # the whole check (pytest + this)

Steps:
1. Prints the device and library versions.
2. Parity on the device: tiny random Llama and Gemma 3 (sliding windows) models in fp32 and bf16;
   the engine's strategy (``auto``: FlexAttention on CUDA) and ``prefix_rows`` against separate
   passes, max |dp| against :func:`logitjudge.engine.core.tolerance_for` that dtype.
3. Measures the device's matmul rate (bf16 on CUDA; fp32 on CPUs, whose bf16 is emulated).
4. For each size, builds a random-weight model from an inline config of a real architecture (no
   download: speed does not depend on the values) and times (a) ``long``: a 32k-token state + 64
   questions, (b) ``short``: a ~300-token state + 6 questions. Reports tokens/s, latency p50/p95,
   peak memory and MFU = useful FLOPs / latency / measured matmul rate. Useful FLOPs count
   2 x non-embedding parameters per token plus attention over the keys each token may see (the
   block mask's allowed pairs, not the padded square).
5. Writes ``benchmarks/results/gpu-<date>.json`` (config, environment, parity, rate, metrics,
   per-run latencies) and prints a short table last.

A time budget (``--budget-s``, default 480 s) skips the remaining timings once spent, and says so.
The tokenizer is the default model's (converted locally from its GGUF file).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.append(str(ROOT / "benchmarks"))  # the result helper
from _results import run_metadata  # noqa: E402

from logitjudge.engine.core import Engine, tolerance_for  # noqa: E402
from logitjudge.engine.model import LoadedModel, convert_gguf  # noqa: E402
from logitjudge.engine.packaged import locate_packaged_gguf  # noqa: E402
from logitjudge.engine.types import EngineRequest, Option, Question  # noqa: E402
from logitjudge.settings import EMBEDDED_MODEL  # noqa: E402

# Inline configs of real architectures (shapes from their published config.json files).
CONFIGS: dict[str, dict[str, Any]] = {
    "tiny": dict(
        model_type="llama",
        vocab_size=49152,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=40960,
        tie_word_embeddings=True,
    ),
    # Llama 3.2 1B
    "1b": dict(
        model_type="llama",
        vocab_size=128256,
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=64,
        max_position_embeddings=131072,
        rope_theta=500000.0,
        tie_word_embeddings=True,
    ),
    # Qwen3 4B
    "4b": dict(
        model_type="qwen3",
        vocab_size=151936,
        hidden_size=2560,
        intermediate_size=9728,
        num_hidden_layers=36,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=40960,
        rope_theta=1000000.0,
        tie_word_embeddings=True,
    ),
    # Llama 3.1 8B
    "8b": dict(
        model_type="llama",
        vocab_size=128256,
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=131072,
        rope_theta=500000.0,
        tie_word_embeddings=False,
    ),
}

SENTENCE = "The support ticket describes a delayed lamp order, a cracked shade and a polite request for a replacement. "


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_memory_gib(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # process peak RSS (KiB -> GiB)


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def matmul_rate(device: torch.device, dtype: torch.dtype, n: int, repeats: int) -> float:
    """Measured dense matmul rate in FLOP/s: the median of ``repeats`` (n x n) @ (n x n) products."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(2):
        a @ b
    times = []
    for _ in range(repeats):
        sync(device)
        t0 = time.perf_counter()
        a @ b
        sync(device)
        times.append(time.perf_counter() - t0)
    return 2 * n**3 / statistics.median(times)


def build_model(size: str, device: torch.device, dtype: torch.dtype) -> Any:
    from transformers import AutoConfig, AutoModelForCausalLM

    spec = dict(CONFIGS[size])
    config = AutoConfig.for_model(spec.pop("model_type"), **spec)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model.eval().requires_grad_(False)


def engine_for(model: Any, tokenizer: Any, name: str, device: torch.device, dtype: torch.dtype, attn: str) -> Engine:
    lm = LoadedModel(model, tokenizer, name, f"config:{name}", device, dtype, f"random-{name}")
    return Engine(lm, attn=attn, max_request_tokens=1 << 20)


def state_of(tokenizer: Any, n_tokens: int) -> str:
    """A state of about ``n_tokens`` tokens (before the prompt template adds its own)."""
    ids = tokenizer(SENTENCE * (n_tokens // 15 + 2), add_special_tokens=False)["input_ids"][:n_tokens]
    return tokenizer.decode(ids)


def questions(n: int) -> tuple[Question, ...]:
    out = []
    for i in range(n):
        kind = ("noul", "choice", "score")[i % 3]
        if kind == "noul":
            out.append(
                Question(
                    "noul",
                    f"Check {i}: is the customer asking for a replacement?",
                    (Option("true", None), Option("false", None)),
                )
            )
        elif kind == "choice":
            out.append(
                Question(
                    "choice",
                    f"Check {i}: which team should handle it?",
                    tuple(Option(t, None) for t in ("Billing", "Shipping", "Support", "Tech")),
                )
            )
        else:
            out.append(
                Question(
                    "score",
                    f"Check {i}: how urgent is it?",
                    tuple(Option(str(k), lv) for k, lv in enumerate(("low", "medium", "high"))),
                )
            )
    return tuple(out)


def useful_flops(engine: Engine, plan: Any) -> float:
    """2 x non-embedding parameters per token + QK^T and PV over the allowed (query, key) pairs."""
    model, cfg = engine.lm.model, engine.lm.model.config
    params = sum(p.numel() for n, p in model.named_parameters() if "embed" not in n and "lm_head" not in n)
    S = len(plan.prefix)
    pairs = S * (S + 1) // 2
    for q in plan.questions:
        st = q.stem  # rotated views share their first st tokens, run once (QuestionPlan.stem)
        pairs += st * S + st * (st + 1) // 2
        for v in q.views:
            b = len(v.branch) - st + sum(len(lab) - 1 for lab in v.labels)
            pairs += b * (S + st) + b * (b + 1) // 2
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    attn = 4 * cfg.num_hidden_layers * cfg.num_attention_heads * head_dim * pairs
    return 2 * params * plan.n_tokens + attn


def time_scenario(engine: Engine, plan: Any, warmup: int, repeats: int) -> dict[str, Any]:
    device = engine.lm.device
    for _ in range(warmup):  # compiles FlexAttention for this shape, fills caches
        engine.run_plans([plan])
    reset_peak(device)
    lat = []
    for _ in range(repeats):
        sync(device)
        t0 = time.perf_counter()
        reads = engine.runner.run([plan], engine.strategy)
        engine.readout.log_probs(reads.hidden, reads.labels)
        sync(device)
        lat.append(time.perf_counter() - t0)
    p50 = statistics.median(lat)
    p95 = sorted(lat)[min(len(lat) - 1, round(0.95 * (len(lat) - 1)))]
    return {
        "tokens": plan.n_tokens,
        "questions": len(plan.questions),
        "paths": reads.paths,
        "latency_p50_ms": 1e3 * p50,
        "latency_p95_ms": 1e3 * p95,
        "tokens_per_s": plan.n_tokens / p50,
        "peak_memory_gib": peak_memory_gib(device),
        "flops": useful_flops(engine, plan),
        "latencies_ms": [1e3 * x for x in lat],
    }


def parity(tokenizer: Any, device: torch.device, attn: str) -> list[dict[str, Any]]:
    """Tiny Llama and Gemma 3 on the device, fp32 and bf16: strategies vs separate passes."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig, LlamaConfig, LlamaForCausalLM

    rows = []
    request = EngineRequest(state_of(tokenizer, 200), questions(6))
    for kind in ("llama", "gemma3"):
        for dtype in (torch.float32, torch.bfloat16):
            torch.manual_seed(0)
            if kind == "llama":
                model = LlamaForCausalLM(
                    LlamaConfig(
                        vocab_size=len(tokenizer),
                        hidden_size=64,
                        intermediate_size=128,
                        num_hidden_layers=2,
                        num_attention_heads=4,
                        num_key_value_heads=2,
                        max_position_embeddings=4096,
                        initializer_range=0.5,
                    )
                )
            else:
                model = Gemma3ForCausalLM(
                    Gemma3TextConfig(
                        vocab_size=len(tokenizer),
                        hidden_size=64,
                        intermediate_size=128,
                        num_hidden_layers=4,
                        num_attention_heads=4,
                        num_key_value_heads=2,
                        head_dim=16,
                        max_position_embeddings=4096,
                        sliding_window=16,
                        initializer_range=0.5,
                        layer_types=["sliding_attention", "full_attention"] * 2,
                    )
                )
            engine = engine_for(model.to(device, dtype).eval(), tokenizer, f"tiny-{kind}", device, dtype, attn)
            plan = engine.plan(request)
            ref = engine.run_plans([plan], "separate")[0]
            for strategy in (engine.strategy, "prefix_rows"):
                got = engine.run_plans([plan], strategy)[0]
                diff = max(
                    abs(a - b)
                    for x, y in zip(got.answers, ref.answers, strict=True)
                    for a, b in zip(x.probabilities, y.probabilities, strict=True)
                )
                tol = tolerance_for(dtype)
                rows.append(
                    {
                        "model": f"tiny-{kind}",
                        "dtype": str(dtype).replace("torch.", ""),
                        "attn": engine.attn,
                        "strategy": strategy,
                        "paths": engine.runner.run([plan], strategy).paths,
                        "max_dp": diff,
                        "tolerance": tol,
                        "ok": diff <= tol,
                    }
                )
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="auto", help="auto (cuda if present), cuda, cuda:N, cpu")
    p.add_argument(
        "--sizes",
        default=None,
        help="comma list of " + ", ".join(CONFIGS) + " (default: 1b,4b,8b on CUDA, tiny on CPU)",
    )
    p.add_argument("--attn", default="auto", help="attention for the timed engines (auto: flex on CUDA)")
    p.add_argument(
        "--long-tokens",
        type=int,
        default=None,
        help="state tokens of scenario long (default 32768; 1024 on CPU)",
    )
    p.add_argument("--long-questions", type=int, default=None, help="questions of scenario long (default 64; 8 on CPU)")
    p.add_argument("--short-tokens", type=int, default=300)
    p.add_argument("--short-questions", type=int, default=6)
    p.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="timed runs of short (default 30 on CUDA, 5 on CPU); long runs a third",
    )
    p.add_argument("--budget-s", type=float, default=480.0, help="skip remaining timings after this many seconds")
    p.add_argument("--skip-parity", action="store_true")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"), help="directory for gpu-<date>.json")
    args = p.parse_args(argv)
    t_start = time.perf_counter()

    device = torch.device(
        "cuda"
        if args.device == "auto" and torch.cuda.is_available()
        else ("cpu" if args.device == "auto" else args.device)
    )
    cuda = device.type == "cuda"
    sizes = (args.sizes or ("1b,4b,8b" if cuda else "tiny")).split(",")
    long_tokens = args.long_tokens or (32768 if cuda else 1024)
    long_questions = args.long_questions or (64 if cuda else 8)
    repeats = args.repeats or (30 if cuda else 5)
    dtype = (torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16) if cuda else torch.float32
    name = torch.cuda.get_device_name(device) if cuda else platform.processor() or platform.machine()
    env = {
        "device": str(device),
        "device_name": name,
        "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "cpu_threads": torch.get_num_threads(),
    }
    print(
        f"device: {device} ({name}); torch {env['torch']}, transformers {env['transformers']}, cuda {env['cuda']}",
        flush=True,
    )

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(convert_gguf(locate_packaged_gguf(EMBEDDED_MODEL)[0])))
    parity_rows = [] if args.skip_parity else parity(tokenizer, device, args.attn)
    for r in parity_rows:
        print(
            f"parity {r['model']:12s} {r['dtype']:8s} {r['attn']:14s} {r['strategy']:12s} max|dp| {r['max_dp']:.2e} "
            f"(tol {r['tolerance']:.0e}) {'ok' if r['ok'] else 'FAIL'}",
            flush=True,
        )

    rate = matmul_rate(device, dtype, 8192 if cuda else 1024, 20 if cuda else 5)
    print(f"matmul rate ({str(dtype).replace('torch.', '')}): {rate / 1e12:.1f} TFLOP/s", flush=True)

    scenarios = {"long": (long_tokens, long_questions), "short": (args.short_tokens, args.short_questions)}
    runs: list[dict[str, Any]] = []
    for size in sizes:
        if time.perf_counter() - t_start > args.budget_s:
            runs.append({"size": size, "skipped": "time budget spent"})
            continue
        reset_peak(device)
        t0 = time.perf_counter()
        model = build_model(size, device, dtype)
        engine = engine_for(model, tokenizer, size, device, dtype, args.attn)
        self_check = engine.self_check()  # on the device and dtype that would serve
        print(
            f"{size}: built in {time.perf_counter() - t0:.1f} s, attn {engine.attn}, strategy {engine.strategy}, "
            f"self-check max|dp| {self_check:.2e}",
            flush=True,
        )
        for scen, (n_state, n_q) in scenarios.items():
            if time.perf_counter() - t_start > args.budget_s:
                runs.append({"size": size, "scenario": scen, "skipped": "time budget spent"})
                continue
            plan = engine.plan(EngineRequest(state_of(tokenizer, n_state), questions(n_q)))
            n = repeats if scen == "short" else max(1, repeats // 3)
            m = time_scenario(engine, plan, warmup=2 if cuda else 1, repeats=n)
            m["mfu"] = m["flops"] / (m["latency_p50_ms"] / 1e3) / rate
            runs.append(
                {
                    "size": size,
                    "scenario": scen,
                    "dtype": str(dtype).replace("torch.", ""),
                    "attn": engine.attn,
                    "strategy": engine.strategy,
                    "self_check_max_dp": self_check,
                    **m,
                }
            )
            print(
                f"{size} {scen}: p50 {m['latency_p50_ms']:.1f} ms, {m['tokens_per_s']:.0f} tok/s, MFU {m['mfu']:.1%}",
                flush=True,
            )
        del engine, model
        if cuda:
            torch.cuda.empty_cache()

    ok = all(r["ok"] for r in parity_rows)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"gpu-{dt.date.today().isoformat()}{'' if cuda else '-cpu'}.json"
    report = {
        "command": " ".join(sys.argv),
        "metadata": run_metadata(str(device)),
        "env": env,
        "config": {
            **vars(args),
            "sizes": sizes,
            "long_tokens": long_tokens,
            "long_questions": long_questions,
            "repeats": repeats,
            "dtype": str(dtype),
        },
        "parity_ok": ok,
        "parity": parity_rows,
        "matmul_flops_per_s": rate,
        "runs": runs,
        "wall_s": time.perf_counter() - t_start,
    }
    path.write_text(json.dumps(report, indent=2))

    print(f"\nwrote {path}")
    print(
        f"{'size':6s} {'scenario':8s} {'tokens':>7s} {'p50 ms':>9s} {'p95 ms':>9s} {'tok/s':>10s} {'peak GiB':>9s} {'MFU':>7s}  path"
    )
    for r in runs:
        if "skipped" in r:
            print(f"{r['size']:6s} {r.get('scenario', '-'):8s} skipped: {r['skipped']}")
            continue
        print(
            f"{r['size']:6s} {r['scenario']:8s} {r['tokens']:7d} {r['latency_p50_ms']:9.1f} {r['latency_p95_ms']:9.1f} "
            f"{r['tokens_per_s']:10.0f} {r['peak_memory_gib']:9.2f} {r['mfu']:7.1%}  {','.join(sorted(set(r['paths'])))}"
        )
    print(f"parity: {'ok' if ok else 'FAILED'} ({len(parity_rows)} checks); wall {report['wall_s']:.0f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
