"""Test helpers (not shipped in the package): a scripted engine for routing/scoring tests and a
uvicorn server in a background thread. ``tests/conftest.py`` puts ``tests/`` on ``sys.path``."""
