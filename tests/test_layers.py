"""The import rules of the package's layers, read from the source (every import, also those inside
functions), plus what importing the server and the client really loads.

::

    contract   the wire models of both APIs           imports nothing of ours but the option
                                                      ranges in engine/types.py (dataclasses only)
    errors, settings                                   import nothing of ours
    engine     prompt, pack, runner, readout, core    imports only engine, errors, settings
    convert    wire <-> engine types, the one converter imports only contract, engine, errors
    rubrics    evaluators, scoring, datasets          no facade, no server, no cli (a judge is passed in)
    judge      the facade (ask, ask_many, evaluate)   no server, no cli
    fit        training heads from labelled rows      engine, rubrics, errors, settings; inside, each
               (examples, features, heads, card)      module imports only those before it (test below)
    server     FastAPI edge                           no cli, no facade (it holds a ServedJudge, a protocol);
                                                      never loads torch (test_routes.py)
    client     a server's HTTP client (evaluate, ask) contract, errors, settings, and the rubrics to plan
                                                      rows as a local run does; no engine, judge,
                                                      server or cli; never loads torch (test below)
    cli        the command line                       imported by nothing else

and no import cycle between modules anywhere.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "logitjudge"

# layer -> layers (top-level names under logitjudge) it may import
ALLOWED: dict[str, set[str]] = {
    "contract": {"contract"},
    "errors": set(),
    "settings": set(),
    "engine": {"engine", "errors", "settings"},
    "convert": {"contract", "engine", "errors"},
    "rubrics": {"rubrics", "convert", "contract", "engine", "errors", "settings"},
    "judge": {"engine", "contract", "convert", "rubrics", "errors", "settings"},
    "server": {"server", "contract", "convert", "engine", "errors", "settings", "rubrics", "__init__"},
    "fit": {"fit", "engine", "rubrics", "errors", "settings"},
    "client": {"client", "contract", "errors", "settings", "rubrics", "__init__"},
    "cli": {
        "cli",
        "client",
        "server",
        "rubrics",
        "contract",
        "convert",
        "engine",
        "errors",
        "settings",
        "judge",
        "fit",
        "__init__",
    },
    "__init__": {"errors", "judge"},
}


# single modules a layer may import beyond ALLOWED (leaves that import nothing of ours)
ALLOWED_MODULES: dict[str, set[str]] = {"contract": {"logitjudge.engine.types"}}


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def resolve(name: str) -> str:
    """The module an import names: ``logitjudge.x.y`` if that file or package exists, else its parent."""
    while name.count("."):
        rel = Path(*name.split(".")[1:])
        if (PACKAGE / rel).with_suffix(".py").exists() or (PACKAGE / rel / "__init__.py").exists():
            return name
        name = name.rsplit(".", 1)[0]
    return name


def _type_only(tree: ast.Module) -> set[int]:
    """ids of the import nodes inside ``if TYPE_CHECKING:`` blocks (annotations, never run)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            out |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return out


def imports_of(path: Path, *, runtime_only: bool = False) -> set[str]:
    """Every ``logitjudge`` module ``path`` imports, at any depth of the file (with
    ``runtime_only``, leaving out the ``if TYPE_CHECKING:`` imports of annotations)."""
    out: set[str] = set()
    me = module_name(path)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _type_only(tree) if runtime_only else set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out |= {resolve(a.name) for a in node.names if a.name.split(".")[0] == "logitjudge"}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "logitjudge":
            for a in node.names:
                out.add(resolve(f"{node.module}.{a.name}"))
    out.discard(me)
    return out


def graph(*, runtime_only: bool = False) -> dict[str, set[str]]:
    return {module_name(p): imports_of(p, runtime_only=runtime_only) for p in PACKAGE.rglob("*.py")}


def layer(module: str) -> str:
    parts = module.split(".")
    return "__init__" if len(parts) == 1 else parts[1]


def test_every_layer_imports_only_what_it_may():
    broken = [
        f"{mod} imports {dep}"
        for mod, deps in sorted(graph().items())
        for dep in sorted(deps)
        if layer(dep) not in ALLOWED[layer(mod)] and dep not in ALLOWED_MODULES.get(layer(mod), set())
    ]
    assert not broken, "layer rules broken:\n" + "\n".join(broken)


def _cycles(g: dict[str, set[str]]) -> list[list[str]]:
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for dep in sorted(g.get(node, ())):
            if dep == "logitjudge" or dep.startswith(node + "."):
                continue  # a package's __init__ re-exporting its own modules is not a cycle
            if state.get(dep) == 1:
                cycles.append([*stack[stack.index(dep) :], dep])
            elif dep not in state:
                visit(dep, [*stack, dep])
        state[node] = 2

    for mod in sorted(g):
        if mod not in state:
            visit(mod, [mod])
    return cycles


def test_no_import_cycle_between_modules():
    """Run-time imports only: an annotation may name a type of a module that imports this one."""
    cycles = _cycles(graph(runtime_only=True))
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_no_engine_module_imports_one_that_imports_it_back():
    """Inside the engine not even an annotation or a lazy import closes a circle (the formulas the
    readout and the calibration share live in engine/formulas.py, which imports neither)."""
    engine = {m: {d for d in deps if layer(d) == "engine"} for m, deps in graph().items() if layer(m) == "engine"}
    assert "logitjudge.engine.calibration" in engine["logitjudge.engine.readout"]  # annotations are counted
    cycles = _cycles(engine)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


# the modules of logitjudge/fit/ in order: each imports only those before it (a module not listed,
# such as one beside the heads code, may import any of them, and none of them imports it)
FIT_ORDER = ["examples", "features", "heads", "card"]


def test_fit_modules_import_downwards():
    """examples <- features <- heads <- card: a module of ``FIT_ORDER`` imports no fit module but
    those before it, and no module of the package imports the package itself (its re-exports)."""
    g = graph()
    broken = []
    for mod, deps in sorted(g.items()):
        if not mod.startswith("logitjudge.fit."):
            continue
        name = mod.rsplit(".", 1)[1]
        for dep in sorted(d for d in deps if layer(d) == "fit"):
            below = FIT_ORDER[: FIT_ORDER.index(name)] if name in FIT_ORDER else None
            if dep == "logitjudge.fit" or (below is not None and dep.rsplit(".", 1)[1] not in below):
                broken.append(f"{mod} imports {dep}")
    assert not broken, "fit modules import upwards:\n" + "\n".join(broken)


def test_the_allowed_single_modules_are_leaves():
    g = graph()
    for mods in ALLOWED_MODULES.values():
        for mod in mods:
            assert not g[mod], f"{mod} must import nothing of ours: {g[mod]}"


def test_the_client_loads_no_torch():
    """A client of a server needs no model: importing it (and planning rows) loads no torch."""
    code = "import sys, logitjudge.client; print('torch' in sys.modules, 'transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=PACKAGE.parent)
    assert out.stdout.split() == ["False", "False"]


def test_the_rules_can_fail():
    """The checker sees function-level imports (the kind the old rubrics -> cli cycle used)."""
    deps = imports_of(PACKAGE / "cli" / "serve.py")
    assert "logitjudge.server.app" in deps  # imported inside run_serve
    assert "logitjudge.server" not in ALLOWED["rubrics"] and "cli" not in ALLOWED["server"]
