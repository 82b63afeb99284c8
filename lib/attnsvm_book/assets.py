"""The book's Sphinx extension: offline MathJax 4, repository links, click-to-enlarge figures.

Listed in ``_config.yml`` under ``sphinx.extra_extensions``:

* **MathJax offline.** MathJax 4 ships with the book in ``static/mathjax`` (the files of the npm
  packages ``mathjax`` and ``@mathjax/mathjax-newcm-font`` that a page needs, about 4 MB;
  ``static/mathjax/VENDORED.md`` says which and how to update them). It is copied into the
  output's ``_static`` with the book's other static files and ``mathjax_path`` is set to
  ``mathjax/tex-chtml.js`` (relative to ``_static``; Sphinx's default is a CDN), so
  ``_build/html`` renders its math from ``file://``, over HTTP and after being copied elsewhere,
  with no network. ``_config.yml``'s ``mathjax3_config`` turns on MathJax 4's automatic line
  breaking of display formulas (a formula wider than its column breaks into lines).
* **One copy of each script.** sphinx-thebe adds its inline configuration script
  (``const THEBE_JS_URL = ...``) once per read phase; a page that got it twice raised
  "Identifier 'THEBE_JS_URL' has already been declared" on load. Each page keeps one copy of
  every script.
* **Repository links.** The role ``{repo}`path``` is ``sphinx.ext.extlinks``' role: this
  extension only fills ``extlinks["repo"]`` from ``_config.yml``'s ``repository:`` section
  (``<repository url>/blob/<branch>/<path>``), so the URL is written once. With a URL, the
  theme's "repository" and "open issue" buttons are turned on (``_config.yml`` leaves them off:
  Jupyter Book refuses them without a URL), and so are the notebook pages' launch buttons
  (Binder and Colab, :data:`LAUNCH_SERVICES`, opening the page's notebook in the repository).
  With no URL (``url: ""``, the default) nothing
  links to a repository: no button, and the role prints the path as code text. A placeholder
  URL (one naming ``OWNER``) is an error, so no page links to it.
* **Figures.** Every image in a page body becomes a link to the image file itself (click to
  enlarge), and gets the caption of its figure as alt text where it has none.
* **Glued numbers in sentences.** A glued number that rounds to zero prints without a sign
  (``-0`` read as ``0``), and an inline formula ending in a relation before a glued number
  (``$n =$ 6``) keeps the space after the relation.
* **The whole-book PDF.** When the build made it (``attnsvm_pdf``, set by the build in the
  staged configuration), every page's download menu offers it and the introduction links it.
* **Styles.** ``static/attnsvm.css`` and ``static/attnsvm.js`` are added to every page: a box
  (theorem, proof, note) or an inline formula too wide for its line scrolls sideways instead of
  hiding the formula's end, and wide tables, display math and outputs scroll inside the page
  instead of widening it (a phone's screen).
"""
from __future__ import annotations

import re
from pathlib import Path

__all__ = ["LAUNCH_SERVICES", "MATHJAX_PATH", "REPOSITORY_BUTTONS", "STATIC", "repository_file_url", "setup"]


def _plain(text: str) -> str:
    """Caption text for an ``alt`` attribute: TeX macros as words, no braces, one line."""
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


#: a glued number that rounds to zero, printed with a sign ("-0", "-0.00", "-0e+00")
_NEGATIVE_ZERO = re.compile(r"^[-\u2212](0(\.0*)?(e[+-]?0+)?)$")
#: an inline formula that ends in a relation, e.g. ``$n =$`` before a glued number
_ENDS_IN_RELATION = re.compile(r"(=|<|>|\\leq?|\\geq?|\\approx|\\neq?|\\sim)\s*$")


def _typeset_glue(app, doctree, docname):
    """Two rules for glued numbers in a sentence.

    * A number that rounds to zero has no sign: ``-0`` (a glued ``-0.0`` or ``-3e-17`` printed
      ``:g`` or ``:.0f``) reads as ``0``.
    * ``$n =$ {glue:text}`...``` reads "n = 6", not "n =6": TeX sets no space after a relation
      that ends a formula, so an empty group (``{}``) is added after it.
    """
    from docutils import nodes

    for node in list(doctree.findall(nodes.inline)):
        if "pasted-text" not in node.get("classes", []):
            continue
        text = node.astext()
        m = _NEGATIVE_ZERO.match(text.strip())
        if m and len(node.children) == 1 and isinstance(node.children[0], nodes.Text):
            node.replace(node.children[0], nodes.Text(m.group(1)))
    for node in list(doctree.findall(nodes.math)):
        text = node.astext()
        if _ENDS_IN_RELATION.search(text) and len(node.children) == 1:
            node.replace(node.children[0], nodes.Text(text.rstrip() + "{}"))


