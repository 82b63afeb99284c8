"""The import graph of ``attnsvm``, read from the source: no circle, no upward arrow.

The graph is built with ``ast`` from every module of ``lib/attnsvm`` (the build is the sibling
package ``attnsvm_book``, outside this graph; its own layering: ``tests/test_build_layout.py``):

* every ``import``/``from ... import`` counts, at module level or inside a function;
* relative imports are resolved against the importing module;
* ``from pkg import name`` points to the submodule ``pkg.name`` when there is one, else to the
  submodule whose definition the package re-exports (followed through the package's
  ``__init__``), else to the package;
* importing a submodule of a package from outside that package also runs the package's
  ``__init__``, so it adds an arrow to the package too.

Rules: no cycle; a chapter driver (``attnsvm.experiments.*``) imports only core modules, never
another driver; a core module never imports a driver; a function-level import of a module of
``attnsvm`` is a hidden arrow and is not allowed (a function-level import only defers a heavy
third-party dependency, see ``DEFERRABLE``).
"""
from __future__ import annotations

import ast
import re
import shutil
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "lib"
PKG = "attnsvm"
EXCLUDE: tuple = ()
#: third-party packages that a function may import late (heavy or optional)
DEFERRABLE = {"torch", "cvxpy", "matplotlib", "myst_nb", "IPython", "pandas", "pyarrow",
              "transformers", "huggingface_hub", "dask", "distributed", "tqdm", "sklearn",
              "datasets", "PIL", "threadpoolctl"}


def _modules(src=SRC, pkg=PKG):
    out = {}
    for p in sorted((src / pkg).rglob("*.py")):
        name = ".".join(p.relative_to(src).with_suffix("").parts)
        if name.endswith(".__init__"):
            name = name[: -len(".__init__")]
        if not any(name == e or name.startswith(e + ".") for e in EXCLUDE):
            out[name] = p
    return out


def _is_pkg(mods, name):
    return mods[name].name == "__init__.py"


