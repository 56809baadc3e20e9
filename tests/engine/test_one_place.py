"""Final option probabilities come from one place, ``logitjudge.engine.readout`` and the formulas
it is made of, ``logitjudge.engine.formulas``.

- The softmax family (``np.exp``, ``torch.softmax``, ``log_softmax``, ``logsumexp`` ...) is
  implemented or called nowhere in ``logitjudge/`` but ``engine/readout.py`` and
  ``engine/formulas.py`` (a source scan). Regression: calibration re-did a softmax in numpy and a
  hand-written log-sum-exp; the rubrics took a sigmoid as a torch softmax of ``(z, 0)``.
- A noul's yes/no pair is rebuilt from the wire ``noul`` = P(yes) only by
  ``engine.answers.noul_distribution``. Regression: rubric scoring built ``{"yes": p, "no": 1 - p}``
  in three places, calibration samples ``(p, 1.0 - p)`` in three more.
- A calibrated engine's answers are the readout stage applied to the label scores, computed here
  directly: for one view ``softmax(score / T + b)`` over the question's own label log-probs.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from logitjudge.engine import formulas, readout
from logitjudge.engine.answers import noul_distribution
from logitjudge.engine.calibration import Calibration, Scaling
from logitjudge.engine.types import EngineRequest, Option, Question

PACKAGE = Path(__file__).resolve().parents[2] / "logitjudge"
THE_PLACE = PACKAGE / "engine" / "readout.py"
FORMULAS = PACKAGE / "engine" / "formulas.py"

# An implementation or a library call of the softmax family: exp (of numpy, torch, math, scipy,
# or as a tensor method), softmax, log_softmax, logsumexp, logaddexp, and scipy.special. A call
# of the formulas (``readout.softmax(...)``, ``logsumexp(...)`` imported from formulas) is
# not an implementation and is allowed.
FORBIDDEN = [
    re.compile(
        r"\b(np|numpy|torch|math|scipy|special|F|functional)\.(exp|expm1|softmax|log_softmax|logsumexp|logaddexp)\b"
    ),
    re.compile(r"(?<!\breadout)\.(exp|softmax|log_softmax|logsumexp)\("),
    re.compile(r"\bscipy\.special\b|\bfrom scipy import special\b"),
    re.compile(r"\bfrom (torch|numpy|scipy\.special|torch\.nn\.functional) import .*\b(softmax|logsumexp|exp)\b"),
    re.compile(r"\blog_softmax\b"),
]


def _hits(text: str) -> list[str]:
    lines = enumerate(text.splitlines(), 1)
    return [f"{n}: {line.strip()}" for n, line in lines if any(p.search(line) for p in FORBIDDEN)]


def test_the_softmax_family_lives_only_in_readout():
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path in (THE_PLACE, FORMULAS):
            continue
        hits = _hits(path.read_text(encoding="utf-8"))
        if hits:
            found[str(path.relative_to(PACKAGE))] = hits
    assert found == {}, f"softmax / log-sum-exp outside engine/readout.py and engine/formulas.py: {found}"
    # the scan would see them: the formulas hold them
    assert _hits(FORMULAS.read_text(encoding="utf-8"))
    assert readout.softmax is formulas.softmax and readout.scale is formulas.scale  # one implementation


def test_the_scan_catches_the_old_calibration_code():
    old = "z = np.exp(z - z.max())\nlse = zmax[:, 0] + np.log(np.exp(z - zmax).sum(1))\np = torch.softmax(s, 0)\n"
    assert len(_hits(old)) == 3
    assert _hits("x = s.logsumexp(-1)") and _hits("from scipy.special import softmax")
    assert not _hits("lse = readout.logsumexp(t, dim=1)") and not _hits("lse = logsumexp(t, dim=1)")


def test_noul_yes_no_is_rebuilt_only_by_noul_distribution():
    assert noul_distribution(0.8) == (0.8, 1.0 - 0.8)
    rebuilt = re.compile(r"1(\.0)?\s*-\s*(p|p_yes|score)\b")
    names = ["rubrics/scoring.py", "rubrics/results.py", "rubrics/samples.py", "judge.py", "convert.py"]
    names += [str(p.relative_to(PACKAGE)) for p in sorted((PACKAGE / "rubrics" / "kinds").glob("*.py"))]
    assert len(names) > 6  # the kinds were found
    for name in names:
        text = (PACKAGE / name).read_text(encoding="utf-8")
        assert not rebuilt.search(text), f"{name} rebuilds P(no) itself; use noul_distribution"


def test_scoring_reports_the_noul_distribution():
    from logitjudge.engine.types import Answer
    from logitjudge.rubrics.registry import default_registry
    from logitjudge.rubrics.scoring import Answered, score_answers

    registry = default_registry()
    by_kind = {d.scoring: d for d in registry.versions.values()}  # chunk_precision: chunk_relevance@1
    question = Question("noul", "?", (Option("true"), Option("false")))
    noul = Answered(question, Answer("noul", (0.7, 0.3), option_mass=1.0))
    low = Answered(question, Answer("noul", (0.2, 0.8), option_mass=1.0))
    for kind, answers in [
        ("probability", [noul]),
        ("typed_question", [noul]),
        ("chunk_precision", [noul, low, noul]),  # yes = the relevant share
    ]:
        result = score_answers(by_kind[kind], answers)
        p_yes = 0.7 if kind != "chunk_precision" else 2 / 3
        assert result.probabilities == dict(zip(("yes", "no"), noul_distribution(p_yes))), kind


def _scores_and_plan(engine, request):
    plan = engine.plan(request)
    reads = engine.runner.run([plan], engine.strategy)
    scores = engine.readout.log_probs(reads.hidden, reads.labels)  # (N_labels,)
    return plan, reads, scores


REQUEST = EngineRequest(
    "Order 1182: the customer paid twice for one blender and asks for the second charge back.",
    (
        Question("noul", "Does the customer want money back?", (Option("true"), Option("false"))),
        Question("choice", "Which team?", tuple(Option(n) for n in ("Billing", "Shipping", "Tech"))),
        Question("score", "How upset?", tuple(Option(str(i), t) for i, t in enumerate(["calm", "cross", "furious"]))),
        Question("choice", "Which queue?", tuple(Option(f"q{i}") for i in range(5))),  # "choice:*" applies
    ),
)
SCALINGS = {
    "noul:2": Scaling(0.5, (0.7, 0.0)),
    "choice:3": Scaling(3.0, (0.4, -1.0, 0.0)),
    "score:3": Scaling(0.25),
    "choice:*": Scaling(6.0),
}


def _calibrated(engine) -> Calibration:
    fitted = {k: engine.describe()[k] for k in ("fingerprint", "prompt_version", "dtype", "strategy")}
    cal = Calibration(fitted_for=fitted, scalings=dict(SCALINGS))
    engine.set_calibration(cal)
    return cal


def test_a_calibrated_engine_answers_softmax_of_scaled_label_scores(make_tiny):
    engine = make_tiny("llama")
    cal = _calibrated(engine)
    assert engine.readout.calibration is cal and engine.calibration is cal  # the engine handed it over
    try:
        got = engine.run_batch([REQUEST])[0].answers
        _plan, reads, scores = _scores_and_plan(engine, REQUEST)
    finally:
        engine.set_calibration(None)
    for qi, (question, answer) in enumerate(zip(REQUEST.questions, got)):
        terms = [(t.option, k) for k, t in enumerate(reads.labels) if (t.request, t.question) == (0, qi)]
        s = scores[[k for _, k in sorted(terms)]].double()  # (n,) label log-probs in option order
        scaling = cal.scaling_for(question.type, len(question.options))
        assert scaling is not None
        z = s / scaling.temperature
        if scaling.bias is not None:
            z = z + torch.tensor(scaling.bias, dtype=torch.float64)
        # one view: log p = s - logsumexp(s), and softmax is shift-invariant; fp32 label softmax
        want = torch.softmax(z, 0)
        assert list(answer.probabilities) == pytest.approx(want.tolist(), abs=1e-5)
        assert answer.option_mass == pytest.approx(float(s.exp().sum()), rel=1e-6)  # raw mass


@pytest.mark.parametrize("rotations", [1, 3])
def test_a_calibrated_engine_answers_the_readout_stage_called_directly(make_tiny, rotations):
    engine = make_tiny("llama")
    questions = tuple(Question(q.type, q.instructions, q.options, rotations=rotations) for q in REQUEST.questions)
    request = EngineRequest(REQUEST.state, questions)
    cal = _calibrated(engine)
    try:
        got = engine.run_batch([request])[0].answers
        plan, reads, scores = _scores_and_plan(engine, request)
    finally:
        engine.set_calibration(None)
    n_options = {(0, q): qp.n_options for q, qp in enumerate(plan.questions)}
    scalings = {(0, q): cal.scaling_for(qp.type, qp.n_options) for q, qp in enumerate(plan.questions)}
    direct = readout.distributions(scores, reads.labels, n_options, scalings)  # type: ignore[arg-type]
    raw = readout.distributions(scores, reads.labels, n_options)
    for q, answer in enumerate(got):
        probs, mass = direct[(0, q)].probabilities, direct[(0, q)].option_mass
        assert list(answer.probabilities) == pytest.approx(probs, abs=1e-12)
        assert answer.option_mass == pytest.approx(mass, abs=1e-12)
        # and that is the calibration's formula applied to the raw readout distribution
        assert probs == pytest.approx(cal.apply(plan.questions[q].type, raw[(0, q)].probabilities), abs=1e-12)
        assert probs != pytest.approx(raw[(0, q)].probabilities, abs=1e-3)  # calibration did something


def test_scale_of_a_batch_equals_each_row_alone_and_the_calibration_formula():
    probs = [[0.7, 0.2, 0.1], [0.05, 0.9, 0.05], [1.0, 0.0, 0.0]]  # a zero is floored at 1e-9
    batch = readout.scale(probs, 2.0, (0.3, -0.2, 0.0))  # (3, 3)
    for row, p in zip(batch, probs):
        assert torch.equal(row, readout.scale(p, 2.0, (0.3, -0.2, 0.0)))
        assert row.tolist() == Scaling(2.0, (0.3, -0.2, 0.0)).apply(p)
    with pytest.raises(ValueError, match="bias has 2 terms for 3 options"):
        readout.scale(probs, 2.0, (0.3, 0.0))


def test_the_sigmoid_is_the_softmax_of_z_and_zero():
    """The plain sigmoid equals what the scores took before it, the fp64 softmax of ``(z, 0)``."""
    for z in (-745.0, -40.0, -3.5, -1e-12, 0.0, 1e-12, 0.7, 3.5, 40.0, 745.0):
        want = float(readout.softmax(torch.tensor([z, 0.0], dtype=torch.float64))[0])
        assert formulas.sigmoid(z) == pytest.approx(want, rel=1e-15, abs=1e-300), z
    assert formulas.sigmoid(0.0) == 0.5 and formulas.sigmoid(-1e4) == 0.0 and formulas.sigmoid(1e4) == 1.0