def repository_file_url(config, path: str) -> str | None:
    """URL of ``path`` in the book's repository (``_config.yml`` ``repository:``), or None."""
    opts = getattr(config, "html_theme_options", None) or {}
    url = (opts.get("repository_url") or "").rstrip("/")
    if not url:
        return None
    branch = opts.get("repository_branch") or "main"
    return f"{url}/blob/{branch}/{path.lstrip('/')}"


#: the launch buttons turned on when ``_config.yml`` names a repository (its own URLs win)
LAUNCH_SERVICES = {"binderhub_url": "https://mybinder.org",
                   "colab_url": "https://colab.research.google.com"}

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
    mathjax = getattr(config, "mathjax_path", None)
    if not mathjax or "://" in mathjax:  # Sphinx's default is a CDN
        config.mathjax_path = MATHJAX_PATH
    opts = getattr(config, "html_theme_options", None) or {}
    if "/OWNER/" in (opts.get("repository_url") or "") + "/":
        raise RuntimeError(f"_config.yml's repository url {opts['repository_url']!r} is a "
                           "placeholder: put the repository's URL there, or \"\" for none")
    base = repository_file_url(config, "%s")
    if base is None:  # no repository: no button, and {repo} prints the path as text
        config.html_theme_options = {**opts, **{k: False for k in REPOSITORY_BUTTONS}}
        app.add_role("repo", _path_role, override=True)
        return
    # a repository: its buttons, and the launch buttons of the notebook pages (Binder, which
    # installs requirements.txt and runs postBuild, and Colab), pointing at the page's notebook
    launch = dict(opts.get("launch_buttons") or {})
    for key, url in LAUNCH_SERVICES.items():
        launch[key] = launch.get(key) or url
    config.html_theme_options = {**opts, "use_repository_button": True,
                                 "use_issues_button": True, "launch_buttons": launch}
    config.extlinks = {**(config.extlinks or {}), "repo": (base, "%s")}


#: MathJax, relative to ``_static`` (``static/mathjax`` is copied there)
MATHJAX_PATH = "mathjax/tex-chtml.js"


def _script_key(js) -> tuple:
    """What makes a page's script the same script: its file, or its inline body (an inline
    script's file name is ``None`` or ``""``, depending on who added it)."""
    attrs = getattr(js, "attributes", None) or {}
    return (str(getattr(js, "filename", None) or ""), attrs.get("body"),
            tuple(sorted((k, str(v)) for k, v in attrs.items() if k != "body")))


def _one_copy_of_each_script(app, pagename, templatename, context, doctree):
    files = context.get("script_files")
    if not files:
        return
    seen, kept = set(), []
    for js in files:
        key = _script_key(js)
        if key not in seen:
            seen.add(key)
            kept.append(js)
    files[:] = kept


def _offer_pdf(app):
    """With ``attnsvm_pdf`` set (the build made the whole-book PDF), tell the pages' script where
    it is: ``attnsvm.js`` then shows the PDF links and adds it to each page's download menu."""
    name = app.config.attnsvm_pdf
    if name:
        app.add_js_file(None, body=f"window.ATTNSVM_PDF = {name!r};")


def setup(app):
    app.setup_extension("sphinx.ext.mathjax")
    app.setup_extension("sphinx.ext.extlinks")
    app.connect("config-inited", _on_config_inited)
    # the whole-book PDF, relative to the site's root ("" when the build made none)
    app.add_config_value("attnsvm_pdf", "", "html")
    app.connect("builder-inited", _offer_pdf)
    app.add_css_file("attnsvm.css")
    app.add_js_file("attnsvm.js", loading_method="defer")
    app.connect("doctree-resolved", _figure_links)
    app.connect("doctree-resolved", _typeset_glue)
    app.connect("html-page-context", _one_copy_of_each_script, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "2"}