def _imports(path):
    """(target, imported names or None, level, module-level?, line) of every import of a file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    top = {id(n) for n in tree.body}
    for node in tree.body:                      # module-level blocks (if/try) count as top level
        if isinstance(node, (ast.If, ast.Try)):
            top |= {id(n) for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom))}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, None, 0, id(node) in top, node.lineno
        elif isinstance(node, ast.ImportFrom):
            yield node.module or "", [a.name for a in node.names], node.level, id(node) in top, node.lineno


def _absolute(mods, importer, target, level):
    if not level:
        return target
    base = importer if _is_pkg(mods, importer) else importer.rsplit(".", 1)[0]
    parts = base.split(".")
    anchor = ".".join(parts[: len(parts) - level + 1])
    return anchor + ("." + target if target else "")


def _defining(mods, pkg, name, seen=()):
    """The submodule that defines ``name`` as re-exported by package ``pkg`` (or ``pkg``)."""
    if pkg + "." + name in mods:
        return pkg + "." + name
    if pkg not in mods or not _is_pkg(mods, pkg) or pkg in seen:
        return pkg
    for target, names, level, _, _ in _imports(mods[pkg]):
        if names and name in names:
            src = _absolute(mods, pkg, target, level)
            if src in mods:
                return _defining(mods, src, name, seen + (pkg,)) if _is_pkg(mods, src) else src
    return pkg


def _owner(mods, name):
    """The longest module of the graph that ``name`` (a dotted import path) lies in."""
    while name and name not in mods:
        name = name.rsplit(".", 1)[0] if "." in name else ""
    return name


def build_graph(src=SRC, pkg=PKG):
    """``(graph, late)``: graph[m] = set of modules m imports; late = [(m, target, line)] for
    function-level imports of modules of the package."""
    mods = _modules(src, pkg)
    graph, late = defaultdict(set), []
    for m, path in mods.items():
        for target, names, level, toplevel, line in _imports(path):
            absolute = _absolute(mods, m, target, level)
            if absolute.split(".")[0] != pkg or any(absolute == e or absolute.startswith(e + ".")
                                                    for e in EXCLUDE):
                continue
            hits = set()
            if names is None:
                hits.add(_owner(mods, absolute))
            else:
                for n in names:
                    hits.add(_owner(mods, _defining(mods, absolute, n) if absolute in mods else absolute))
            for t in list(hits):                 # a package's __init__ runs when entered from outside
                parts = t.split(".")
                for k in range(1, len(parts)):
                    parent = ".".join(parts[:k])
                    if parent in mods and not (m == parent or m.startswith(parent + ".")):
                        hits.add(parent)
            for t in hits:
                if t and t != m:
                    graph[m].add(t)
                    if not toplevel:
                        late.append((m, t, line))
    for m in mods:
        graph.setdefault(m, set())
    return dict(graph), late


def find_cycles(graph):
    """Strongly connected components with more than one module (or a self-loop), each as a
    closed path ``[a, b, ..., a]`` through the component."""
    index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph.get(v, ()):
                comps.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_path(graph, c) for c in comps]


def _path(graph, comp):
    """A closed path through a strongly connected component, from its first module."""
    start, members = comp[0], set(comp)
    prev, frontier = {start: None}, [start]
    while frontier:                                   # breadth first, back to start
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & members):
                if w == start:
                    path = [v]
                    while prev[path[-1]] is not None:
                        path.append(prev[path[-1]])
                    return [start] + path[::-1][1:] + [start] if len(path) > 1 else [start, v, start]
                if w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return comp


def _is_driver(m):
    return m.startswith(PKG + ".experiments.")


def test_no_import_cycle():
    graph, _ = build_graph()
    cycles = find_cycles(graph)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


#: driver-to-driver arrows still to remove, each with who removes it; the test fails when one of
#: them is gone, so that its entry is deleted with it
PENDING: dict = {}


def layering_violations(graph, pkg=PKG):
    """Arrows from a driver to another driver, and from a core module to a driver."""
    drivers = pkg + ".experiments"
    bad = []
    for m, targets in graph.items():
        for t in targets:
            t_driver = t == drivers or t.startswith(drivers + ".")
            if m.startswith(drivers + ".") and t_driver:
                bad.append(f"driver {m} imports driver {t}")
            elif not (m == drivers or m.startswith(drivers + ".")) and t_driver:
                bad.append(f"core module {m} imports driver {t}")
    return sorted(bad)


def test_drivers_import_only_the_core_and_the_core_no_driver():
    graph = build_graph()[0]
    bad = [b for b in layering_violations(graph)
           if not any(b == f"driver {m} imports driver {t}" for m, t in PENDING)]
    assert not bad, "\n".join(bad)
    gone = [k for k in PENDING if k[1] not in graph.get(k[0], ())]
    assert not gone, f"remove the resolved entries {gone} from PENDING"


def test_no_hidden_internal_import_in_a_function():
    _, late = build_graph()
    assert not late, "function-level imports of attnsvm modules (move them to the top):\n" + "\n".join(
        f"{m}:{line} imports {t}" for m, t, line in sorted(late))


def test_function_level_imports_defer_only_heavy_dependencies():
    """A function-level import defers a package of ``DEFERRABLE`` and says so in a comment."""
    bad = []
    for m, path in _modules().items():
        lines = path.read_text().splitlines()
        for target, names, level, toplevel, line in _imports(path):
            root = target.split(".")[0]
            if toplevel or level or root == PKG or root == "__future__":
                continue
            if root not in DEFERRABLE:
                bad.append(f"{m}:{line} imports {target} inside a function")
            elif "# deferred" not in lines[line - 1]:
                bad.append(f"{m}:{line} defers {target} without a '# deferred: ...' comment")
    assert not bad, "\n".join(bad)


# ----------------------------------------------------------------------------- the layers
#: the library's layers, bottom up: a module imports only modules of the layers below its own (a
#: package's modules count as the package; arrows inside a package are its own business). This is
#: the one list: CONTRIBUTING.md shows it (``contributing_layers``), and a new module fails here
#: until it is placed.
LAYERS = (
    ("_checks", "_env"),                                    # argument checks, environment names
    ("tokens", "norms", "devices", "history", "plot", "claims", "jacobian"),
    ("data", "metrics", "optim"),
    ("losses", "graphs", "datasets"),
    ("models", "svm", "path"),
    ("bounds", "train", "reduced"),
    ("runs",),
    ("experiments",),
)

CONTRIBUTING = SRC.parent / "CONTRIBUTING.md"


def _top(m, pkg=PKG):
    """The top-level module of ``pkg`` that module ``m`` belongs to (``None`` for ``pkg`` itself)."""
    parts = m.split(".")
    return parts[1] if len(parts) > 1 else None


def layer_violations(graph, layers=LAYERS, pkg=PKG):
    """Arrows against ``layers``: a module importing one of its own layer or of a layer above, and
    modules that no layer lists."""
    where = {m: k for k, layer in enumerate(layers) for m in layer}
    bad = set()
    for m, targets in graph.items():
        a = _top(m, pkg)
        if a is None:
            continue
        if a not in where:
            bad.add(f"{a} is in no layer of LAYERS")
            continue
        for t in targets:
            b = _top(t, pkg)
            if b is None or b == a:
                continue
            if b not in where:
                bad.add(f"{b} is in no layer of LAYERS")
            elif where[b] >= where[a]:
                bad.add(f"{a} (layer {where[a]}) imports {b} (layer {where[b]})")
    return sorted(bad)


def test_every_arrow_points_down_the_layers():
    bad = layer_violations(build_graph()[0])
    assert not bad, "arrows against the layers (tests/test_imports.py::LAYERS):\n" + "\n".join(bad)


def test_planted_arrows_against_the_layers_are_found(tmp_path):
    """An arrow up, an arrow inside a layer and an unlisted module are each caught; an arrow down
    and an arrow inside a package are not."""
    _write(tmp_path, {
        "attnsvm/__init__.py": "",
        "attnsvm/low.py": "from .high import f\n",                 # up
        "attnsvm/mid.py": "from .low import g\nfrom .twin import h\n",   # down, and inside its layer
        "attnsvm/twin.py": "def h():\n    pass\n",
        "attnsvm/high.py": "from .pkg import k\nfrom .stray import s\n\ndef f():\n    pass\n",
        "attnsvm/stray.py": "def s():\n    pass\n",
        "attnsvm/pkg/__init__.py": "from .a import k\n",
        "attnsvm/pkg/a.py": "from .b import j\n\ndef k():\n    pass\n",
        "attnsvm/pkg/b.py": "def j():\n    pass\n",
    })
    layers = (("low",), ("mid", "twin"), ("pkg",), ("high",))
    graph = build_graph(tmp_path, PKG)[0]
    assert layer_violations(graph, layers) == [
        "low (layer 0) imports high (layer 3)",
        "mid (layer 1) imports twin (layer 1)",
        "stray is in no layer of LAYERS",
    ]
    graph["attnsvm.low"] = set()
    graph["attnsvm.mid"] = {"attnsvm.low"}
    assert layer_violations(graph, layers) == ["stray is in no layer of LAYERS"]


def contributing_layers(layers=LAYERS):
    """The sentence of CONTRIBUTING.md that shows the layers, written from ``layers``."""
    return "The layers, bottom up: " + " → ".join(", ".join(f"`{m}`" for m in layer) for layer in layers) + "."


def _one_line(text):
    return " ".join(text.split())


def test_contributing_shows_the_layers():
    """CONTRIBUTING.md shows LAYERS as written here (line breaks aside); a planted swap of two
    layers is not found in the text."""
    text = _one_line(CONTRIBUTING.read_text())
    assert contributing_layers() in text, (
        "CONTRIBUTING.md must show the layers of tests/test_imports.py::LAYERS as:\n" + contributing_layers())
    swapped = LAYERS[:2] + (LAYERS[3], LAYERS[2]) + LAYERS[4:]
    assert contributing_layers(swapped) not in text


# ----------------------------------------------------------------------------- the test can fail

def _write(root, files):
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


def test_a_planted_cycle_through_a_reexport_and_a_function_is_found(tmp_path):
    """``a`` imports ``f`` from the package ``sub``, whose ``__init__`` re-exports it from
    ``sub.deep``; ``sub.deep`` imports ``a`` inside a function: a cycle a -> sub.deep -> a."""
    _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from .sub import f\n",
        "pkg/b.py": "X = 1\n",
        "pkg/sub/__init__.py": "from .deep import f\n",
        "pkg/sub/deep.py": "from ..b import X\n\ndef f():\n    from .. import a\n    return a\n",
    })
    graph, late = build_graph(tmp_path, "pkg")
    assert "pkg.sub.deep" in graph["pkg.a"] and "pkg.sub" in graph["pkg.a"]
    cycles = find_cycles(graph)
    assert cycles and {"pkg.a", "pkg.sub.deep"} <= set(cycles[0])
    assert cycles[0][0] == cycles[0][-1]
    assert ("pkg.sub.deep", "pkg.a", 4) in late
    # without the function-level import there is no cycle
    _write(tmp_path, {"pkg/sub/deep.py": "from ..b import X\n\ndef f():\n    return X\n"})
    assert find_cycles(build_graph(tmp_path, "pkg")[0]) == []


def test_planted_upward_arrows_are_found(tmp_path):
    _write(tmp_path, {
        "attnsvm/__init__.py": "", "attnsvm/core.py": "from .experiments import two\n",
        "attnsvm/experiments/__init__.py": "",
        "attnsvm/experiments/one.py": "from .two import g\n",
        "attnsvm/experiments/two.py": "def g():\n    pass\n",
    })
    bad = layering_violations(build_graph(tmp_path, PKG)[0])
    assert bad == ["core module attnsvm.core imports driver attnsvm.experiments",
                   "core module attnsvm.core imports driver attnsvm.experiments.two",
                   "driver attnsvm.experiments.one imports driver attnsvm.experiments.two"]


# ----------------------------------------------------------------------------- one home per concept
#: the name endings of a driver's entry points (any other public function of a driver must return
#: one of the driver's result classes)
ENTRY_SUFFIXES = ("_experiment", "_study", "_sweep")

#: public names of drivers that are neither result classes nor entry points: mathematics or
#: helpers still to move to a core home or to make private (issue 28). The test fails when one of
#: them is gone or has become an entry point, so that its entry is deleted with it; a new name
#: that is not an entry point or a result class fails at once.
DRIVER_PENDING = {
}


def _is_result_class(node):
    """A dataclass, a NamedTuple or a dict subclass: a container of a driver's results."""
    decos = {d.func.id if isinstance(d, ast.Call) and isinstance(d.func, ast.Name) else getattr(d, "id", None)
             for d in node.decorator_list}
    bases = {getattr(b, "id", getattr(b, "attr", None)) for b in node.bases}
    return "dataclass" in decos or bool(bases & {"NamedTuple", "dict"})


