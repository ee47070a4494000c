"""The house rules, read from the code itself: every Python module of the packages says what it
owns in a docstring and stays under 450 lines, and no module imports, at any depth and from any
place (a function's body included), a module that imports it back. Imports run one way between
floors and rooms: the ground (kernelevo/ outside cli/) imports no room and not the face (cli/);
nothing outside the face imports it; outside the judge only its door (the package, api, verdicts)
is imported; nothing in evolution imports the drivers above its loop but the drivers. An import
under `if TYPE_CHECKING:` is for the type checker only and does not count. Modules are found
through pyproject.toml's package-dir, as the installed package is."""
import ast
import functools
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 450


@functools.cache  # every test below reads the same modules, and none changes them: found and parsed once
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


@functools.cache
def tree(path: Path) -> ast.Module:
    """The module at `path`, parsed."""
    return ast.parse(path.read_text(), str(path))


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
    for node in _imports(tree(path)):
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
    bare = [name for name, path in modules().items() if not ast.get_docstring(tree(path))]
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


ROOMS = ("kernelevo.judge", "kernelevo.agent", "kernelevo.evolution", "kernelevo.archive", "kernelevo.prompts")
FACE = "kernelevo.cli"
JUDGE_DOOR = {"kernelevo.judge", "kernelevo.judge.api", "kernelevo.judge.verdicts"}
DRIVERS = "kernelevo.evolution.drivers"


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


@functools.cache
def edges() -> list[tuple[str, str]]:
    """Every (importer, imported) pair of project modules, read from the code."""
    known = modules()
    return sorted((name, target) for name, path in known.items() for target in imports_of(name, path, known))


def _offending(rule) -> str:
    """The imports that break `rule(importer, imported)`, one `importer -> imported` per line."""
    return "\n".join(f"{a} -> {b}" for a, b in edges() if rule(a, b))


def _ground(name: str) -> bool:
    return _within(name, "kernelevo") and not any(_within(name, p) for p in ROOMS + (FACE,))


def test_the_ground_imports_no_room_and_not_the_face():
    """kernelevo/ outside cli/ (records, config, formats, text, runtime ...) sits under every room."""
    bad = _offending(lambda a, b: _ground(a) and not _ground(b))
    assert not bad, f"the ground imports a room or the face:\n{bad}"


def test_nothing_outside_the_face_imports_it():
    bad = _offending(lambda a, b: not _within(a, FACE) and _within(b, FACE))
    assert not bad, f"imports of kernelevo.cli from outside it:\n{bad}"


def test_outside_the_judge_only_its_door_is_imported():
    bad = _offending(lambda a, b: not _within(a, "kernelevo.judge") and _within(b, "kernelevo.judge")
                     and b not in JUDGE_DOOR)
    assert not bad, f"imports past the judge's door (kernelevo.judge, .api, .verdicts):\n{bad}"


def test_only_the_drivers_import_the_drivers():
    """bench, rejudge and a whole model in parts call the loop; the loop's side never calls them."""
    bad = _offending(lambda a, b: _within(a, "kernelevo.evolution") and not _within(a, DRIVERS)
                     and _within(b, DRIVERS))
    assert not bad, f"evolution modules that import evolution.drivers:\n{bad}"


def test_the_runtime_is_used_by_its_public_names():
    """Candidates and the judge share runtime's exported helpers; its _common is its own."""
    bad = _offending(lambda a, b: b == "kernelevo.runtime._common" and not _within(a, "kernelevo.runtime"))
    assert not bad, f"imports of kernelevo.runtime._common from outside the runtime:\n{bad}"


def test_the_judges_trials_read_formats_from_the_ground():
    bad = _offending(lambda a, b: _within(a, "kernelevo.judge.trials") and _within(b, "kernelevo.judge.run"))
    assert not bad, f"the judge's trials import its run package:\n{bad}"


