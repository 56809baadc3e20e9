"""Behaviour of the default model (SmolLM2-135M-Instruct, fp32) on easy questions.

The default model is small: on the jevbench yes/no questions of the shipped example it is near
chance (README, "What the default model can do"). A direction is asserted only where it was
reliably right here, with margins measured on this prompt version (lj-prompt-1): sky colour
p(blue) = 0.61 vs 0.23 / 0.17; "Is there a cat?" beats "Is there an elephant?" by 0.13.
"""

from __future__ import annotations


def ask(judge, state, questions):
    return judge.ask({"model": "jev-latest", "state": state, "questions": questions})["answers"]


def test_sky_colour_is_blue(default_judge):
    a = ask(
        default_judge,
        "The sky is blue.",
        {
            "c": {
                "type": "choice",
                "instructions": "What colour is the sky?",
                "criteria": {"red": None, "blue": None, "green": None},
            }
        },
    )
    assert a["c"]["choice"] == "blue"


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