def driver_surface(path):
    """``(result classes, other public names)`` of a driver module, read with ``ast``.

    Public: a module-level name without a leading underscore. A result class is a dataclass, a
    NamedTuple, a dict subclass or a subclass of one of these defined in the module; an entry point
    is a function named ``*_experiment``, ``*_study`` or ``*_sweep``, or one that returns a result
    class of the module (``return Result(...)``). Module-level UPPER_CASE constants are the
    documented settings of the entry points and count as neither.
    """
    tree = ast.parse(Path(path).read_text())
    results = {n.name for n in tree.body if isinstance(n, ast.ClassDef) and _is_result_class(n)}
    for n in tree.body:
        if isinstance(n, ast.ClassDef) and {getattr(b, "id", None) for b in n.bases} & results:
            results.add(n.name)
    other = []
    for n in tree.body:
        if isinstance(n, ast.ClassDef) and not n.name.startswith("_") and n.name not in results:
            other.append(n.name)
        elif isinstance(n, ast.FunctionDef) and not n.name.startswith("_"):
            returned = {r.value.func.id for r in ast.walk(n) if isinstance(r, ast.Return)
                        and isinstance(r.value, ast.Call) and isinstance(r.value.func, ast.Name)}
            if not (n.name.endswith(ENTRY_SUFFIXES) or returned & results):
                other.append(n.name)
        elif isinstance(n, (ast.Assign, ast.AnnAssign)):
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            other += [t.id for t in targets if isinstance(t, ast.Name) and not t.id.startswith("_")
                      and t.id != "__all__" and not t.id.isupper()]
    return results, other


