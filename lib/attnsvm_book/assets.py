"""The book's Sphinx extension: repository links and click-to-enlarge figures.

Listed in ``_config.yml`` under ``sphinx.extra_extensions``; the pinned packages do the rest:

* **MathJax offline** is the ``sphinx-mathjax-offline`` extension (MathJax 3.2.2, pinned in
  ``requirements.txt``): it sets ``mathjax_path`` to ``mathjax/tex-chtml.js`` (relative to
  ``_static``; Jupyter Book 1.x leaves ``mathjax_path`` alone unless ``_config.yml`` sets it) and
  copies the distribution into the output's ``_static`` after every build, so ``_build/html``
  renders its math from ``file://``, over HTTP and after being copied elsewhere, with no network.
* **Repository links.** The role ``{repo}`path``` is ``sphinx.ext.extlinks``' role: this
  extension only fills ``extlinks["repo"]`` from ``_config.yml``'s ``repository:`` section
  (``<repository url>/blob/<branch>/<path>``), so the URL is written once. With a URL, the
  theme's "repository" and "open issue" buttons are turned on (``_config.yml`` leaves them off:
  Jupyter Book refuses them without a URL). With no URL (``url: ""``, the default) nothing
  links to a repository: no button, and the role prints the path as code text. A placeholder
  URL (one naming ``OWNER``) is an error, so no page links to it.
* **Figures.** Every image in a page body becomes a link to the image file itself (click to
  enlarge), and gets the caption of its figure as alt text where it has none.
* **Styles.** ``static/attnsvm.css`` and ``static/attnsvm.js`` are added to every page: a box
  (theorem, proof, note) or an inline formula too wide for its line scrolls sideways instead of
  hiding the formula's end, and wide tables, display math and outputs scroll inside the page
  instead of widening it (a phone's screen).
"""
from __future__ import annotations

from pathlib import Path

__all__ = ["REPOSITORY_BUTTONS", "STATIC", "repository_file_url", "setup"]


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


#: the theme's buttons that link to the repository
REPOSITORY_BUTTONS = ("use_repository_button", "use_issues_button", "use_edit_page_button",
                      "use_source_button")


def _path_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    """``{repo}`path``` with no repository URL: the path as code text, linking nowhere."""
    from docutils import nodes

    return [nodes.literal(rawtext, text)], []


#: the book's own CSS and JavaScript (added to every page)
STATIC = Path(__file__).resolve().parent / "static"


def _on_config_inited(app, config):
    config.html_static_path = [*(config.html_static_path or []), str(STATIC)]
    opts = getattr(config, "html_theme_options", None) or {}
    if "/OWNER/" in (opts.get("repository_url") or "") + "/":
        raise RuntimeError(f"_config.yml's repository url {opts['repository_url']!r} is a "
                           "placeholder: put the repository's URL there, or \"\" for none")
    base = repository_file_url(config, "%s")
    if base is None:  # no repository: no button, and {repo} prints the path as text
        config.html_theme_options = {**opts, **{k: False for k in REPOSITORY_BUTTONS}}
        app.add_role("repo", _path_role, override=True)
        return
    config.html_theme_options = {**opts, "use_repository_button": True,
                                 "use_issues_button": True}
    config.extlinks = {**(config.extlinks or {}), "repo": (base, "%s")}


def setup(app):
    app.setup_extension("sphinx.ext.extlinks")
    app.connect("config-inited", _on_config_inited)
    app.add_css_file("attnsvm.css")
    app.add_js_file("attnsvm.js", loading_method="defer")
    app.connect("doctree-resolved", _figure_links)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "2"}
