"""The build is a sibling of the library: the library never loads it, its modules form no import
circle, and the notebook cache hashes the library the notebooks import, not the build tool."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import attnsvm_book as book

REPO = Path(__file__).resolve().parents[1]
BOOK = REPO / "lib" / "attnsvm_book"


def test_import_attnsvm_loads_neither_the_build_nor_jupyter():
    code = ("import sys, attnsvm\n"
            "attnsvm.svm.att_svm; import attnsvm.claims, attnsvm.plot, attnsvm.experiments\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in\n"
            "             ('attnsvm_book', 'myst_nb', 'papermill', 'jupyter_book', 'sphinx',\n"
            "              'distributed', 'nbformat'))\n"
            "print(bad)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PYTHONPATH": str(REPO / "lib")}, check=True).stdout
    assert out.strip() == "[]"


def _imports(path: Path) -> set[str]:
    """The attnsvm_book modules that ``path`` imports, at any depth of the file (functions too)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1:
                base = node.module or ""
                if base:
                    out.add(base.split(".")[0])
                else:
                    out.update(a.name for a in node.names)
            elif (node.module or "").startswith("attnsvm_book."):
                out.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            out.update(a.name.split(".")[1] for a in node.names
                       if a.name.startswith("attnsvm_book."))
    return out


def test_the_build_has_no_import_circle():
    modules = {p.stem for p in BOOK.glob("*.py") if p.stem not in ("__init__", "__main__")}
    graph = {m: _imports(BOOK / f"{m}.py") & modules for m in modules}
    assert graph["_core"] == set()  # the bottom imports nothing of the package
    state: dict = {}

    def visit(m, path):
        if state.get(m) == "done":
            return
        assert state.get(m) != "open", f"import circle: {' -> '.join(path + [m])}"
        state[m] = "open"
        for n in sorted(graph[m]):
            visit(n, path + [m])
        state[m] = "done"

    for m in sorted(graph):
        visit(m, [])


def test_the_cache_hashes_the_library_not_the_build(minibook):
    before = book.library_hash(minibook)
    (minibook / "lib" / "attnsvm_book").mkdir()
    (minibook / "lib" / "attnsvm_book" / "cli.py").write_text("# the build tool\n")
    (minibook / "tests").mkdir()
    (minibook / "tests" / "browser_check.py").write_text("# a test helper\n")
    assert book.library_hash(minibook) == before
    (minibook / "lib" / "attnsvm" / "mod.py").write_text("X = 5\n")
    assert book.library_hash(minibook) != before