def _drivers():
    return {p.stem: p for p in sorted((SRC / PKG / "experiments").glob("*.py")) if p.stem != "__init__"}


#: the longest a driver module may be (issue 28): past it, split it by chapter or move mathematics out
DRIVER_MAX_LINES = 700


def test_no_driver_over_700_lines():
    """Issue 28: a driver is an entry point and its result class, not a library; the longest is
    672 lines today, so a driver that grows by a tenth is caught."""
    long = {name: n for name, p in _drivers().items()
            if (n := len(p.read_text().splitlines())) > DRIVER_MAX_LINES}
    assert not long, f"drivers over {DRIVER_MAX_LINES} lines (split by chapter, or move mathematics out): {long}"


def test_drivers_expose_only_result_classes_and_entry_points():
    """Drivers own no mathematics: their public names are result classes and entry points (the
    names of DRIVER_PENDING are the debt still to move, and may only shrink)."""
    new, gone = [], []
    for name, path in _drivers().items():
        other = set(driver_surface(path)[1])
        pending = DRIVER_PENDING.get(name, set())
        new += [f"{name}.{n}" for n in sorted(other - pending)]
        gone += [f"{name}.{n}" for n in sorted(pending - other)]
    assert not new, ("driver names that are neither a result class nor an entry point (move the "
                     "mathematics to a core module, or make it private): " + ", ".join(new))
    assert not gone, "remove these resolved entries from DRIVER_PENDING: " + ", ".join(gone)


