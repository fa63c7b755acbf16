"""ARCHITECTURE.md's "Never" rules, checked on the source: arrows point inward only."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "forge"

# The rings, innermost first: a folder imports its own modules and the folders listed for it,
# never an outer one (ARCHITECTURE.md, "Rules by folder"). forge/__init__.py and __main__.py
# are the package's faces ("" here).
INNER_FIRST = ("core", "embedders", "store", "recall", "memory", "chat")
ALLOWED = {folder: set(INNER_FIRST[:i + 1]) for i, folder in enumerate(INNER_FIRST)}
ALLOWED["cli"] = set(INNER_FIRST) | {"cli", "serve", "mcp"}  # serve/mcp: one command each (below)
ALLOWED["serve"] = set(INNER_FIRST) | {"serve"}
ALLOWED["mcp"] = set(INNER_FIRST) | {"mcp", "serve"}        # serve.guard alone (below)
ALLOWED[""] = {"cli"}


def module_name(path: Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Every forge module a file imports, at any depth (function-level imports included)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("forge")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("forge"):
                folder = PKG.parent.joinpath(*target.split("."))
                for alias in node.names:
                    is_module = (folder / f"{alias.name}.py").exists() or (folder / alias.name).is_dir()
                    found.add(f"{target}.{alias.name}" if is_module else target)
    return found


def folder_of(module: str) -> str:
    """forge.store.rag -> "store"; forge and forge.__main__ -> "" (the package's faces)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and (PKG / parts[1]).is_dir() else ""


def ring_of(module: str, ring: set[str]) -> bool:
    return any(module == m or module.startswith(m + ".") for m in ring)


SOURCES = sorted(p for p in PKG.rglob("*.py") if "__pycache__" not in p.parts)


def test_the_import_parser_sees_imports():
    assert "forge.core.fileio" in imports(PKG / "store" / "history.py")
    assert "forge.store.rag" in imports(PKG / "memory" / "compaction.py")  # a function-level import
    assert "forge.store.results" in imports(PKG / "store" / "rag.py")  # a TYPE_CHECKING import
    assert "forge.embedders" in imports(PKG / "embedders" / "server.py")  # `from . import NAME`


def test_forge_holds_only_its_faces_and_folders():
    """Each module sits in the folder of its ring; every folder says in one line what it is for."""
    assert sorted(p.name for p in PKG.glob("*.py")) == ["__init__.py", "__main__.py"]
    folders = [p for p in PKG.iterdir() if p.is_dir() and p.name != "__pycache__"
               and any(p.rglob("*.py"))]
    assert {p.name for p in folders} == set(ALLOWED) - {""}
    for init in PKG.rglob("__init__.py"):
        if "__pycache__" in init.parts:
            continue
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
        assert doc and doc.strip(), init


@pytest.mark.parametrize("path", SOURCES, ids=module_name)
def test_each_folder_imports_only_its_own_ring_and_the_inner_ones(path):
    """Arrows point inward only, by folder: core <- embedders <- store <- recall <- memory <-
    chat <- cli / serve / mcp. A recall's query goes down the rings and never climbs back."""
    folder = folder_of(module_name(path))
    outward = {m for m in imports(path) if folder_of(m) not in ALLOWED[folder]}
    assert not outward


def import_graph() -> dict[str, set[str]]:
    """module -> the forge modules it names in any import statement (at any depth,
    TYPE_CHECKING included), each resolved to a file that exists."""
    known = {module_name(p) for p in SOURCES}
    return {module_name(p): {m for m in imports(p) if m in known} - {module_name(p)}
            for p in SOURCES}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
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
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_one_that_imports_it_back():
    """No import circle at any depth, function-level and TYPE_CHECKING imports included: those
    are arrows too, and a circle is two modules that cannot be read (or moved) apart."""
    assert cycles(import_graph()) == []


@pytest.mark.parametrize("path", SOURCES, ids=module_name)
def test_only_the_lazy_logger_imports_logging(path):
    """Modules log through `forge.core.log.log`, which imports `logging` on the first message: a
    command that logs nothing never loads it (a shell loop pays each command's start-up). The
    CLI's handler setup imports it inside the function that forge.core.log runs at that moment."""
    if module_name(path) in ("forge.core.log", "forge.cli.main"):
        return
    tree = ast.parse(path.read_text(encoding="utf-8"))
    assert not [node.lineno for node in ast.walk(tree)
                if isinstance(node, ast.Import) and any(a.name == "logging" for a in node.names)
                or isinstance(node, ast.ImportFrom) and node.module == "logging"]


def test_the_store_never_imports_the_chat_client():
    """The store needs an embedder, never the chat server (forge.core.llm sits in core for
    tokens and the server embedders, not for the store)."""
    for path in (PKG / "store").rglob("*.py"):
        assert not {m for m in imports(path) if ring_of(m, {"forge.core.llm"})}, path


@pytest.mark.parametrize("path", [p for p in SOURCES if "cli" not in p.relative_to(PKG).parts
                                  and p.name != "__main__.py"], ids=module_name)
def test_nothing_outside_the_cli_imports_it(path):
    assert not {m for m in imports(path) if m.startswith("forge.cli")}


def test_the_http_app_is_an_outer_ring_beside_the_cli():
    """forge/serve/ calls the library like the CLI does; only the CLI's `serve` command starts it,
    and no core module reaches out to it. `forge mcp` (forge/mcp/ and its command) puts its HTTP
    transport behind the same guard, so it imports forge.serve.guard and nothing else of it."""
    importers = {module_name(p) for p in SOURCES
                 if any(m.startswith("forge.serve") for m in imports(p))}
    assert {m for m in importers
            if not m.startswith(("forge.serve", "forge.cli", "forge.mcp"))} == set()
    assert {m for m in importers if m.startswith("forge.cli")} == {"forge.cli.serve_cmds",
                                                                   "forge.cli.mcp_cmds"}
    for path in SOURCES:
        name = module_name(path)
        if name.startswith("forge.serve"):
            assert not {m for m in imports(path) if m.startswith("forge.cli")}, path
        if name.startswith(("forge.mcp", "forge.cli.mcp_cmds")):
            assert {m for m in imports(path) if m.startswith("forge.serve")} <= {"forge.serve.guard"}


def test_the_mcp_server_is_an_outer_ring_beside_the_cli():
    """forge/mcp/ calls the library like the CLI does; only `forge mcp` imports it, it never
    imports the CLI, and no module outside it imports the `mcp` SDK (forge --help's budget)."""
    importers = {module_name(p) for p in SOURCES
                 if any(m.startswith("forge.mcp") for m in imports(p))}
    assert {m for m in importers if not m.startswith("forge.mcp")} == {"forge.cli.mcp_cmds"}
    for path in SOURCES:
        name = module_name(path)
        if name.startswith("forge.mcp"):
            assert not {m for m in imports(path) if m.startswith("forge.cli")}, path
        tree = ast.parse(path.read_text(encoding="utf-8"))
        sdk = [n.lineno for n in ast.walk(tree)
               if isinstance(n, ast.Import) and any(a.name.split(".")[0] == "mcp" for a in n.names)
               or isinstance(n, ast.ImportFrom) and not n.level
               and (n.module or "").split(".")[0] in ("mcp", "mcp_types")]
        if not name.startswith(("forge.mcp", "forge.cli.mcp_cmds")):
            assert not sdk, path


BACKEND_MODULES = {"forge.store.sqlite", "forge.store.postgres"}
SQL_ON_THE_STORE = ("execute(", "executemany(", "memory_entries", "memory_vectors", "memory_fts",
                    "memory_events", "memory_message_refs")


@pytest.mark.parametrize("path", [p for p in SOURCES if not module_name(p).startswith("forge.store")],
                         ids=module_name)
def test_only_the_store_package_knows_its_backends(path):
    """The seam: a backend module is imported only inside forge/store (forge.store.backend_for
    picks one), and nothing outside forge/store (and db.py, the SQLite helper) runs SQL on the
    deliberate store: the CLI, the chat ring and the memory ring call rag, whatever the backend."""
    assert not {m for m in imports(path) if ring_of(m, BACKEND_MODULES)}
    if module_name(path) != "forge.store.db":
        text = path.read_text(encoding="utf-8")
        assert not [s for s in SQL_ON_THE_STORE if s in text]


def test_the_sqlite_backend_keeps_the_whole_protocol(tmp_path):
    """Every method of forge/store/backend.py's Backend exists on the SQLite backend with the
    same parameters, and every attribute is set by an open (a second backend gets the same test)."""
    import inspect

    from forge.core.settings import load_settings
    from forge.store import backend, sqlite

    methods = {n: m for n, m in vars(backend.Backend).items()
               if callable(m) and not n.startswith("_")}
    assert len(methods) > 40
    for name, declared in methods.items():
        impl = getattr(sqlite.SQLiteBackend, name, None)
        assert impl is not None, name
        assert list(inspect.signature(impl).parameters) == list(inspect.signature(declared).parameters), name
    opened = sqlite.open_backend(load_settings(environ={"FORGE_DATA_DIR": str(tmp_path)}, cwd=tmp_path),
                                 mode="inspect")
    try:
        for name in backend.Backend.__annotations__:
            assert hasattr(opened, name), name
    finally:
        opened.close()


BENCH = PKG.parent / "bench"


def bench_graph() -> dict[str, set[str]]:
    """bench/'s scripts import each other by bare name (the folder is on sys.path when run)."""
    scripts = {p.stem: p for p in BENCH.glob("*.py")}
    graph = {}
    for name, path in scripts.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                found.add(node.module)
        graph[name] = (found & set(scripts)) - {name}
    return graph


def test_no_bench_script_imports_one_that_imports_it_back():
    assert bench_graph(), "bench/ has scripts that import each other"
    assert cycles(bench_graph()) == []


def test_no_module_name_repeats_its_folder():
    """forge/recall/rank.py, not forge/recall/recall_rank.py: the folder already says it."""
    repeating = [str(p.relative_to(PKG)) for p in SOURCES
                 if p.parent != PKG and p.stem.startswith(p.parent.name + "_")]
    assert repeating == []
