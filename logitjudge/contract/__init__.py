"""The wire contract of both APIs: pydantic models only, importing nothing else of logitjudge.

- :mod:`~logitjudge.contract.systemone`: ``POST /v1/systemone`` and ``GET /v1/models``
  (spec Part A);
- :mod:`~logitjudge.contract.evaluate`: ``POST /api/v1/evaluate`` items and result records
  (spec Part B).
- :mod:`~logitjudge.contract.extensions`: the ``x_`` extension fields, and the strict wire that
  leaves them out of a response.

The server, the Python facade (:mod:`logitjudge.judge`), the rubrics and the CLI all read the
wire through these models; ``tests/test_layers.py`` checks that this package stays a leaf.
"""
