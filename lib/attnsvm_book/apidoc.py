"""The book's API reference, generated from the library's public modules at build time.

A Sphinx extension (``_config.yml``: ``sphinx.extra_extensions``) with one directive,
``attnsvm-api``. It walks the public modules of ``attnsvm`` (the top-level ``_SUBMODULES`` and
the modules of its packages, whatever their layout) and writes, for each module, a section with
its summary and one ``autofunction`` / ``autoclass`` per name of its ``__all__``. A name that
several modules re-export is documented once, where it is first listed, and listed as an alias
elsewhere. Docstrings are numpydoc (rendered by the ``numpydoc`` extension).

One page per top-level module: the build (:func:`api_pages`) writes, into the staged book,
``book/api/NN_<name>.md`` for each entry of ``attnsvm._SUBMODULES`` (the page holds
``{attnsvm-api} attnsvm.<name>``: that module and its submodules), and replaces the marker
:data:`API_MARKER` of ``book/api.md`` by the list of those pages with their summaries. The table
of contents takes the pages by a glob (``book/api/*``), so a new module gets its page.
"""
from __future__ import annotations

import importlib
import inspect
import pkgutil

__all__ = ["public_modules", "module_rst", "api_groups", "api_pages", "API_MARKER", "setup"]

#: where ``book/api.md`` lists the per-module pages (replaced by the build)
API_MARKER = "<!-- api-modules -->"

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


def api_groups() -> dict[str, list[str]]:
    """``{top-level module: [it and its public submodules]}``, in the order of ``_SUBMODULES``."""
    groups: dict[str, list[str]] = {}
    for full in public_modules():
        top = ".".join(full.split(".")[:2])
        groups.setdefault(top, []).append(full)
    return groups


def _summary(modname: str) -> str:
    """The first paragraph of a module's docstring, its reST roles written as MyST roles."""
    import re

    doc = inspect.getdoc(importlib.import_module(modname)) or ""
    return re.sub(r"(?<![\w`]):(\w+(?::\w+)?):`", r"{\1}`", " ".join(doc.split("\n\n")[0].split()))


def api_pages(api_dir, index_text: str) -> tuple[dict, str]:
    """The per-module pages of the reference and the index page's text.

    Returns ``({file name: MyST text}, index text)``: one page per top-level module
    (``NN_<name>.md``, numbered in the order of ``_SUBMODULES``, for the glob of ``_toc.yml``),
    and ``index_text`` with :data:`API_MARKER` replaced by a list of links to them (relative to
    the index page, whose pages sit in the folder ``api_dir``, e.g. ``"api"``).
    """
    pages, items = {}, []
    for k, (top, mods) in enumerate(api_groups().items(), start=1):
        name = f"{k:02d}_{top.split('.', 1)[1]}.md"
        subs = [m for m in mods if m != top]
        more = (" Submodules: " + ", ".join(f"`{m}`" for m in subs) + ".") if subs else ""
        pages[name] = (f"# {top}\n\n{_summary(top)}{more}\n\n"
                       f"```{{attnsvm-api}} {top}\n```\n")
        items.append(f"* [`{top}`]({api_dir}/{name}): {_summary(top)}")
    return pages, index_text.replace(API_MARKER, "\n".join(items))


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
        """Expand to the reference of the public modules (see the module docstring).

        With an argument (``attnsvm.svm``): that top-level module and its submodules, each a
        section; the names they re-export from modules documented earlier in the order of
        :func:`public_modules` are listed as aliases of those (on their own pages).
        """

        has_content = False
        optional_arguments = 1

        def run(self):
            group = self.arguments[0] if self.arguments else None
            seen: dict = {}
            lines = []
            for modname in public_modules():
                mine = group is None or modname == group or modname.startswith(group + ".")
                rst = module_rst(modname, seen)
                if mine and modname == group:  # the page's title and summary name it already
                    rst = rst[rst.index("```{eval-rst}"):]
                if mine:
                    lines += rst
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
