"""Behaviour of the default model (SmolLM2-135M-Instruct, fp32) on easy questions.

The default model is small: on the jevbench yes/no questions of the shipped example it is near
chance (README, "What the default model can do"). A direction is asserted only where it was
reliably right here, with margins measured on this prompt version (lj-prompt-1): "Is there a
cat?" beats "Is there an elephant?" by 0.13. Its choice answers in one order follow the option's
position, not the content (the sky-colour test).
"""

from __future__ import annotations


def ask(judge, state, questions):
    return judge.ask({"model": "jev-latest", "state": state, "questions": questions})["answers"]


def test_sky_colour_does_not_follow_the_option_position(default_judge):
    """Asked in one order, the 135M answers whichever colour is listed second (P 0.61-0.64 in
    all six orders of red, blue, green), which once read as "the sky is blue". By default a
    choice is asked in every rotation of its options, so its answer no longer moves with the
    order: no colour's probability differs by more than 0.03 between the six orders."""
    import itertools

    colours = ("red", "blue", "green")
    seen = {c: [] for c in colours}
    for order in itertools.permutations(colours):
        q = {"type": "choice", "instructions": "What colour is the sky?", "criteria": dict.fromkeys(order)}
        p = ask(default_judge, "The sky is blue.", {"c": q})["c"]["probabilities"]
        for c in colours:
            seen[c].append(p[c])
        single = default_judge.ask(
            {"model": "jev-latest", "state": "The sky is blue.", "questions": {"c": q}, "x_rotations": 1}
        )["answers"]["c"]
        assert single["choice"] == order[1]  # the control: one order follows the position
    assert max(max(v) - min(v) for v in seen.values()) < 0.03


def test_present_animal_beats_absent_one(default_judge):
    a = ask(
        default_judge,
        "The cat is sleeping on the sofa.",
        {
            "cat": {"type": "noul", "instructions": "Is there a cat?"},
            "elephant": {"type": "noul", "instructions": "Is there an elephant?"},
        },
    )
    assert a["cat"]["noul"] > a["elephant"]["noul"]


def test_shipped_example_answers_every_question(default_judge):
    import json
    from pathlib import Path

    request = json.loads((Path(__file__).parents[2] / "examples" / "support_ticket.json").read_text())
    answers = default_judge.ask(request)["answers"]
    assert set(answers) == set(request["questions"])
    assert {a["type"] for a in answers.values()} == {"noul", "choice", "score"}