def test_the_readme_is_short_and_links_every_docs_page():
    """The README is the newcomer's page: at most 250 lines, the two set-up commands near the top, every page of
    docs/ linked from it, and every link to docs/ a page that exists."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    linked = set(re.findall(r"\]\(docs/([\w-]+\.md)\)", readme))
    assert pages and linked == pages, (pages - linked, linked - pages)
    setup = readme.split("## Set up", 1)[1].split("\n## ", 1)[0]
    assert [line for line in setup.splitlines() if line.startswith("pip install")] == [
        "pip install -e . && kernelevo evaluate benchmarks/tasks/row_softmax.py "
        "benchmarks/tasks/candidates/row_softmax__nvrtc.py",
        'pip install -e ".[test]" && python -m pytest -n 3 --dist loadfile']


FUNCTION_LINES = 60


def test_no_function_is_longer_than_a_screen():
    long = {f"{name}.{node.name}": node.end_lineno - node.lineno + 1
            for name, path in modules().items() for node in ast.walk(tree(path))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > FUNCTION_LINES}
    assert not long, f"split these functions (lines): {long}"


def test_a_verdict_is_compared_by_its_member_not_its_text():
    """`verdict == Verdict.OK` (or the judge's `passed(result)`), not `== "ok"`: the literal is left only where "ok"
    is an LLM call's outcome, not a verdict."""
    literal = re.compile(r'[=!]= "ok"|"ok" [=!]=|in \("ok"|"ok" (?:not )?in\b')
    found = {name: n for name, path in modules().items() if (n := len(literal.findall(path.read_text())))}
    assert found == {"kernelevo.evolution.loop.children": 1}, found  # proposal.calls' outcome


# Names that 3 or more settings records share: none (issue 53: 11, then 6, then 5). The CLI hands the library
# overrides, not records of its own (evolution/settings.py), and the run's one seed is the judge's branch's.
SHARED_SETTING_NAMES: set[str] = set()


def test_a_setting_is_not_copied_through_record_after_record():
    """The settings records (dataclasses named *Options, *Settings, *Limits, *Args, Config, Job): a judge setting
    used to walk through four of them, copied by hand; now each component's branch is handed on whole."""
    shared: dict[str, set[str]] = {}
    for path in modules().values():
        for node in tree(path).body:
            if isinstance(node, ast.ClassDef) and re.search(r"Options|Settings|Limits|Args|Config|Job|Spec", node.name) \
                    and any("dataclass" in ast.unparse(d) for d in node.decorator_list):
                for item in node.body:
                    if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                        shared.setdefault(item.target.id, set()).add(node.name)
    many = {name: sorted(records) for name, records in shared.items() if len(records) >= 3}
    assert set(many) <= SHARED_SETTING_NAMES, many


def test_the_archive_hands_out_records_not_dicts():
    """Every public read of the archive returns records (archive/records.py) or plain values, maps of them included:
    a row as a dict of column names is the export's alone (each is one JSON line)."""
    import inspect

    from kernelevo.archive.store import Archive

    returns = {name: str(inspect.signature(getattr(Archive, name)).return_annotation)
               for name in dir(Archive) if not name.startswith("_") and callable(getattr(Archive, name))}
    assert {name for name, r in returns.items() if re.search(r"\bdict\b(?!\[)", r)} == {"export_rows"}, returns


def test_the_archive_is_made_of_parts_and_delegates_each_of_their_methods():
    """Archive by composition: each public method of a part (runs, kernels, embeddings, calls, benches) is one of
    Archive's, calling that part's code; Archive adds only opening and closing."""
    import inspect

    from kernelevo.archive.store import PARTS, Archive

    own = {"open", "open_readonly", "close", "applied_migrations"}
    public = {name for name in dir(Archive) if not name.startswith("_") and callable(getattr(Archive, name))}
    by_part = {attr: {n for n, f in vars(cls).items() if not n.startswith("_") and inspect.isfunction(f)}
               for attr, cls in PARTS.items()}
    assert sum(len(names) for names in by_part.values()) == len(set().union(*by_part.values()))  # one owner a name
    assert public - own == set().union(*by_part.values())
    for attr, cls in PARTS.items():
        for name in by_part[attr]:
            forward = getattr(Archive, name)
            assert forward.__wrapped__ is getattr(cls, name) and forward.part == attr, name
            assert not issubclass(cls, Archive) and not issubclass(Archive, cls)
