"""``logitjudge fit --adapter``'s trainer on a tiny random-weight Llama: it learns a rule the base
model does not know (on its training rows, far below the zero-shot readout's log loss), the states' KV
come from the disk cache after the first epoch, a run stopped and resumed from its checkpoint
ends where an uninterrupted one does, only the adapter's A and B get gradients, and the folder it
writes serves the same answers in the engine and in PEFT."""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from logitjudge.engine.adapters import load_adapter
from logitjudge.engine.types import EngineRequest, Option, Question
from logitjudge.fit.adapters import AdapterTrainingConfig, held_out_report, held_out_split, train_adapter, write_adapter
from logitjudge.fit.examples import Example

peft = pytest.importorskip("peft")

QUESTION = Question("noul", "Is the colour warm?", (Option("true", None), Option("false", None)))


def examples() -> list[Example]:
    """36 states whose label is one word of the state (warm / cold), the rest varied filler: a rule
    the random base model does not follow and an adapter can learn; one group per state."""
    out = []
    for k in range(36):
        label = "true" if k % 2 else "false"
        word = "warm" if k % 2 else "cold"
        state = f"Tin {k * 7 % 31}, shelf {k % 5}: the paint is {word}; batch {k * 13 % 17}."
        out.append(Example(f"tin-{k}", f"g{k}", "colours", state, QUESTION, label))
    return out


CONFIG = AdapterTrainingConfig(rank=4, alpha=8, layers=0, lr=1e-2, epochs=4, batch_size=6, holdout=0.25)


@pytest.fixture
def engine(make_tiny):
    return make_tiny("llama", state_cache_mb=0)


