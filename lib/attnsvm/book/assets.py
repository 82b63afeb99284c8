"""Static assets shipped with the rendered book: MathJax 3 and click-to-enlarge figures.

A Sphinx extension (listed in ``_config.yml`` under ``sphinx.extra_extensions``):

* **MathJax offline.** MathJax 3.2.2 comes from the ``sphinx-mathjax-offline`` wheel (pinned in
  ``requirements.txt``). The pages load it from ``_static/mathjax/tex-chtml.js`` by a *relative*
  path, and the files are copied into the output's ``_static`` at the end of every build, so
  ``_build/html`` renders its math from ``file://``, over HTTP and after being copied elsewhere,
  with no network. The environment variable ``ATTNSVM_MATHJAX_DIR`` may name another MathJax 3
  distribution directory (one holding ``tex-chtml.js``); it is copied the same way.
* **Repository links.** The role ``{repo}`path``` links a file of the repository (for example
  a test file, which a reader of the HTML cannot open otherwise) at
  ``<repository url>/blob/<branch>/<path>``, from ``_config.yml``'s ``repository:`` section;
  without a repository URL it is a plain literal.
* **Figures.** Every image in a page body becomes a link to the image file itself (click to
  enlarge), and gets the caption of its figure as alt text where it has none.
"""
from __future__ import annotations

import os
import shutil
from importlib import metadata
from pathlib import Path

__all__ = ["MATHJAX_ENTRY", "mathjax_source", "copy_mathjax", "repository_file_url", "setup"]

#: the MathJax component the pages load, relative to ``_static``
MATHJAX_ENTRY = "mathjax/tex-chtml.js"
#: parts of a MathJax 3 distribution needed by ``tex-chtml.js`` (lazy-loaded TeX extensions,
#: CommonHTML fonts, the menu and its accessibility/speech components)
MATHJAX_PARTS = ("tex-chtml.js", "input", "output/chtml", "output/chtml.js", "ui", "a11y", "sre",
                 "adaptors")
ENV_DIR = "ATTNSVM_MATHJAX_DIR"
DIST = "sphinx-mathjax-offline"


class AssetError(RuntimeError):
    """A shipped asset could not be found."""


def mathjax_source() -> Path:
    """The directory of the MathJax 3 distribution copied into the book.

    ``$ATTNSVM_MATHJAX_DIR`` when set, else the ``static/mathjax`` directory of the installed
    ``sphinx-mathjax-offline`` wheel.

    Raises
    ------
    AssetError
        When neither holds ``tex-chtml.js`` (the message says how to install the wheel).
    """
    override = os.environ.get(ENV_DIR)
    if override:
        src = Path(override)
        if not (src / "tex-chtml.js").is_file():
            raise AssetError(f"{ENV_DIR}={override!r} holds no tex-chtml.js (a MathJax 3 "
                             "distribution directory, e.g. the 'es5' folder of the npm package)")
        return src
    try:
        dist = metadata.distribution(DIST)
    except metadata.PackageNotFoundError:
        raise AssetError(f"the package {DIST!r} is not installed; pip install -r "
                         "requirements.txt -c constraints.txt") from None
    src = Path(dist.locate_file("sphinx-mathjax-offline/static/mathjax"))
    if not (src / "tex-chtml.js").is_file():
        raise AssetError(f"{src} holds no tex-chtml.js; reinstall {DIST}")
    return src


def copy_mathjax(static_dir: str | os.PathLike) -> Path:
    """Copy MathJax into ``static_dir/mathjax`` (skipping files already identical); return it."""
    src = mathjax_source()
    dst = Path(static_dir) / "mathjax"
    for part in MATHJAX_PARTS:
        p = src / part
        files = [p] if p.is_file() else sorted(q for q in p.rglob("*") if q.is_file()) if p.is_dir() else []
        for f in files:
            target = dst / f.relative_to(src)
            if target.is_file() and target.stat().st_size == f.stat().st_size:
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, target)
    return dst


def _on_build_finished(app, exc):
    if exc is None and app.builder.format == "html":
        copy_mathjax(Path(app.outdir) / "_static")


def _on_config_inited(app, config):
    mathjax_source()  # fail early, before anything is rendered, when MathJax is missing
    config.mathjax_path = MATHJAX_ENTRY


def _plain(text: str) -> str:
    """Caption text for an ``alt`` attribute: TeX macros as words, no braces, one line."""
    import re

    text = re.sub(r"\\([A-Za-z]+)", r"\1", text)
    text = re.sub(r"[{}]|\\(?=\W)", "", text)
    return " ".join(text.split())


def _figure_links(app, doctree, docname):
    """Give each figure's image its caption as alt text, and link each body image to its file.

    The link (click to enlarge) is made like Sphinx's own ``html_scaled_image_link``, for every
    image whose file Sphinx copies into ``_images`` and that is not already a link.
    """
    import posixpath

    from docutils import nodes
    from sphinx.util.osutil import relative_uri

    for fig in doctree.findall(nodes.figure):
        caption = next(iter(fig.findall(nodes.caption)), None)
        text = _plain(caption.astext()) if caption is not None else ""
        for img in fig.findall(nodes.image):
            if text and (not img.get("alt") or img["alt"] == img["uri"]):
                img["alt"] = text
    builder = app.builder
    if builder.format != "html" or not hasattr(builder, "imagedir"):
        return
    imgpath = relative_uri(builder.get_target_uri(docname), builder.imagedir)
    for img in list(doctree.findall(nodes.image)):
        uri = img["uri"]
        if isinstance(img.parent, nodes.reference) or uri not in app.env.images:
            continue
        ref = nodes.reference("", "", internal=True, classes=["attnsvm-enlarge"],
                              refuri=posixpath.join(imgpath, app.env.images[uri][1]))
        img.replace_self(ref)
        ref.append(img)


def repository_file_url(config, path: str) -> str | None:
    """URL of ``path`` in the book's repository (``_config.yml`` ``repository:``), or None."""
    opts = getattr(config, "html_theme_options", None) or {}
    url = (opts.get("repository_url") or "").rstrip("/")
    if not url:
        return None
    branch = opts.get("repository_branch") or "main"
    return f"{url}/blob/{branch}/{path.lstrip('/')}"


def _repo_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    from docutils import nodes

    env = inliner.document.settings.env
    literal = nodes.literal(text, text)
    url = repository_file_url(env.config, text)
    if url is None:
        return [literal], []
    ref = nodes.reference(rawtext, "", refuri=url, classes=["attnsvm-repo"])
    ref += literal
    return [ref], []


def setup(app):
    app.add_role("repo", _repo_role)
    app.connect("config-inited", _on_config_inited)
    app.connect("build-finished", _on_build_finished)
    app.connect("doctree-resolved", _figure_links)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}
