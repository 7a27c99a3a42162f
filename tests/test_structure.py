"""The house rules that code review kept repeating, checked.

* One package, in floors, each importing only from the floors below it:
  ground floor (``samelang.primitives``: atomic writes, text checks, language identification, the model
  identity record; ``samelang.corpora``: every data set's reader and the records all layers share)
  <- ``indexes`` <- ``core`` (models, runtime, the model catalogue) <- ``retrieval`` (the engine every dialect
  calls, no HTTP types) <- ``service`` (HTTP and the server process) <- ``evaluation`` (the judge: it goes
  through the code path the routes serve, and decides what is served) <- ``training``; ``bench`` and the CLI
  (``samelang.cli``, the composition root) above them all.
* No import cycle between modules, imports inside functions included (a cycle hidden in a function is
  still a cycle: it only fails later, at a call).
* An import inside a function stays only where it keeps a heavy dependency out of start-up, and its
  comment says so (``# deferred: ...``).
* No module outgrows ~450 lines, nor a function a screen, without saying why ("Long because"); no
  class over 250 lines; no module docstring over 15 lines; no history words in the package.
* Every option is declared once (``tests/core/test_options.py``); the model folder's file names have
  one owner.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "samelang"
# what each layer may import from the project (a module of a layer may import its own layer)
FLOORS = (
    ("samelang.primitives", "samelang.corpora"),
    ("samelang.indexes",),
    ("samelang.core",),
    ("samelang.retrieval",),
    ("samelang.service",),
    ("samelang.evaluation",),
    ("samelang.training",),
)
# what each layer may import from the project: its own floor and those below; the bench sits above
# the service beside the judge and the trainers (it measures served code, never trains)
ALLOWED = {pkg: {p for floor in FLOORS[: i + 1] for p in floor} for i, names in enumerate(FLOORS) for pkg in names}
ALLOWED["samelang.bench"] = {p for floor in FLOORS[:5] for p in floor} | {"samelang.bench"}
ALLOWED["samelang.primitives"] = {"samelang.primitives"}  # the helpers of the ground floor import nothing of ours
# what an index needs of the corpora to build one: the records and the JSONL reader of a user's own documents,
# the text checks, and XQuAD (the bundled demo index). No training corpus reader.
INDEXES_MAY_READ = {
    "samelang.corpora",
    "samelang.corpora.records",
    "samelang.corpora.jsonl",
    "samelang.primitives.text",
}
MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 450
MAX_CLASS_LINES = 250
MAX_MODULE_DOCSTRING_LINES = 15


def _modules(root: Path, package: str) -> dict[str, Path]:
    """``dotted name -> file`` of every module under ``root/package`` (a package is its ``__init__``)."""
    out = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The project module an imported name lives in (``a.b.c`` -> ``a.b`` when ``c`` is a name in it)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str, path: Path) -> list[tuple[str, ast.AST, bool]]:
    """``(imported dotted name, node, inside a function)`` of every import of a module."""
    tree = ast.parse(path.read_text())
    in_function = {
        id(node)
        for f in ast.walk(tree)
        if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
        for node in ast.walk(f)
        if isinstance(node, ast.Import | ast.ImportFrom)
    }
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, node, id(node) in in_function) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's package
                package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
                base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
            out += [(f"{base}.{a.name}", node, id(node) in in_function) for a in node.names]
            out.append((base, node, id(node) in in_function))
    return out


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Module -> the project modules it imports, wherever the import statement is."""
    modules = _modules(root, package)
    graph = {}
    for module, path in modules.items():
        targets = {_resolve(name, modules) for name, _, _ in _imports(module, path)}
        graph[module] = {t for t in targets if t and t != module}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            nxt = next(edges, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return cycles


def test_the_cycle_check_finds_a_cycle_hidden_in_a_function(tmp_path):
    """``a`` imports ``b`` at the top, ``b`` imports ``c``, and ``c`` imports ``a`` inside a function."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg import b\n")
    (pkg / "b.py").write_text("from pkg.c import helper\n")
    (pkg / "c.py").write_text("def helper():\n    from pkg.a import thing  # deferred: test\n    return thing\n")
    (pkg / "d.py").write_text("from pkg import a\n")  # on the cycle's path, not in it
    assert import_cycles(import_graph(tmp_path, "pkg")) == [["pkg.a", "pkg.b", "pkg.c"]]


def test_no_import_cycle_in_the_package():
    assert import_cycles(import_graph(ROOT, "samelang")) == []


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_imports_go_one_way(layer):
    wrong = {}
    for module, targets in import_graph(ROOT, "samelang").items():
        if module == layer or module.startswith(layer + "."):
            bad = {t for t in targets if not any(t == a or t.startswith(a + ".") for a in ALLOWED[layer])}
            if bad:
                wrong[module] = sorted(bad)
    assert not wrong, f"{layer} imports upward: {wrong}"


DIALECTS = ("samelang.service.api.native", "samelang.service.api.openai", "samelang.service.api.tei")


def test_no_dialect_imports_another():
    """Each dialect of the HTTP API (its router, protocol and handlers) stands on the neutral base
    (``api/shared.py``, ``fields.py``, ``routing.py``, ``common.py``) and the retrieval engine, never on another
    dialect: a route two dialects share (``/rerank``) is composed above both."""
    wrong = {}
    for module, targets in import_graph(ROOT, "samelang").items():
        own = next((d for d in DIALECTS if module == d or module.startswith(d + ".")), None)
        if own is not None:
            bad = {t for t in targets if any(t == d or t.startswith(d + ".") for d in DIALECTS if d != own)}
            if bad:
                wrong[module] = sorted(bad)
    assert not wrong, f"dialects import each other: {wrong}"


def test_the_retrieval_floor_knows_no_http():
    """The engine every dialect calls holds no HTTP types: nothing of fastapi, starlette or the service."""
    wrong = {}
    for module, path in _modules(ROOT, "samelang").items():
        if module.startswith("samelang.retrieval"):
            bad = {n for n, _, _ in _imports(module, path) if n.split(".")[0] in ("fastapi", "starlette", "uvicorn")}
            if bad:
                wrong[module] = sorted(bad)
    assert not wrong, wrong


PROBES = ("getattr", "hasattr")


def test_no_capability_probing_outside_the_model_layer():
    """What a model can do is declared (``Capabilities``, read as ``model.capabilities.fused``), so no code
    outside ``samelang.core.models`` asks a model with ``getattr``/``hasattr`` whether it has a member that a
    capability or a role's contract names."""
    from samelang.core.models.contracts import PROMISES, Capabilities, Reranker, TextEncoder

    members = {m for ms in PROMISES.values() for m in ms} | {f for f in Capabilities.__dataclass_fields__}
    members |= {m for p in (TextEncoder, Reranker) for m in (*p.__annotations__, *vars(p)) if not m.startswith("_")}
    members -= {"path", "name", "kind"}  # names every route and record has too
    wrong = []
    for module, path in _modules(ROOT, "samelang").items():
        if module.startswith("samelang.core.models"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            probe = isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in PROBES
            name = node.args[1] if probe and len(node.args) >= 2 else None
            if isinstance(name, ast.Constant) and name.value in members:
                wrong.append(f"{module}:{node.lineno} {node.func.id}(..., {node.args[1].value!r})")
    assert not wrong, wrong


TRAINERS = ("samelang.training.biencoder", "samelang.training.lamar", "samelang.training.reader")
LOOP_CALLS = {"optimiser_step", "backward", "setup", "save_checkpoint"}  # what only the one loop calls


def test_the_trainers_run_on_the_one_loop():
    """Steps, optimiser, checkpoints and evaluation live in ``samelang.training.trainer.fit``: each trainer
    calls it, and no other module of the package steps an optimiser or writes a checkpoint itself
    (``samelang adapt`` trains through the bi-encoder's trainer)."""
    modules = _modules(ROOT, "samelang")
    calls = {}
    for module, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
                calls.setdefault(module, set()).add(name)
    assert all("fit" in calls[t] for t in TRAINERS), {t: sorted(calls[t] & {"fit"}) for t in TRAINERS}
    assert "train_biencoder" in calls["samelang.training.adapt"]
    stepping = {m: sorted(c & LOOP_CALLS) for m, c in calls.items() if c & LOOP_CALLS}
    assert set(stepping) == {"samelang.training.trainer"}, stepping


def test_indexes_read_no_training_corpus():
    """``indexes/`` holds index code: of the corpora it imports only what building an index needs (the
    records, a user's JSONL, the text checks), never a training corpus reader."""
    wrong = {
        module: sorted(t for t in targets if t.startswith("samelang.corpora") and t not in INDEXES_MAY_READ)
        for module, targets in import_graph(ROOT, "samelang").items()
        if module.startswith("samelang.indexes")
    }
    assert not {m: t for m, t in wrong.items() if t}, wrong
    assert not (PACKAGE / "indexes" / "corpora").exists() and not (PACKAGE / "indexes" / "data").exists()


def test_the_package_is_the_only_top_level_name():
    """``pip install`` ships one import name: everything lives under ``samelang/``."""
    top = [p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists() and p.name != "tests"]
    assert top == ["samelang"], top


def test_an_import_inside_a_function_says_why():
    """It must keep a heavy dependency out of start-up, and its comment (``# deferred: ...``) says which."""
    silent = []
    for module, path in _modules(ROOT, "samelang").items():
        lines = path.read_text().splitlines()
        for _, node, inside in _imports(module, path):
            if inside and not any("# deferred:" in line for line in lines[node.lineno - 2 : node.end_lineno]):
                silent.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not silent, sorted(set(silent))


def test_scripts_import_the_installed_package():
    """No ``sys.path`` surgery: scripts run against ``pip install -e .`` like any user code."""
    patched = [str(p.relative_to(ROOT)) for p in (ROOT / "scripts").rglob("*.py") if "sys.path" in p.read_text()]
    assert not patched, patched


def test_no_module_outgrows_450_lines_without_saying_why():
    long = []
    for path in _modules(ROOT, "samelang").values():
        n = len(path.read_text().splitlines())
        if n > MAX_MODULE_LINES and "Long because" not in (ast.get_docstring(ast.parse(path.read_text())) or ""):
            long.append(f"{path.relative_to(ROOT)} ({n} lines)")
    assert not long, long


def test_no_function_outgrows_a_screen_without_saying_why():
    """Longer than 60 lines is allowed only with 'Long because' in the docstring."""
    long = []
    for path in [*PACKAGE.rglob("*.py"), *(ROOT / "scripts").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES and "Long because" not in (ast.get_docstring(node) or ""):
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, long


def test_no_class_outgrows_250_lines():
    long = [
        f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > MAX_CLASS_LINES
    ]
    assert not long, long


def test_a_module_docstring_says_what_and_why_in_15_lines():
    """Measurements belong in docs/, written by the commands that take them, not in docstrings."""
    long = []
    for path in PACKAGE.rglob("*.py"):
        doc = ast.get_docstring(ast.parse(path.read_text()), clean=False)
        if doc and len(doc.strip().splitlines()) > MAX_MODULE_DOCSTRING_LINES:
            long.append(f"{path.relative_to(ROOT)} ({len(doc.strip().splitlines())} lines)")
    assert not long, long


HISTORY = re.compile(r"\bround[ -]?\d+\b|\bused to\b|\bearlier (?:round|version|code|design)s?\b", re.I)


def test_no_history_words_in_the_package():
    """Code and its user-visible labels say what is, not how it came to be ("round 2", "used to")."""
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()[:80]}"
        for path in PACKAGE.rglob("*.py")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if HISTORY.search(line)
    ]
    assert not found, found


def test_the_model_folder_format_has_one_owner():
    """The file names of a model folder appear in samelang/core/model_folder.py only."""
    names = ("adapter_config.json", "samelang_manifest.json", "inference.json")
    owner = PACKAGE / "core" / "model_folder.py"
    found = [
        f"{path.relative_to(ROOT)}: {name}"
        for path in [*PACKAGE.rglob("*.py"), *(ROOT / "scripts").rglob("*.py")]
        if path != owner
        for name in names
        if name in path.read_text()
    ]
    assert owner.exists() and not found, found


def _readme_tree() -> str:
    readme = (ROOT / "README.md").read_text()
    return readme.split("## Architecture")[1].split("```")[1]


def test_the_readme_architecture_tree_matches_the_tree():
    """Every file and folder the README's architecture tree names exists where it says, and every
    folder of the package is in it (the tree drifted before)."""
    named, stack = set(), []
    for line in _readme_tree().splitlines():
        m = re.match(r"^([ │├└─]*)([\w./-]+)", line)
        if not m or not m.group(2).strip():
            continue
        depth = len(m.group(1)) // 4
        name = m.group(2)
        stack = stack[:depth] + [name.rstrip("/")]
        named.add("/".join(stack))
    missing = sorted(p for p in named if not (ROOT / p).exists())
    folders = {str(p.relative_to(ROOT)) for p in PACKAGE.rglob("*") if p.is_dir() and list(p.glob("*.py"))} | {
        "samelang"
    }
    unnamed = sorted(folders - named)
    assert named and not missing and not unnamed, {"named but missing": missing, "not in the tree": unnamed}


def test_the_readme_is_read_in_two_minutes():
    """At most 12 KB; its first 12 lines hold the pitch and the two commands (install and serve, install
    and test), each short enough to read; no text of the project names an issue number."""
    readme = (ROOT / "README.md").read_text()
    head = readme.splitlines()[:12]
    commands = [line for line in head if line.startswith("python3 -m venv")]
    assert len(readme.encode()) <= 12 * 1024
    assert len(commands) == 2 and "samelang serve" in commands[0] and "pytest" in commands[1], head
    assert all(len(c) <= 120 for c in commands), [len(c) for c in commands]
    pages = [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "models").glob("*/README.md")]
    named = [str(p.relative_to(ROOT)) for p in pages if re.search(r"\bissues? #?\d", p.read_text(), re.I)]
    assert not named, named
