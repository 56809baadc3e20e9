"""``logitjudge evaluate``'s bar without an engine that reports tokens, and in a log file (the bar
moving inside an engine call: ``tests/engine/test_counting_tokens.py``)."""

from __future__ import annotations

from types import SimpleNamespace

from logitjudge.cli.progress import ItemProgress


def test_a_judge_that_does_not_report_tokens_moves_the_bar_per_call():
    progress = ItemProgress(total=3, initial=1, pending=2, batch_size=8, disable=False)
    judge = SimpleNamespace(answer_many=lambda reqs: list(reqs))  # no planned_tokens/counting_tokens
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
