"""A random-weight activated-LoRA folder saved by PEFT itself, with our binding: what the adapter
tests serve, so a folder's making is written once."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import torch

from logitjudge.engine.adapters import ADAPTER_BINDING


def peft_folder(model: Any, folder: Path, *, name: str, evaluator: str, seed: int) -> Path:
    """Save a rank-4 aLoRA of ``model`` (q_proj, v_proj, down_proj; random A and B, seeded) with
    ``peft.get_peft_model(...).save_pretrained`` into ``folder`` and bind it to ``evaluator``
    under ``name`` (``logitjudge_adapter.json``). ``model`` is not changed."""
    import peft

    torch.manual_seed(seed)
    config = peft.LoraConfig(
        r=4,
        lora_alpha=8,
        target_modules=["q_proj", "v_proj", "down_proj"],
        init_lora_weights=False,
        alora_invocation_tokens=[1, 2],  # not searched for by the engine; PEFT needs some
        task_type="CAUSAL_LM",
    )
    peft.get_peft_model(copy.deepcopy(model), config).save_pretrained(str(folder))
    (folder / ADAPTER_BINDING).write_text(json.dumps({"format": 1, "name": name, "evaluator": evaluator}))
    return folder
