"""The documentation speaks to users and holds together: README.md, CONTRIBUTING.md and docs/.

- No development history in user docs: no issue numbers, no "colleague" or "another engineer",
  no commit digests (history belongs in CHANGELOG.md and git).
- Every relative link resolves to a file in the repository (and its #anchor to a heading there);
  no link points outside the repository except to a public http(s) URL.
- The generated reference pages equal what ``docs/gen_reference.py`` writes from the code.
- Every benchmark result and script a page cites exists, and every file in benchmarks/results is
  cited by a page or the benchmarks index (superseded runs are deleted, not left beside current ones).
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted(
    [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "benchmarks" / "README.md", *(ROOT / "docs").rglob("*.md")]
)
# CONTRIBUTING speaks to developers; the API specification is a copied reference document that
# cites its upstream sources (their commits and issues) for every fact.
USER_PAGES = [p for p in PAGES if p.name not in ("CONTRIBUTING.md", "api-spec.md")]

FORBIDDEN = {
    "an issue number": re.compile(r"\bissues? ?#?[0-9]", re.IGNORECASE),
    "a colleague": re.compile(r"\bcolleague", re.IGNORECASE),
    "another engineer": re.compile(r"\banother engineer", re.IGNORECASE),
    # 7+ hex characters with at least one digit and one letter (a digest), not a plain number or
    # word, nor a fingerprint inside a file name (qwen2.5-coder-1.5b-instruct-89849d46-lj-prompt-...)
    "a commit digest": re.compile(r"(?<![-\w./])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![-\w])"),
}
# A sha256 that pins a file users can verify is not a commit digest: 64 hex characters.
SHA256 = re.compile(r"\b[0-9a-f]{64}\b")


def _rel(page: Path) -> str:
    return str(page.relative_to(ROOT))


@pytest.mark.parametrize("page", USER_PAGES, ids=_rel)
def test_no_development_history(page):
    text = SHA256.sub("", page.read_text())
    found = [
        f"{what}: line {text.count(chr(10), 0, m.start()) + 1}: {m.group(0)!r}"
        for what, pattern in FORBIDDEN.items()
        for m in pattern.finditer(text)
    ]
    assert not found, f"{_rel(page)} carries history meant for CHANGELOG.md/git:\n" + "\n".join(found)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    tokens = MarkdownIt().parse(page.read_text())
    return {
        _slug(tokens[i + 1].content)
        for i, tok in enumerate(tokens)
        if tok.type == "heading_open" and i + 1 < len(tokens)
    }


def _links(page: Path) -> list[str]:
    """Every link and image target of a page (markdown-it's parse, so code blocks are skipped)."""
    out = []
    for tok in MarkdownIt().parse(page.read_text()):
        for child in tok.children or ():
            if child.type == "link_open":
                out.append(str(child.attrs.get("href", "")))
            elif child.type == "image":
                out.append(str(child.attrs.get("src", "")))
    return out


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_links_resolve(page):
    broken = []
    for href in _links(page):
        if re.match(r"^(https?|mailto):", href):
            continue
        if re.match(r"^[a-z][a-z0-9+.-]*:", href):
            broken.append(f"{href}: only public http(s) links may leave the repository")
            continue
        path, _, anchor = href.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            broken.append(f"{href}: no such file")
        elif ROOT not in target.parents and target != ROOT:
            broken.append(f"{href}: outside the repository")
        elif anchor and target.suffix == ".md" and anchor not in _anchors(target):
            broken.append(f"{href}: no heading #{anchor} in {_rel(target)}")
    assert not broken, f"{_rel(page)}:\n" + "\n".join(broken)


def test_no_link_to_the_shared_folder():
    """`shared/` is not part of the repository: cite an in-repo copy or a public source instead."""
    hits = [f"{_rel(p)}: {href}" for p in PAGES for href in _links(p) if "shared/" in href]
    assert not hits, "\n".join(hits)


def _generator():
    spec = importlib.util.spec_from_file_location("lj_gen_reference", ROOT / "docs" / "gen_reference.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GENERATED = sorted(_generator().PAGES)


@pytest.mark.parametrize("page", GENERATED, ids=_rel)
def test_generated_reference_pages_are_fresh(page):
    """The CLI, configuration and errors references equal what the generator writes now, so a
    changed flag, config field, environment variable or error class cannot leave them behind."""
    gen = _generator()
    render = gen.PAGES[page]
    assert page.exists(), f"{_rel(page)} is missing: run python docs/gen_reference.py"
    made_with = gen.generated_python(page)  # only pages whose layout depends on Python say
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    if made_with is not None and made_with != here:
        pytest.skip(f"{_rel(page)} was generated with Python {made_with}; argparse's layout differs on {here}")
    assert page.read_text() == render(), f"{_rel(page)} is stale: run python docs/gen_reference.py"


def test_generated_reference_pages_are_linked():
    """Every generated reference page is listed in the documentation index."""
    index = ROOT / "docs" / "index.md"
    linked = {(index.parent / href.partition("#")[0]).resolve() for href in _links(index)}
    assert not [_rel(p) for p in GENERATED if p not in linked], "add them to docs/index.md#reference"


def test_every_config_field_and_error_is_documented():
    """The generated pages name every configuration field and every error of the tree."""
    import dataclasses

    from logitjudge.engine.config import EngineConfig, SchedulerConfig, VllmConfig
    from logitjudge.errors import LogitJudgeError
    from logitjudge.server.config import ServerConfig

    config = (ROOT / "docs" / "reference" / "configuration.md").read_text()
    for cls in (EngineConfig, SchedulerConfig, VllmConfig, ServerConfig):
        assert f"## {cls.__name__}" in config
        for field in dataclasses.fields(cls):
            assert f"| `{field.name}` |" in config, f"{cls.__name__}.{field.name}"
    for variable in ("LOGITJUDGE_MODEL", "LOGITJUDGE_API_KEYS", "LOGITJUDGE_CACHE_DIR", "HF_HUB_OFFLINE"):
        assert f"| `{variable}` |" in config

    errors = (ROOT / "docs" / "reference" / "errors.md").read_text()
    _generator()._error_classes()  # imports every module that defines an error
    stack = [LogitJudgeError]
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        if cls.__module__.startswith("logitjudge."):
            assert f"| `{cls.__name__}` |" in errors, cls.__name__


def test_every_committed_result_records_where_and_when_it_was_measured():
    """Each ``benchmarks/results/*.json`` carries a metadata block (``benchmarks/_results.py``):
    the commit it ran from or, for results older than the block, the commit that added it, a
    date, and the versions it recorded."""
    missing = []
    for path in sorted((ROOT / "benchmarks" / "results").glob("*.json")):
        meta = json.loads(path.read_text(encoding="utf-8")).get("metadata") or {}
        if not (meta.get("git_sha") or meta.get("committed_in")) or not meta.get("date") or "torch" not in meta:
            missing.append(path.name)
    assert not missing, f"results without a metadata block: {missing}"


# A result is cited by its path from the repository root, `benchmarks/results/<name>`, on any
# page, or as `results/<name>` in benchmarks/README.md (relative to it). `<...>` marks a pattern
# (`quality-<model>-<tag>.json`), not a file; brace and star globs are refused, so that every cited
# file can be checked and found by its name.
RESULTS = ROOT / "benchmarks" / "results"
_NAME = r"([\w.@{},*<>-]*)"
RESULT_CITATION = re.compile(r"(?<![\w/.-])benchmarks/results/" + _NAME)
RELATIVE_RESULT_CITATION = re.compile(r"(?<![\w/.-])results/" + _NAME)
SCRIPT_CITATION = re.compile(r"(?<![\w/.-])benchmarks/((?:[\w-]+/)*[\w-]+\.(?:py|sh))\b")


def _result_citations(page: Path) -> list[tuple[int, str]]:
    """(line, name) of every result a page cites, its code blocks included (commands cite too)."""
    patterns = [RESULT_CITATION] + ([RELATIVE_RESULT_CITATION] if page == ROOT / "benchmarks" / "README.md" else [])
    text = page.read_text()
    return [
        (text.count("\n", 0, m.start()) + 1, m.group(1).rstrip("."))
        for pattern in patterns
        for m in pattern.finditer(text)
    ]


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_cited_results_and_scripts_exist(page):
    """Every `benchmarks/results/...` file and `benchmarks/...py` script a page names exists: a
    pruned or renamed result cannot stay cited."""
    missing = []
    for line, name in _result_citations(page):
        if "<" in name:
            continue
        if "{" in name or "*" in name:
            missing.append(f"line {line}: results/{name}: a glob; name each file")
        elif not (RESULTS / name).exists():
            missing.append(f"line {line}: results/{name}: no such file")
    text = page.read_text()
    for m in SCRIPT_CITATION.finditer(text):
        if not (ROOT / "benchmarks" / m.group(1)).is_file():
            missing.append(f"line {text.count(chr(10), 0, m.start()) + 1}: benchmarks/{m.group(1)}: no such script")
    assert not missing, f"{_rel(page)}:\n" + "\n".join(missing)


def test_every_result_is_cited():
    """Every file in benchmarks/results is the source a page or the benchmarks index cites:
    results nobody cites are superseded runs (git history keeps them) or belong in the index."""
    cited = {name for page in PAGES for _, name in _result_citations(page)}
    uncited = sorted(
        str(path.relative_to(RESULTS))
        for path in RESULTS.rglob("*")
        if path.is_file() and str(path.relative_to(RESULTS)) not in cited
    )
    assert not uncited, "cite these in benchmarks/README.md's index or delete them: " + ", ".join(uncited)
