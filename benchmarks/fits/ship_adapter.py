"""Put a trained adapter folder into the package, its weights in bf16 (what `--adapters shipped` loads).

    python benchmarks/fits/ship_adapter.py --adapter OUT/chunk_support \
        [--to logitjudge/adapters/qwen2.5-coder-1.5b-instruct/chunk_support] [--report results/....md]

Writes ``adapter_config.json`` (unchanged), ``adapter_model.safetensors`` (each A and B rounded
to bf16: half the bytes; the engine and PEFT upcast them to the model's dtype when they load),
``logitjudge_adapter.json`` (the binding, with ``shipped``: the source folder as given, the
weights' dtype and the sha256 of the source's fp32 weights, as a part started from it records
its start: ``trained.init.sha256``) and ``CARD.md`` (the source's card
and a line saying so). The largest change of a weight (|bf16 - fp32| relative to the largest
|weight| of its tensor) is printed; the answers' change is measured by serving both folders.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from logitjudge.engine.adapters import ADAPTER_BINDING, ADAPTER_CONFIG, ADAPTER_WEIGHTS, read_weights, shipped_dir
from logitjudge.fit.adapter_parts import weights_sha256


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--adapter", type=Path, required=True, help="the folder `logitjudge fit --adapter` wrote")
    ap.add_argument("--to", type=Path, default=None, help="default: logitjudge/adapters/<model>/<name>")
    ap.add_argument("--report", default=None, help="the committed report of the adapter (cited in the card)")
    args = ap.parse_args(argv)

    binding = json.loads((args.adapter / ADAPTER_BINDING).read_text(encoding="utf-8"))
    out = args.to or shipped_dir() / binding["model"] / binding["name"]
    out.mkdir(parents=True, exist_ok=True)
    source = load_file(str(args.adapter / ADAPTER_WEIGHTS))
    pairs = read_weights(args.adapter)  # module path -> (A, B), as fit's binding hashes them
    digest = weights_sha256(pairs)
    rounded = {k: v.to(torch.bfloat16).contiguous() for k, v in source.items()}
    worst = max(float((rounded[k].float() - v.float()).abs().max() / v.float().abs().max()) for k, v in source.items())
    save_file(rounded, str(out / ADAPTER_WEIGHTS))
    shutil.copyfile(args.adapter / ADAPTER_CONFIG, out / ADAPTER_CONFIG)
    binding["shipped"] = {
        "from": str(args.adapter),
        "weights_dtype": "bfloat16",
        "source_sha256_float32": digest,
        **({"report": args.report} if args.report else {}),
    }
    (out / ADAPTER_BINDING).write_text(json.dumps(binding, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    card = (args.adapter / "CARD.md").read_text(encoding="utf-8").rstrip("\n")
    note = (
        f"\n\n## Shipped\n- weights rounded to bf16 from `{args.adapter}` (fp32 sha256 {digest[:16]}...); "
        f"largest change of a weight {worst:.2e} of its tensor's largest |weight|"
        + (f"\n- report: `{args.report}`" if args.report else "")
        + "\n"
    )
    (out / "CARD.md").write_text(card + note, encoding="utf-8")
    size = (out / ADAPTER_WEIGHTS).stat().st_size
    print(json.dumps({"to": str(out), "bytes": size, "largest_relative_change": worst}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