def test_driver_surface_can_fail(tmp_path):
    """A planted helper in a driver is caught; a result class, its entry point and an
    ``*_experiment`` are not."""
    p = tmp_path / "toy.py"
    p.write_text("from dataclasses import dataclass\n\n@dataclass\nclass Run:\n    x: int\n\n"
                 "def toy_experiment():\n    return 1\n\ndef compare():\n    return Run(1)\n\n"
                 "def excess(W):\n    return W\n\nLIMIT = 3\nlabels = {}\n")
    results, other = driver_surface(p)
    assert results == {"Run"} and other == ["excess", "labels"]


def public_definitions(src=SRC, pkg=PKG):
    """Public module-level function and class names -> the modules of ``lib/attnsvm`` that
    define them."""
    out = defaultdict(list)
    for m, path in _modules(src, pkg).items():
        for n in ast.parse(path.read_text()).body:
            if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and not n.name.startswith("_"):
                out[n.name].append(m)
    return out


def test_no_function_is_defined_twice():
    """One definition per name in the library (a re-export is an import, not a definition)."""
    twice = {k: v for k, v in public_definitions().items() if len(v) > 1}
    assert not twice, f"defined in more than one module: {twice}"


def test_one_definition_test_can_fail(tmp_path):
    _write(tmp_path, {"pkg/__init__.py": "", "pkg/a.py": "def f():\n    pass\n",
                      "pkg/b.py": "def f():\n    return 1\n\ndef _g():\n    pass\n",
                      "pkg/c.py": "def _g():\n    pass\n"})
    assert dict(public_definitions(tmp_path, "pkg")) == {"f": ["pkg.a", "pkg.b"]}


#: shape pairs of ``duplicates`` inside lib/attnsvm reviewed as not one concept written twice,
#: by the files and the names of the definitions both sides lie in (line numbers move)
REVIEWED_PAIRS = {
    # input checks of different things (shape, a real number, an integer): alike raise lines
    ("_checks.py", "check_positive", "_checks.py", "check_int"),
    ("_checks.py", "as_float_array", "_checks.py", "check_positive"),
}


def _enclosing(path, line):
    """The name of the module-level definition (def, class or assignment) holding ``line``."""
    for n in ast.parse(path.read_text()).body:
        if n.lineno <= line <= (n.end_lineno or n.lineno):
            if isinstance(n, (ast.FunctionDef, ast.ClassDef)):
                return n.name
            if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name):
                return n.targets[0].id
    return None


