"""The layering the README promises, checked from the source with ``ast``.

1. The engine (``memory/``) imports nothing above it: not ``bot``, ``adapters``, ``benchmarks`` or the
   evaluation package, and no platform library. Every import statement counts, including those inside functions and
   under ``if TYPE_CHECKING:``, since a deferred import is still a dependency.
2. The first-party packages (``bot``, ``adapters``, ``memory``, ``benchmarks``, ``evaluation``) import
   each other without circles, counting module-level and function-level imports alike.
3. Adapters translate and nothing more: of the first-party code they import only ``bot`` and
   ``memory.models`` (and each other), so every message reaches the store through the bot's one door.

How an import becomes an edge of the graph: ``import a.b.c`` is an edge to ``a.b.c``;
``from a.b import c`` is an edge to the module ``a.b.c`` when there is one, else to ``a.b`` (the
package's ``__init__``, where the name ``c`` is defined); relative imports are resolved first.
Importing ``a.b.c`` also runs ``a/__init__`` and ``a/b/__init__``, but that implied edge is not
drawn: otherwise every package whose ``__init__`` re-exports a submodule would be a circle with
each of its submodules, which is harmless, because the submodule never needs the half-run
``__init__``. A circle is drawn only when a submodule names the package itself
(``from . import name`` for a name defined in ``__init__``, or ``from memory.x import Y`` inside
``memory/x/...``), which is the case that breaks on a partly initialised package.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("bot", "adapters", "memory", "benchmarks", "evaluation")
ENGINE = "memory"
ABOVE_ENGINE = ("bot", "adapters", "benchmarks", "evaluation", "discord", "slack_sdk", "slack_bolt", "aiohttp")
ADAPTERS = "adapters"
ADAPTERS_MAY_IMPORT = ("bot", "memory.models", "adapters")


@dataclass(frozen=True)
class Import:
    """One imported module name and where the import statement is."""

    source: str
    target: str
    path: Path
    line: int

    def where(self, root: Path) -> str:
        return f"{self.path.relative_to(root)}:{self.line}"


def find_modules(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    """Module name -> file, for every ``.py`` under the named top-level packages."""
    modules: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module name a ``from ... import`` statement starts from."""
    if node.level == 0:
        return node.module or ""
    package = module.split(".") if is_package else module.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)] if node.level > 1 else package
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(module: str, path: Path, known: set[str] | dict[str, Path] = frozenset()) -> list[Import]:
    """Every module ``module`` imports, anywhere in its file.

    ``from pkg import name`` yields ``pkg.name`` when that is one of the ``known`` modules, else ``pkg``.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    found: list[Import] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [Import(module, alias.name, path, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, is_package, node)
            for alias in node.names:
                sub = f"{base}.{alias.name}" if base else alias.name
                found.append(Import(module, sub if sub in known else base, path, node.lineno))
    return found


def layer_violations(root: Path, engine: str, forbidden: tuple[str, ...]) -> list[str]:
    """``file:line imports name`` for each import in ``engine`` of a forbidden top-level package."""
    bad: list[str] = []
    for module, path in find_modules(root, (engine,)).items():
        for imp in imports_of(module, path):
            line = f"{imp.where(root)} ({module}) imports {imp.target}"
            if imp.target.split(".")[0] in forbidden and line not in bad:
                bad.append(line)
    return bad


def import_graph(root: Path, packages: tuple[str, ...]) -> dict[str, dict[str, Import]]:
    """First-party module -> {imported first-party module: the first import statement naming it}."""
    modules = find_modules(root, packages)
    graph: dict[str, dict[str, Import]] = {name: {} for name in modules}
    for module, path in modules.items():
        for imp in imports_of(module, path, modules):
            if imp.target in modules:
                graph[module].setdefault(imp.target, imp)
    return graph


def cycles(graph: dict[str, dict[str, Import]]) -> list[list[str]]:
    """The strongly connected components with a circle in them (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph[node]:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def describe(component: list[str], graph: dict[str, dict[str, Import]], root: Path) -> str:
    """One circle through the component, as the import statements that make it."""
    members = set(component)
    start = component[0]
    # Breadth-first from start back to start, inside the component.
    paths = {start: [start]}
    queue = [start]
    loop: list[str] = []
    while queue and not loop:
        node = queue.pop(0)
        for nxt in sorted(graph[node]):
            if nxt == start:
                loop = paths[node] + [start]
                break
            if nxt in members and nxt not in paths:
                paths[nxt] = paths[node] + [nxt]
                queue.append(nxt)
    steps = [f"    {a} -> {b}  ({graph[a][b].where(root)})" for a, b in zip(loop, loop[1:])]
    return f"  circle among {', '.join(component)}:\n" + "\n".join(steps)


def _report(components: list[list[str]], graph: dict[str, dict[str, Import]], root: Path) -> str:
    return "import circles:\n" + "\n".join(describe(c, graph, root) for c in components)


# ---- the checks on this repository -----------------------------------------

def test_engine_imports_nothing_above_it():
    bad = layer_violations(ROOT, ENGINE, ABOVE_ENGINE)
    assert not bad, "memory/ must not import bot, adapters, benchmarks or a platform library:\n" + "\n".join(bad)


def adapter_violations(root: Path, adapters: str, allowed: tuple[str, ...], first_party: tuple[str, ...]) -> list[str]:
    """``file:line imports name`` for each first-party import in ``adapters`` outside ``allowed``."""
    bad: list[str] = []
    for module, path in find_modules(root, (adapters,)).items():
        for imp in imports_of(module, path):
            if imp.target.split(".")[0] not in first_party:
                continue  # the platform libraries and the standard library are theirs to use
            if not any(imp.target == a or imp.target.startswith(a + ".") for a in allowed):
                bad.append(f"{imp.where(root)} ({module}) imports {imp.target}")
    return bad


def test_adapters_import_only_the_bot_and_the_message_model():
    bad = adapter_violations(ROOT, ADAPTERS, ADAPTERS_MAY_IMPORT, PACKAGES)
    assert not bad, "adapters/ may import only bot and memory.models of our code:\n" + "\n".join(bad)


def test_store_and_privacy_import_no_adapter_and_the_engine_no_evaluation():
    for module, path in find_modules(ROOT, (ENGINE,)).items():
        for imp in imports_of(module, path):
            top = imp.target.split(".")[0]
            assert top != "evaluation", f"{imp.where(ROOT)}: the engine imports the evaluation package"
            if module.startswith(("memory.store", "memory.privacy")):
                assert top != "adapters", f"{imp.where(ROOT)}: {module} imports {imp.target}"


def test_no_import_cycles():
    graph = import_graph(ROOT, PACKAGES)
    found = cycles(graph)
    assert not found, _report(found, graph, ROOT)


def test_every_package_is_walked():
    modules = find_modules(ROOT, PACKAGES)
    for package in PACKAGES:
        assert package in modules, f"{package}/__init__.py not found"
    assert "memory.datasets.loaders" in modules and "benchmarks.load" in modules and "evaluation.answer" in modules


# ---- the checker itself: it must be able to fail ---------------------------

def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_checker_flags_an_engine_import_inside_a_function(tmp_path):
    _write(tmp_path, {
        "eng/__init__.py": "",
        "eng/ok.py": "import json\nfrom . import util\n",
        "eng/util.py": "def f():\n    from bot.app import Bot\n    return Bot\n",
        "eng/deep/__init__.py": "",
        "eng/deep/plat.py": "import slack_sdk.web\nfrom ..util import f\n",
    })
    bad = layer_violations(tmp_path, "eng", ABOVE_ENGINE)
    assert len(bad) == 2
    assert any("eng/util.py:2" in b and "bot.app" in b for b in bad)
    assert any("eng/deep/plat.py:1" in b and "slack_sdk.web" in b for b in bad)


def test_adapter_checker_flags_a_store_import(tmp_path):
    _write(tmp_path, {
        "ad/__init__.py": "",
        "ad/ok.py": "import json\nimport discord\nfrom bot.actions import Actions\nfrom memory.models import Message\n",
        "ad/bad.py": "def f():\n    from memory.store import Store\n    from memory import privacy\n",
        "bot/__init__.py": "", "memory/__init__.py": "", "memory/models.py": "", "memory/store.py": "",
        "memory/privacy.py": "",
    })
    bad = adapter_violations(tmp_path, "ad", ("bot", "memory.models", "ad"), ("ad", "bot", "memory"))
    assert len(bad) == 2 and all("ad/bad.py" in b for b in bad)


def test_checker_resolves_relative_imports(tmp_path):
    _write(tmp_path, {
        "pa/__init__.py": "from .x import X\n",
        "pa/x.py": "X = 1\n",
        "pa/sub/__init__.py": "",
        "pa/sub/y.py": "from .. import x\nfrom ..x import X\nfrom . import z\nfrom .z import Z\nfrom pa import X\n",
        "pa/sub/z.py": "Z = 2\n",
    })
    graph = import_graph(tmp_path, ("pa",))
    assert set(graph["pa.sub.y"]) == {"pa.x", "pa.sub.z", "pa"}
    assert set(graph["pa"]) == {"pa.x"}


def test_checker_flags_a_cycle_and_names_its_imports(tmp_path):
    _write(tmp_path, {
        "pa/__init__.py": "",
        "pa/a.py": "from .b import B\nA = 1\n",
        "pa/b.py": "B = 2\ndef late():\n    from pa.c import C\n    return C\n",
        "pa/c.py": "import pa.a\nC = 3\n",
        "pb/__init__.py": "import pa.a\n",
    })
    graph = import_graph(tmp_path, ("pa", "pb"))
    found = cycles(graph)
    assert found == [["pa.a", "pa.b", "pa.c"]]
    text = _report(found, graph, tmp_path)
    assert "pa.a -> pa.b  (pa/a.py:1)" in text and "pa.b -> pa.c  (pa/b.py:3)" in text
    assert "pa.c -> pa.a  (pa/c.py:1)" in text


def test_package_init_reexporting_submodules_is_no_cycle_until_one_imports_it_back(tmp_path):
    _write(tmp_path, {
        "pa/__init__.py": "from .a import A\nfrom .b import B\n",
        "pa/a.py": "A = 1\n",
        "pa/b.py": "from .a import A\nB = A\n",
    })
    assert cycles(import_graph(tmp_path, ("pa",))) == []
    (tmp_path / "pa/b.py").write_text("from . import A\nB = A\n", encoding="utf-8")
    assert cycles(import_graph(tmp_path, ("pa",))) == [["pa", "pa.b"]]
