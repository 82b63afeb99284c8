"""The book's API reference, generated from the library's public modules at build time.

A Sphinx extension (``_config.yml``: ``sphinx.extra_extensions``) with one directive,
``attnsvm-api``, used by ``book/api.md``. It walks the public modules of ``attnsvm`` (the
top-level ``_SUBMODULES`` and the modules of the ``attnsvm.experiments`` package, whatever their
layout) and writes, for each module, a section with its summary and one ``autofunction`` /
``autoclass`` per name of its ``__all__``. A name that several modules re-export is documented
once, where its object is defined, and listed as an alias elsewhere. Docstrings are numpydoc
(rendered by the ``numpydoc`` extension).
"""
from __future__ import annotations

import importlib
import inspect
import pkgutil

__all__ = ["public_modules", "module_rst", "setup"]

#: modules of the package that the reference leaves out (the build is not in the library)
SKIP: tuple = ()


def public_modules() -> list[str]:
    """Dotted names of the public modules, in the order of ``attnsvm._SUBMODULES``."""
    import attnsvm

    out = []
    for name in attnsvm._SUBMODULES:
        full = f"attnsvm.{name}"
        if full in SKIP:
            continue
        mod = importlib.import_module(full)
        subs = []
        if hasattr(mod, "__path__"):  # a package: its public submodules too
            subs = [f"{full}.{m.name}" for m in pkgutil.iter_modules(mod.__path__)
                    if not m.name.startswith("_")]
        if getattr(mod, "__all__", None) or not subs:
            out.append(full)
        out.extend(subs)
    return out


def _home(obj) -> str | None:
    mod = getattr(obj, "__module__", None)
    qual = getattr(obj, "__qualname__", None)
    return f"{mod}.{qual}" if mod and qual else None


def module_rst(modname: str, seen: dict) -> list[str]:
    """MyST lines documenting one module; ``seen`` maps each object's home to where it is.

    The directive is used in MyST pages, so its content is MyST: a heading, then one
    ``{eval-rst}`` block with the autodoc directives (autodoc writes reST).
    """
    mod = importlib.import_module(modname)
    doc = inspect.getdoc(mod) or ""
    summary = doc.split("\n\n")[0].replace("\n", " ").strip()
    lines = [f"## {modname}", ""]
    if summary:
        lines += [summary, ""]
    lines += ["```{eval-rst}", f".. py:module:: {modname}", ""]
    aliases = []
    for name in getattr(mod, "__all__", []):
        obj = getattr(mod, name, None)
        if obj is None or inspect.ismodule(obj):
            continue
        key = _home(obj) or f"{modname}.{name}"
        target = f"{modname}.{name}"
        if key in seen:
            aliases.append(f"* ``{name}``: see :py:obj:`{seen[key]}`")
            continue
        seen[key] = target
        if inspect.isclass(obj):
            lines += [f".. autoclass:: {target}", "   :members:", ""]
        elif callable(obj):
            lines += [f".. autofunction:: {target}", ""]
        else:
            lines += [f".. autodata:: {target}", "   :no-value:", ""]
    if aliases:
        lines += [".. rubric:: Also available here", ""] + aliases + [""]
    return lines + ["```", ""]


def _directive():
    from docutils import nodes
    from docutils.statemachine import StringList
    from sphinx.util.docutils import SphinxDirective
    from sphinx.util.nodes import nested_parse_with_titles

    class AttnsvmApi(SphinxDirective):
        """Expand to the reference of every public module (see the module docstring)."""

        has_content = False

        def run(self):
            seen: dict = {}
            lines = []
            for modname in public_modules():
                lines += module_rst(modname, seen)
            node = nodes.section()
            node.document = self.state.document
            src = self.get_source_info()[0]
            nested_parse_with_titles(self.state, StringList(lines, source=src), node)
            return node.children

    return AttnsvmApi


def setup(app):
    app.setup_extension("sphinx.ext.autodoc")
    app.setup_extension("numpydoc")
    app.add_directive("attnsvm-api", _directive())
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}