def duplicate_pairs(root):
    """The pairs ``duplicates`` reports inside ``root`` that it does not mark as boilerplate:
    ``(file, name, file, name)`` with the definitions each side lies in."""
    out = subprocess.run(["duplicates", "--repo", str(root), "--most", "200", "--seconds", "60"],
                         capture_output=True, text=True, check=True).stdout
    assert "incomplete:" not in out, out
    pairs = []
    for row in out.splitlines():
        m = re.match(r"D\d+ (\S+):(\d+)-\d+ ~ (\S+):(\d+)-\d+(.*)", row)
        if m and "boilerplate" not in m.group(5):
            a, b = root / m.group(1), root / m.group(3)
            pairs.append((m.group(1), _enclosing(a, int(m.group(2))), m.group(3),
                          _enclosing(b, int(m.group(4)))))
    return pairs


_needs_duplicates = pytest.mark.skipif(shutil.which("duplicates") is None,
                                       reason="the duplicates tool is not installed here")


@_needs_duplicates
def test_duplicate_pairs_can_fail(tmp_path):
    """A function written twice under other names is reported, with the definitions it lies in."""
    body = ("    a = x + 1\n    b = a * y\n    c = b - z\n    d = c / (a + 2)\n"
            "    e = d ** 2 + b\n    f = e - a * c\n    return f + d\n")
    _write(tmp_path, {"one.py": "def first(x, y, z):\n" + body,
                      "two.py": "def second(p, q, r):\n" + body.replace("x", "p").replace("y", "q")
                      .replace("z", "r")})
    assert duplicate_pairs(tmp_path) in ([("one.py", "first", "two.py", "second")],
                                         [("two.py", "second", "one.py", "first")])


@_needs_duplicates
def test_no_code_written_twice_in_the_library():
    """``duplicates`` finds no pair of places sharing 6+ lines of the same shape in lib/attnsvm
    that it does not mark as boilerplate, other than the REVIEWED_PAIRS."""
    bad = [p for p in duplicate_pairs(SRC / PKG) if p not in REVIEWED_PAIRS]
    assert not bad, f"code written twice (make one definition serve both): {bad}"


# ----------------------------------------------------------------------------- tests use drivers' public names
TESTS = Path(__file__).resolve().parent


def private_driver_names(path, pkg=PKG):
    """``driver._name`` uses of a test file: a private name imported from a driver module
    (``from attnsvm.experiments.X import _f``) or read off one (``X._f``, ``A.experiments.X._f``,
    where ``X`` is bound to a driver by an import)."""
    tree = ast.parse(Path(path).read_text())
    drivers = pkg + ".experiments"
    alias, out = {}, []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                if node.module.startswith(drivers + ".") and a.name.startswith("_"):
                    out.append(f"{node.module}.{a.name}")
                elif node.module == drivers:
                    alias[a.asname or a.name] = f"{drivers}.{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith(drivers + ".") and a.asname:
                    alias[a.asname] = a.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            base = ast.unparse(node.value)
            if base in alias:
                out.append(f"{alias[base]}.{node.attr}")
            elif re.search(r"(^|\.)experiments\.\w+$", base):
                out.append(f"{base}.{node.attr}")
    return sorted(set(out))


def test_no_test_imports_a_drivers_private_name():
    """Drivers keep mathematics out (issue 39): what a test needs of a driver is its entry points
    and result classes; a private helper a test needs belongs to a core module."""
    bad = {p.name: names for p in sorted(TESTS.glob("test_*.py")) if (names := private_driver_names(p))}
    assert not bad, f"tests using drivers' private names (move them to a core module): {bad}"


def test_private_driver_names_are_found(tmp_path):
    """The three ways a test reaches a driver's private name are caught; public names, dunder
    names and private names of core modules are not."""
    p = tmp_path / "test_x.py"
    p.write_text("import attnsvm as A\nimport attnsvm.experiments.rates as R\n"
                 "from attnsvm.experiments import geometry as G, ntp\n"
                 "from attnsvm.experiments.globalconv import _find_traps, global_experiment\n"
                 "G._split(1)\nntp._limits\nR.rates_experiment\nR.__doc__\nA.experiments.joint._med(2)\n"
                 "A.train._loop\nA.bounds._arrays\n")
    assert private_driver_names(p) == ["A.experiments.joint._med", "attnsvm.experiments.geometry._split",
                                       "attnsvm.experiments.globalconv._find_traps",
                                       "attnsvm.experiments.ntp._limits"]
