"""The decision template the decision-checkpoint tests save beside a model (both backends).

A chat-shaped template in the ``pipeline("decision")`` form: the state, ``<|split|>`` (where the
shared prefix ends), the question and its labelled options, and ``<|mark|>`` where the label is
read (the text after the mark is dropped).
"""

TEMPLATE = (
    "<|im_start|>user\n"
    "{{ state if state is string else state|tojson }}<|split|>\n"
    "{{ question.instructions }}\n"
    "{%- for option in question.options %}\n"
    "{{ question.labels[loop.index0] }}. {{ option }}"
    "{%- if question.descriptions[loop.index0] %}: {{ question.descriptions[loop.index0] }}{% endif %}"
    "{%- endfor %}<|im_end|>\n"
    "<|im_start|>assistant\n"
    "[decision]:<|mark|> (read before the mark)"
)