def test_trains_resumes_and_writes_a_folder_peft_loads(engine, tmp_path):
    data = examples()
    steps: list[float] = []
    result = train_adapter(
        engine, data, CONFIG, evaluator="colours@1", work=tmp_path / "w", progress=lambda n, i: steps.append(i["loss"])
    )
    per_epoch = -(-result.trained["rows"] // 6)  # batches of 6
    assert len(steps) == 4 * per_epoch and result.trained["rows"] + result.metrics["rows"] == len(data)
    assert sum(steps[-per_epoch:]) < sum(steps[:per_epoch]) / 2  # the loss falls
    # on its training rows the adapter fits what the base model does not (a 2-layer random model
    # does not generalise a word to unseen states: held-out figures are reported, not asserted)
    train, _ = held_out_split(data, CONFIG.holdout, CONFIG.seed)
    fitted = held_out_report(engine, result.adapter, [data[i] for i in train], train, data, 0)
    assert fitted["log_loss"] < fitted["zero_shot"]["log_loss"] / 2
    assert fitted["accuracy"] > fitted["zero_shot"]["accuracy"]
    assert result.trained["kv_cache_bytes"] > 0 and len(result.trained["seconds_per_epoch"]) == 4
    assert not any(p.requires_grad for p in engine.lm.model.parameters())  # the base weights stay frozen

    # a run interrupted after its second step, then resumed, ends with the same weights
    calls = {"n": 0}

    def stop_once(n: int, info: dict) -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt

    cfg = replace(CONFIG, checkpoint_every=1)
    with pytest.raises(KeyboardInterrupt):
        train_adapter(engine, data, cfg, evaluator="colours@1", work=tmp_path / "r", progress=stop_once)
    resumed = train_adapter(engine, data, cfg, evaluator="colours@1", work=tmp_path / "r")
    whole = train_adapter(engine, data, cfg, evaluator="colours@1", work=tmp_path / "r2")
    # the same ids with other labels do not resume the finished run: it says so and trains anew
    flipped = [replace(e, label="false" if e.label == "true" else "true") for e in data]
    said: list[str] = []
    anew = train_adapter(engine, flipped, cfg, evaluator="colours@1", work=tmp_path / "r2", log=said.append)
    assert any("training anew" in line for line in said)
    path = next(iter(whole.adapter.weights))  # trained anew on the flipped labels: other weights
    assert not torch.allclose(anew.adapter.weights[path][1], whole.adapter.weights[path][1], atol=1e-4)
    again: list[str] = []
    train_adapter(engine, flipped, cfg, evaluator="colours@1", work=tmp_path / "r2", log=again.append)
    assert any(line.startswith("resuming") for line in again)
    # the same rows in other groups are split otherwise: another training set, not resumed
    regrouped = [replace(e, group=f"h{k % 9}") for k, e in enumerate(flipped)]
    assert held_out_split(regrouped, cfg.holdout, cfg.seed) != held_out_split(flipped, cfg.holdout, cfg.seed)
    moved: list[str] = []
    train_adapter(
        engine, regrouped, replace(cfg, epochs=1), evaluator="colours@1", work=tmp_path / "r2", log=moved.append
    )
    assert any("training anew" in line for line in moved)
    for path, (a, b) in whole.adapter.weights.items():
        assert torch.allclose(resumed.adapter.weights[path][0], a, atol=1e-6)
        assert torch.allclose(resumed.adapter.weights[path][1], b, atol=1e-6)

    folder = write_adapter(result, tmp_path / "out", data=["colours.jsonl"])
    assert (folder / "CARD.md").read_text().count("accuracy") >= 3
    loaded = load_adapter(folder, engine.lm.model)
    assert loaded.binding["evaluator"] == "colours@1" and loaded.name == "colours"
    engine.set_adapters([loaded])
    q = replace(QUESTION, adapter="colours")
    got = engine.run_batch([EngineRequest(data[0].state, (q,))])[0].answers[0].probabilities
    engine.set_adapters([])
    base = copy.deepcopy(engine.lm.model)
    in_peft = peft.PeftModel.from_pretrained(base, str(folder)).eval()
    plan = engine.plan(EngineRequest(data[0].state, (QUESTION,)))
    (view,) = plan.questions[0].views
    with torch.no_grad():
        last = in_peft(input_ids=torch.tensor([plan.prefix + view.branch]), alora_offsets=[len(view.branch)]).logits
    p = torch.softmax(torch.stack([last[0, -1, lab[0]] for lab in view.labels]).float(), 0)
    assert abs(float(p[view.option_index.index(0)]) - got[0]) <= 1e-4


def _faithfulness_rows(tmp_path, n: int = 16, first: int = 0, name: str = "rows.jsonl") -> Path:
    """``n`` faithfulness rows (depot k is in Leeds, or is said to be in Paris) as JSONL."""
    rows = []
    for k in range(first, first + n):
        ok = k % 2 == 0
        rows.append(
            {
                "id": f"r{k}",
                "input": f"Where is depot {k}?",
                "output": f"Depot {k} is in {'Leeds' if ok else 'Paris'}.",
                "context": [f"Depot {k} opened in Leeds in {1990 + k}."],
                "gold": {"faithful": ok},
            }
        )
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_fit_adapter_command_then_evaluate_reads_it(tmp_path, capsys):
    """``logitjudge fit --adapter`` on the embedded 135M, with training-only rows beside the rows,
    writes a folder bound to faithfulness@2 (the held-out rows are those of a run without them), and
    ``evaluate --adapters`` answers that evaluator with it: its scores move from a plain run's."""
    from logitjudge.cli import main

    path = _faithfulness_rows(tmp_path)
    more = _faithfulness_rows(tmp_path, n=3, first=100, name="more.jsonl")  # 3 new depots, and a row
    more.write_text(more.read_text() + path.read_text().splitlines()[5] + "\n")  # the rows hold: trains once
    fit = ["fit", str(path), "--evaluator", "faithfulness", "--label-key", "faithful", "--adapter"]
    fit += ["--out", str(tmp_path / "adapters"), "--model", "smollm2-135m", "--rank", "2", "--adapt-layers", "2"]
    fit += ["--branches-per-step", "4", "--holdout", "0.25", "--dtype", "float32", "--train-rows", str(more)]
    assert main(fit) == 0
    out = json.loads(capsys.readouterr().out)
    folder = tmp_path / "adapters" / "faithfulness"
    assert out["adapter"] == str(folder) and out["trained"]["rows"] == 12 + 3 and out["metrics"]["rows"] == 4
    assert out["trained"]["train_only"] == {"rows": 3, "left_out_held_out_group": 0, "left_out_duplicate": 1}
    assert "3 of them training-only rows" in (folder / "CARD.md").read_text(encoding="utf-8")
    binding = json.loads((folder / "logitjudge_adapter.json").read_text())
    assert binding["evaluator"] == "faithfulness@2" and binding["question_type"] == "noul"

    def evaluate(*extra: str) -> list[dict]:
        res = tmp_path / f"res{len(extra)}.jsonl"
        argv = ["evaluate", str(path), "--evaluators", "faithfulness", "--out", str(res), "--model", "smollm2-135m"]
        assert main([*argv, "--dtype", "float32", *extra]) == 0
        return [json.loads(line) for line in res.read_text().splitlines()]

    adapted, plain = evaluate("--adapters", str(folder)), evaluate()
    assert len(adapted) == len(plain) == 16
    moved = [
        abs(a["results"]["faithfulness"]["score"] - p["results"]["faithfulness"]["score"])
        for a, p in zip(adapted, plain)
    ]
    assert max(moved) > 1e-3


def test_a_stopped_fit_adapter_command_checkpoints_and_resumes_with_other_epochs(tmp_path):
    """SIGTERM (``kill``, a scheduler's stop) during ``fit --adapter`` ends the run after the step
    it is in with a checkpoint and exit 130, as Ctrl-C does; the same command with another
    ``--epochs`` resumes it and says so."""
    path, work = _faithfulness_rows(tmp_path), tmp_path / "work"
    fit = [sys.executable, "-m", "logitjudge.cli", "fit", str(path), "--evaluator", "faithfulness"]
    fit += ["--label-key", "faithful", "--adapter", "--out", str(tmp_path / "adapters"), "--work", str(work)]
    fit += ["--model", "smollm2-135m", "--rank", "2", "--adapt-layers", "2", "--branches-per-step", "4"]
    fit += ["--holdout", "0.25", "--dtype", "float32", "--report-rows", "2"]
    log = tmp_path / "stderr.txt"
    with log.open("w") as stderr:
        proc = subprocess.Popen([*fit, "--epochs", "500"], stderr=stderr)
        deadline = time.monotonic() + 600
        while not any((work / "kv").glob("*")) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)  # the first step is storing a state's KV: training runs, the handler is set
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=600)
    err = log.read_text()
    assert proc.returncode == 130, err[-2000:]
    assert "stopping after this step" in err
    assert f"interrupted: the checkpoint in {work} resumes this run" in err
    done = torch.load(work / "checkpoint.pt", weights_only=False)["state"]["epoch"]
    resumed = subprocess.run([*fit, "--epochs", str(done + 1)], capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming from" in resumed.stderr
    assert f"made for 500 epochs, this run asks for {done + 1}" in resumed.stderr
    assert json.loads(resumed.stdout)["trained"]["epochs"] == done + 1
    assert os.path.exists(tmp_path / "adapters" / "faithfulness" / "CARD.md")


def test_a_branch_started_at_the_first_adapted_layer_equals_the_full_forward(engine, tmp_path):
    """Later epochs start each branch at the lowest adapted layer from what the first epoch kept
    there: the same label logits as the full forward (1e-5), so they train the same adapter."""
    from logitjudge.engine.adapters import BranchAdapter
    from logitjudge.fit.adapter_steps import KVStore, branch_logits, branch_rows, lora_parameters, state_kv

    params = lora_parameters(engine.lm.model, replace(CONFIG, layers=1), 0)
    assert {p.split(".layers.")[1].split(".")[0] for p in params} == {"1"}
    torch.manual_seed(1)
    weights = {p: (a.detach(), torch.randn(b.shape) * 0.5) for p, (a, b) in params.items()}
    engine.set_adapters([BranchAdapter("t", weights, 2.0, (0,))])
    rows = branch_rows(engine, examples()[:5])
    store = KVStore(tmp_path, ("test",))
    kvs = [state_kv(engine, r.prefix, store) for r in rows]
    kept: dict[int, torch.Tensor] = {}
    full = branch_logits(engine, rows, kvs, 0, first=1, keep_stem=lambda b, h: kept.__setitem__(b, h.clone()))
    started = branch_logits(engine, rows, kvs, 0, first=1, stems=[kept[b] for b in range(len(rows))])
    base = branch_logits(engine, rows, kvs, -1)
    engine.set_adapters([])
    for a, b, c in zip(full, started, base):
        assert torch.allclose(a, b, atol=1e-5)
        assert not torch.allclose(a, c, atol=1e-3)  # the adapter is in both


def test_the_rate_warms_up_then_decays_to_zero():
    from logitjudge.fit.adapter_steps import learning_rate

    cfg = AdapterTrainingConfig(lr=1e-3, warmup=0.1)
    rates = [learning_rate(cfg, s, 100) for s in range(100)]
    assert rates[0] == pytest.approx(1e-4) and rates[9] == pytest.approx(1e-3)  # 10 warm-up steps
    assert max(rates) == pytest.approx(1e-3) and rates[99] == pytest.approx(1e-3 / 90)
    assert all(a >= b for a, b in zip(rates[9:], rates[10:], strict=False))  # then falls, linearly
    assert learning_rate(AdapterTrainingConfig(lr=1e-3, warmup=0.0), 0, 10) == pytest.approx(1e-3)


def test_a_sliding_window_model_is_refused_before_training(make_tiny, tmp_path):
    """Gemma 3's sliding layers keep the last 15 positions of a state: the branches' forward needs
    every position, so training is refused before it starts, with a message that says why."""
    engine = make_tiny("gemma3", state_cache_mb=0)
    with pytest.raises(ValueError, match="sliding-window attention"):
        train_adapter(engine, examples(), CONFIG, evaluator="colours@1", work=tmp_path / "w")
    assert not (tmp_path / "w" / "kv").exists() and not engine.runner.adapters.names


@pytest.mark.parametrize(("model", "dtype"), [("llama", "float32"), ("llama", "mixed")])
def test_a_state_continued_from_the_shared_start_equals_its_own_forward(make_tiny, tmp_path, model, dtype):
    """The first epoch runs the start every state shares once and continues its KV over each
    state: the keys and values the full forward of each state gives. In fp32, up to one bf16
    rounding step of the stored KV. In mixed precision (the state in bf16) the matrix products
    round in bf16 too, and on a CPU with native bf16 their blocking differs between the one
    forward and the two: a few bf16 steps on about 1% of the values, measured on AVX512-BF16 (0.06
    where the bf16 forward is 0.8 from fp32's). So in mixed precision the continuation must be
    within one bf16 step or within a quarter of bf16's own error against an fp32 forward of the
    same weights (itself under a tenth of the keys' scale); a wrong position or a missing start
    would move the keys by their own scale (about 14), far more."""
    from logitjudge.fit.adapter_steps import KVStore, branch_rows, shared_start, state_kv

    engine = make_tiny(model, state_cache_mb=0, dtype=dtype)
    reference = make_tiny(model, state_cache_mb=0, dtype="float32") if dtype == "mixed" else None
    rows = branch_rows(engine, examples()[:6])
    start = shared_start(engine, rows)
    assert start is not None and 0 < len(start.ids) < min(len(r.prefix) for r in rows)
    assert all(r.prefix[: len(start.ids)] == start.ids for r in rows)
    assert any(r.prefix[len(start.ids)] != rows[0].prefix[len(start.ids)] for r in rows)  # the longest
    for r in rows:
        full = state_kv(engine, r.prefix, KVStore(tmp_path / "full", ("t",)))
        continued = state_kv(engine, r.prefix, KVStore(tmp_path / "continued", ("t",)), start)
        fp32 = full if reference is None else state_kv(reference, r.prefix, KVStore(tmp_path / "fp32", ("t",)))
        assert len(full) == len(continued) == len(fp32)
        for (k0, v0), (k1, v1), (k2, v2) in zip(full, continued, fp32):
            assert k0.shape == k1.shape == (k0.shape[0], len(r.prefix), k0.shape[2])
            for a, b, ref in ((k0, k1, k2), (v0, v1, v2)):
                a, b, ref = a.float(), b.float(), ref.float()
                one_step = torch.allclose(a, b, rtol=2**-7, atol=1e-5)
                bf16_error = (a - ref).abs().max()
                assert bf16_error < 0.1 * a.abs().max()  # the bound below stays far under the keys' scale
                assert one_step or (reference is not None and (a - b).abs().max() <= 0.25 * bf16_error)
                assert (a != b).float().mean() < 0.02  # most are bit-identical
    assert shared_start(engine, rows[:1]) is not None  # one state: all but its last token


def test_a_resumed_run_may_change_its_epochs_and_records_it(engine, tmp_path):
    """A run stopped in its second epoch of a 4-epoch schedule, resumed with 3 epochs: it says so,
    trains 3 epochs in all, records from which global step the 3-epoch schedule applies (the card
    shows it); a checkpoint with more done than a run asks for (3 epochs and a step, for 3) is
    refused; a change asked and undone before any step leaves no trace."""
    data = examples()
    per_epoch = -(-len(held_out_split(data, CONFIG.holdout, CONFIG.seed)[0]) // CONFIG.batch_size)

    def stop_at(n_steps: int):
        calls = {"n": 0}

        def progress(n: int, info: dict) -> None:
            calls["n"] += 1
            if calls["n"] == n_steps:
                raise KeyboardInterrupt

        return progress

    cfg, work = replace(CONFIG, checkpoint_every=1), tmp_path / "w"
    with pytest.raises(KeyboardInterrupt):
        train_adapter(engine, data, cfg, evaluator="colours@1", work=work, progress=stop_at(per_epoch + 2))
    said: list[str] = []
    result = train_adapter(engine, data, replace(cfg, epochs=3), evaluator="colours@1", work=work, log=said.append)
    assert any(line.startswith("resuming") for line in said)
    assert any("made for 4 epochs, this run asks for 3" in line for line in said)
    assert result.trained["epochs_from_step"] == [[0, 4], [per_epoch + 2, 3]]
    assert len(result.trained["seconds_per_epoch"]) == 3
    card = (write_adapter(result, tmp_path / "out") / "CARD.md").read_text()
    assert f"epochs 3 (started for 4 epochs; 3 from step {per_epoch + 2})" in card
    with pytest.raises(ValueError, match="has trained 3 epochs and 0 steps: ask for at least 3"):
        train_adapter(engine, data, replace(cfg, epochs=2), evaluator="colours@1", work=work)

    # one step into epoch 4 of 4, then asked for 3: refused (it would train nothing and say "3 epochs")
    again = tmp_path / "again"
    with pytest.raises(KeyboardInterrupt):
        train_adapter(engine, data, cfg, evaluator="colours@1", work=again, progress=stop_at(3 * per_epoch + 1))
    with pytest.raises(ValueError, match="has trained 3 epochs and 1 steps: ask for at least 4"):
        train_adapter(engine, data, replace(cfg, epochs=3), evaluator="colours@1", work=again)
    # resumed for 6 epochs and stopped at once, before a step (a second Ctrl-C), then resumed for
    # 4: the history is as if 6 was never asked
    saved = torch.load(again / "checkpoint.pt", weights_only=False)
    saved["state"]["epochs"].append([3 * per_epoch + 1, 6])
    torch.save(saved, again / "checkpoint.pt")
    back = train_adapter(engine, data, cfg, evaluator="colours@1", work=again)
    assert back.trained["epochs_from_step"] == [[0, 4]]


def test_training_only_rows_never_move_or_join_the_held_out_rows():
    """Extra examples train beside the examples; the held-out part is the one the examples alone
    give, and an extra of a held-out group (a leak) or of a key already present is left out."""
    from logitjudge.fit.adapter_steps import split_with_train_only

    data = examples()
    train, test = held_out_split(data, 0.25, 0)
    fresh = [replace(e, key=f"crate-{k}", group=f"c{k}", source="crates") for k, e in enumerate(data[:5])]
    leak, dup = replace(data[test[0]], key="leak"), data[train[0]]
    same_key = replace(data[train[1]], state="Crate 9: the paint is warm.", label="true")  # an id-less row: another
    kept, tr, held, counts = split_with_train_only(data, [*fresh, leak, dup, fresh[0], same_key], 0.25, 0)
    assert held == test and tr[: len(train)] == train
    assert [kept[i] for i in tr[len(train) :]] == [*fresh, same_key]
    assert counts == {"rows": 6, "left_out_held_out_group": 1, "left_out_duplicate": 2}
    assert not {kept[i].group for i in tr} & {kept[i].group for i in held}


def test_training_only_rows_without_adapter_are_refused(tmp_path, capsys):
    from logitjudge.cli import main

    path = _faithfulness_rows(tmp_path)
    argv = ["fit", str(path), "--evaluator", "faithfulness", "--label-key", "faithful", "--out", str(tmp_path / "o")]
    assert main([*argv, "--train-rows", str(path)]) == 2
    assert "--train-rows" in capsys.readouterr().err and not (tmp_path / "o").exists()
    for extra, flag in (
        (["--init-adapter", str(tmp_path)], "--init-adapter"),
        (["--train-part", "1/2"], "--train-part"),
    ):
        assert main([*argv, *extra]) == 2
        assert flag in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:  # argparse: exit 2 with the rule in its usage message
        main([*argv, "--adapter", "--train-part", "3/2"])
    assert exited.value.code == 2
    assert "1 <= K <= N" in capsys.readouterr().err
    # rows whose label is under another gold field: the message says which flag names it
    assert main(["fit", str(path), "--evaluator", "faithfulness", "--out", str(tmp_path / "o")]) == 2
    assert "--label-key names the gold field" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_a_pass_in_parts_each_started_from_the_last_adapter(engine, tmp_path, monkeypatch):
    """``--train-part k/n`` deals the training rows into disjoint parts (the held-out rows stay);
    ``--init-adapter`` starts from a written adapter's exact weights, records it, and refuses one
    of another rank or question."""
    from logitjudge.engine.adapters import ADAPTER_BINDING
    from logitjudge.fit.adapter_parts import check_init_folder, training_part

    data = examples()
    train, test = held_out_split(data, CONFIG.holdout, CONFIG.seed)
    parts = [training_part(train, (k, 3), 0) for k in (1, 2, 3)]
    assert sorted(sum(parts, [])) == train and max(map(len, parts)) - min(map(len, parts)) <= 1
    cfg = replace(CONFIG, epochs=1, part=(1, 2))
    first = train_adapter(engine, data, cfg, evaluator="colours@1", work=tmp_path / "w1")
    assert first.trained["rows"] == len(training_part(train, (1, 2), 0)) and first.metrics["rows"] == len(test)
    folder = write_adapter(first, tmp_path / "a1")

    # at rate 0 the second part ends where it started: exactly the first part's adapter
    still = train_adapter(
        engine, data, replace(cfg, part=(2, 2), init=str(folder), lr=0.0), evaluator="colours@1", work=tmp_path / "w2"
    )
    for path, (a, b) in first.adapter.weights.items():
        assert torch.equal(still.adapter.weights[path][0], a) and torch.equal(still.adapter.weights[path][1], b)
    monkeypatch.chdir(tmp_path)  # the binding keeps --init-adapter's folder as given: relative here
    relative = folder.relative_to(tmp_path)
    second = train_adapter(
        engine, data, replace(cfg, part=(2, 2), init=str(relative)), evaluator="colours@1", work=tmp_path / "w3"
    )
    assert any(not torch.equal(second.adapter.weights[p][1], b) for p, (_, b) in first.adapter.weights.items())
    folder2 = write_adapter(second, tmp_path / "a2")
    binding = json.loads((folder2 / ADAPTER_BINDING).read_text())
    init = binding["trained"]["init"]
    assert init["rows"] == first.trained["rows"] and init["part"] == [1, 2] and init["path"] == str(relative)
    assert init["split_sha256"] == first.trained["split_sha256"] and init["sources"] == ["colours"]
    assert init["sha256"] == still.trained["init"]["sha256"] and binding["trained"]["part"] == [2, 2]
    card = (tmp_path / "a2" / "colours" / "CARD.md").read_text()
    assert f"part 2 of 2 of the training rows; started from `{relative}`" in card

    # the parts of one pass: the same split, the same N, each part once
    for other, why in (
        (
            replace(cfg, part=(1, 2)),
            "part 1 of 2 has trained already in pass 1; part 2 of 2 has not trained in pass 1 yet",
        ),
        (replace(cfg, part=(2, 3)), "a part of 2, this run a part of 3"),
        (replace(cfg, part=(2, 2), holdout=0.3), "other training or held-out rows"),
    ):
        with pytest.raises(ValueError, match=why):
            train_adapter(engine, data, replace(other, init=str(folder)), evaluator="colours@1", work=tmp_path / "z")
    assert not (tmp_path / "z").exists()  # refused before anything is written
    # once every part has trained, a next pass may start: its part 1 again, its rows in another order
    again = train_adapter(
        engine, data, replace(cfg, part=(1, 2), init=str(folder2)), evaluator="colours@1", work=tmp_path / "w4"
    )
    assert again.trained["pass"] == 2 and again.trained["init"]["pass"] == 1 and first.trained["pass"] == 1
    assert again.trained["rows"] == first.trained["rows"]
    folder3 = write_adapter(again, tmp_path / "a3")
    assert (
        "part 1 of 2 of the training rows, pass 2; started from"
        in (tmp_path / "a3" / "colours" / "CARD.md").read_text()
    )
    with pytest.raises(
        ValueError, match="part 1 of 2 has trained already in pass 2; part 2 of 2 has not trained in pass 2 yet"
    ):
        train_adapter(
            engine,
            data,
            replace(cfg, part=(1, 2), init=str(folder3)),
            evaluator="colours@1",
            work=tmp_path / "z",
        )
    # what the folder's files can tell is checked before a model loads (fit's CLI does it first)
    check_init_folder(folder, cfg, "colours@1")
    for other, evaluator, why in (
        (replace(cfg, rank=2, alpha=4), "colours@1", "rank 4, scaling 2; this run: rank 2, scaling 2"),
        (cfg, "colours@2", "trained for colours@1, this run trains colours@2"),
        (replace(cfg, layers=1), "colours@1", "adapts every layer, this run the top 1 layers"),
    ):
        with pytest.raises(ValueError, match=why):
            check_init_folder(folder, other, evaluator)
    with pytest.raises(ValueError, match="3 training rows cannot make 4 parts"):
        training_part([0, 1, 2], (4, 4), 0)

    with pytest.raises(ValueError, match="--init-adapter .* rank 4, .* rank 2"):
        train_adapter(
            engine, data, replace(cfg, rank=2, alpha=4, init=str(folder)), evaluator="colours@1", work=tmp_path / "x"
        )
    with pytest.raises(ValueError, match="trained for colours@1, this run trains colours@2"):
        train_adapter(engine, data, replace(cfg, init=str(folder)), evaluator="colours@2", work=tmp_path / "y")
