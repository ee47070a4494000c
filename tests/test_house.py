"""The house rules, read from the code itself: every Python module of the packages says what it
owns in a docstring and stays under 450 lines, and no module imports, at any depth and from any
place (a function's body included), a module that imports it back. An import under
`if TYPE_CHECKING:` is for the type checker only and does not count. Modules are found through
pyproject.toml's package-dir, as the installed package is."""
import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 450


def modules() -> dict[str, Path]:
    """Dotted module name -> file, for every Python file of the packages pyproject.toml installs."""
    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    found: dict[str, Path] = {}
    for package in setup["packages"]:
        parent = next((p for p in sorted(setup["package-dir"], key=len, reverse=True)
                       if package == p or package.startswith(p + ".")), None)
        base = ROOT / setup["package-dir"][parent] if parent else ROOT
        folder = base.joinpath(*package[len(parent) + 1:].split(".")) if parent and package != parent else base
        for path in folder.glob("*.py"):
            name = package if path.stem == "__init__" else f"{package}.{path.stem}"
            found[name] = path
    return found


def _type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"
                                         or isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST):
    """Every Import / ImportFrom node, at any depth, outside `if TYPE_CHECKING:` blocks."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if _type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _owner(name: str, known: dict[str, Path]) -> str | None:
    """The project module that `name` (a module, or a name inside one) resolves to."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The project modules `name` imports."""
    package = name if path.stem == "__init__" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in _imports(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{alias.name}" for alias in node.names]  # a submodule, or a name in `base`
        out |= {owner for t in targets if (owner := _owner(t, known)) and owner != name}
    return out


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_packages_are_found():
    known = modules()
    assert {"kernelevo.cli.optimize", "kernelevo.judge.api", "kernelevo.evolution.loop",
            "kernelevo.archive.migrations", "kernelevo.agent.prompting", "kernelevo.runtime.cuda"} <= set(known)
    assert all(path.is_file() for path in known.values())


def test_no_module_is_over_the_size_guide():
    long = {name: n for name, path in modules().items() if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, f"split these modules (lines): {long}"


def test_every_module_says_what_it_owns():
    bare = [name for name, path in modules().items() if not ast.get_docstring(ast.parse(path.read_text()))]
    assert not bare, f"modules without a docstring: {bare}"


def test_no_import_circles():
    known = modules()
    graph = {name: imports_of(name, path, known) for name, path in known.items()}
    assert not circles(graph), "modules that import each other, directly or around a circle: " + \
        "; ".join(" <-> ".join(group) for group in circles(graph))


def test_the_reader_sees_circles_and_type_only_imports():
    """The checker itself: a circle through a function-level import is seen; a type-only one is not."""
    a = ast.parse("def f():\n    from pkg import b\n")
    typed = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.b\n")
    assert [n.names[0].name for n in _imports(a)] == ["b"]
    assert [(getattr(n, "module", None), n.names[0].name) for n in _imports(typed)] == [("typing", "TYPE_CHECKING")]
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []
