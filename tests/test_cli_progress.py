"""``logitjudge evaluate``'s bar moves inside an engine call (per decoder layer), not per batch."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from logitjudge.cli.progress import ItemProgress


class _Layer(torch.nn.Module):
    def forward(self, hidden):  # (batch, tokens, width)
        return hidden + 1


class _LM(torch.nn.Module):
    def __init__(self, n_layers: int = 4) -> None:
        super().__init__()
        self.model = SimpleNamespace(layers=torch.nn.ModuleList(_Layer() for _ in range(n_layers)))


class _Judge:
    """answer_many: one forward per request over its tokens, recording the bar after each."""

    default_rotations = 1

    def __init__(self, progress_ref: list[ItemProgress]) -> None:
        self.engine = SimpleNamespace(plan=lambda req: SimpleNamespace(n_tokens=req), lm=SimpleNamespace(model=_LM()))
        self.seen: list[float] = []
        self.progress_ref = progress_ref

    def answer_many(self, requests):
        for n in requests:
            hidden = torch.zeros(1, n, 2)
            for layer in self.engine.lm.model.model.layers:
                hidden = layer(hidden)
            self.seen.append(self.progress_ref[0].bar.n)
        return [f"result {n}" for n in requests]


def test_the_bar_moves_within_one_batch_and_lands_on_whole_items():
    ref: list[ItemProgress] = []
    judge = _Judge(ref)
    progress = ItemProgress(total=4, initial=0, pending=4, batch_size=4)
    ref.append(progress)
    wrapped = progress.wrap(judge)
    assert wrapped.default_rotations == 1  # everything else is forwarded
    out = wrapped.answer_many([10, 10, 10, 10])  # one call: the four items of one batch
    assert out == ["result 10"] * 4
    assert 0 < judge.seen[0] < judge.seen[1] < judge.seen[2] < 4  # moved before the call returned
    assert judge.seen[0] == 1.0  # a quarter of the tokens = one of four items
    for _ in range(4):
        progress.item_written()
    assert progress.bar.n == 4
    progress.close()


def test_without_hooks_the_bar_moves_per_call():
    progress = ItemProgress(total=3, initial=1, pending=2, batch_size=8, disable=False)
    judge = SimpleNamespace(answer_many=lambda reqs: list(reqs))  # no engine: nothing to hook
    assert progress.wrap(judge).answer_many([1, 2]) == [1, 2]
    assert progress.bar.n == 3
    progress.close()
    assert ItemProgress(1, 0, 1, 1, disable=True).wrap(judge) is judge


def _log_lines(monkeypatch, seconds_per_item: float) -> list[str]:
    """What a 5-item run writes to a non-terminal stderr, ``seconds_per_item`` apart on tqdm's clock."""
    import io
    import sys

    clock = [1000.0]
    monkeypatch.setattr("tqdm.std.time", lambda: clock[0])
    log = io.StringIO()  # isatty() is False
    monkeypatch.setattr(sys, "stderr", log)
    progress = ItemProgress(total=5, initial=0, pending=5, batch_size=1)
    for _ in range(5):
        clock[0] += seconds_per_item
        progress.item_written()
    progress.close()
    return [line for line in log.getvalue().replace("\r", "\n").splitlines() if line.strip()]


def test_a_log_file_gets_a_line_per_interval_and_one_final_line(monkeypatch):
    """Where stderr is not a terminal (a log, CI), updates within the interval write nothing, and
    the end writes one 100% line, not two."""
    quick = _log_lines(monkeypatch, 1.0)  # all five within one interval: the opening line and the end
    assert len(quick) == 2 and quick[-1].startswith("evaluate: 100%") and "5.0/5 items" in quick[-1]
    slow = _log_lines(monkeypatch, 40.0)  # each item past the interval: a line for items 1-4, then the end
    assert len(slow) == 6 and [line.split("|")[0] for line in slow[1:5]] == [
        f"evaluate: {p:3d}%" for p in (20, 40, 60, 80)
    ]
    assert sum("100%" in line for line in slow) == 1
