"""The API is listed once, in the modules' ``__all__`` (issue 39.5): the book's API pages are
generated from it (``attnsvm_book.apidoc``), and the lists written by hand elsewhere are checked
against the code here:

* the package docstring's overview names exactly the top-level modules (``attnsvm._SUBMODULES``)
  and the chapter drivers (the modules of ``attnsvm.experiments``);
* CONTRIBUTING's table of homes (concept -> module) puts every public name it mentions in the
  module that exports it (a name moved to another module fails until the table follows).

Each check has a planted failure below it."""
from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import attnsvm
import attnsvm.experiments

ROOT = Path(__file__).resolve().parents[1]


def docstring_modules(doc):
    """``(top-level modules, drivers)`` named by the package docstring: the first word of each
    line of its overview (the paragraph after "Modules, by concept:"), and the names of its
    ``experiments`` paragraph."""
    overview = doc.split("Modules, by concept:", 1)[1].split("\n\n")[1]
    top = set(re.findall(r"^``(\w+)``\s", overview, flags=re.M))
    para = next((p for p in doc.split("\n\n") if p.startswith("``experiments``")), "")
    drivers = set(re.findall(r"``(\w+)``", para.split(":", 1)[1])) if ":" in para else set()
    return top, drivers


def _drivers():
    return {m.name for m in pkgutil.iter_modules(attnsvm.experiments.__path__)}


def test_the_package_docstring_names_every_module_and_driver():
    top, drivers = docstring_modules(attnsvm.__doc__)
    assert top | {"experiments"} == set(attnsvm._SUBMODULES), (
        f"missing: {set(attnsvm._SUBMODULES) - top - {'experiments'}}, stale: {top - set(attnsvm._SUBMODULES)}")
    assert drivers == _drivers(), f"missing: {_drivers() - drivers}, stale: {drivers - _drivers()}"


def test_a_stale_docstring_overview_is_found():
    doc = attnsvm.__doc__.replace("``norms``    ", "``normz``    ").replace("``separable``, ", "")
    top, drivers = docstring_modules(doc)
    assert "normz" in top and "norms" not in top
    assert _drivers() - drivers == {"separable"}


def public_names(module):
    """The ``__all__`` of ``attnsvm.<module>`` and, for a package, of its public submodules."""
    mod = importlib.import_module(f"attnsvm.{module}")
    names = set(getattr(mod, "__all__", []))
    for m in pkgutil.iter_modules(getattr(mod, "__path__", [])):
        if not m.name.startswith("_"):
            names |= set(getattr(importlib.import_module(f"attnsvm.{module}.{m.name}"), "__all__", []))
    return names


def misplaced_names(text, modules=attnsvm._SUBMODULES):
    """Rows ``| concept | `home` |`` of a table whose concept cell names (in backticks) a public
    name of the library that the home module(s) do not export: ``[(name, homes, exporters)]``."""
    exporters = {}
    for m in modules:
        if m != "experiments":
            for n in public_names(m):
                exporters.setdefault(n, set()).add(m)
    bad = []
    for line in text.splitlines():
        row = re.match(r"\s*\|(.*)\|\s*((?:`[\w/]+`[;,]?\s*)+)\|\s*$", line)
        if not row:
            continue
        homes = [h.strip("/") for h in re.findall(r"`([\w/]+)`", row.group(2))]
        home_names = set().union(*(public_names(h) for h in homes if h in modules))
        for name in sorted(set(re.findall(r"`([A-Za-z_]\w*)`", row.group(1)))):
            if name in exporters and name not in home_names:
                bad.append((name, homes, sorted(exporters[name])))
    return bad


def test_contributing_puts_each_name_in_its_home():
    bad = misplaced_names((ROOT / "CONTRIBUTING.md").read_text())
    assert not bad, f"CONTRIBUTING's table of homes names these where they do not live: {bad}"


def test_a_name_in_the_wrong_home_is_found():
    text = ("  | the one matrix norm `matrix_norm`, the steepest direction `steepest_direction` | `optim` |\n"
            "  | data containers (`take`, `stack`) | `data` |\n")
    assert misplaced_names(text) == [("matrix_norm", ["optim"], ["norms"])]
