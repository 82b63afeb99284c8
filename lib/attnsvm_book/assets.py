"""The book's Sphinx extension: repository links and click-to-enlarge figures.

Listed in ``_config.yml`` under ``sphinx.extra_extensions``; the pinned packages do the rest:

* **MathJax offline** is the ``sphinx-mathjax-offline`` extension (MathJax 3.2.2, pinned in
  ``requirements.txt``): it sets ``mathjax_path`` to ``mathjax/tex-chtml.js`` (relative to
  ``_static``; Jupyter Book 1.x leaves ``mathjax_path`` alone unless ``_config.yml`` sets it) and
  copies the distribution into the output's ``_static`` after every build, so ``_build/html``
  renders its math from ``file://``, over HTTP and after being copied elsewhere, with no network.
* **Repository links.** The role ``{repo}`path``` is ``sphinx.ext.extlinks``' role: this
  extension only fills ``extlinks["repo"]`` from ``_config.yml``'s ``repository:`` section
  (``<repository url>/blob/<branch>/<path>``), so the URL is written once.
* **Figures.** Every image in a page body becomes a link to the image file itself (click to
  enlarge), and gets the caption of its figure as alt text where it has none.
"""
from __future__ import annotations

__all__ = ["repository_file_url", "setup"]


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


def _on_config_inited(app, config):
    base = repository_file_url(config, "%s")
    if base is None:
        raise RuntimeError("_config.yml has no repository url (repository: url:), which the "
                           "{repo} role links to")
    config.extlinks = {**(config.extlinks or {}), "repo": (base, "%s")}


def setup(app):
    app.setup_extension("sphinx.ext.extlinks")
    app.connect("config-inited", _on_config_inited)
    app.connect("doctree-resolved", _figure_links)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "2"}
