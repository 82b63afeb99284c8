"""``{glue:figure}`` from another document: a chapter shows its notebook's figures.

myst-nb 1.x pastes a figure only from the page's own notebook (``{glue:figure} key``); its
``{glue:text}`` role already reads another document's glue as ``path::key``. This extension
gives the figure directive the same form::

    ```{glue:figure} ../notebooks/ch01_separable.ipynb::fig_rates
    :name: fig-ch01-rates-chapter

    The caption.
    ```

Without a caption of its own the directive takes the caption of the notebook's
``{glue:figure}`` of the same key, its ``{glue:text}`` roles pointed at the notebook, so that a
caption is written once. The figure node (numbered, referenced by its ``:name:``, captioned) is
made when the chapter is read; the image inside it is filled in after all documents are read (a
Sphinx post-transform, as myst-nb does for ``{glue:text}``) from the glue cache that myst-nb
writes for the notebook.
The PNG is written into the output's image folder under its SHA-256, the name myst-nb gives it
on the notebook's own page, and keeps the display width the notebook gave it
(:func:`attnsvm.plot.save_or_glue`). A key or a document that does not exist is a Sphinx warning
naming both, so the book's strict build fails on it. Without ``::`` the directive is myst-nb's.

A figure shown on both pages carries one number: the notebook page's copy takes the number of
the chapter's (:func:`_same_numbers`), instead of the next number after the chapter's figures.
"""
from __future__ import annotations

import json
import posixpath
import re
from pathlib import Path

from docutils import nodes as _nodes

__all__ = ["setup", "claim_mark"]


class claim_mark(_nodes.Inline, _nodes.Element):  # noqa: N801 (a docutils node class)
    """A checked claim's mark, before it is resolved (``nbdoc``, ``claim``)."""


def claim_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    """``{claim}`../notebooks/nb.ipynb::name``: a small mark after the sentence that a checked
    claim backs, linking to the claim's row (``claim-<name>``) in the table that
    :func:`attnsvm.claims.publish` shows on the notebook's page. The mark is a check mark
    when the glued word ``claim_<name>`` is ``holds`` and a cross otherwise; a claim that its
    notebook does not glue is a warning naming both (the strict build fails on it)."""
    if "::" not in text:
        msg = inliner.reporter.error(f"{{claim}} needs 'path/to/notebook.ipynb::name', got {text!r}",
                                     line=lineno)
        return [inliner.problematic(rawtext, rawtext, msg)], [msg]
    doc, key = (t.strip() for t in text.split("::", 1))
    env = inliner.document.settings.env
    nbdoc = posixpath.normpath(posixpath.join(posixpath.dirname(env.docname), doc))
    node = claim_mark(rawtext, nbdoc=nbdoc.removesuffix(".ipynb"), claim=key)
    node.source, node.line = inliner.reporter.source, lineno
    return [node], []


def _resolve_claims(app, doctree, docname: str):
    """Replace each claim mark by a superscript link to its row on the notebook's page."""
    from myst_nb.ext.glue.crossref import read_glue_cache, ref_warning

    for node in list(doctree.findall(claim_mark)):
        nbdoc, key = node["nbdoc"], node["claim"]
        data = read_glue_cache(app.env.mystnb_config.output_folder, nbdoc)
        word = data.get(f"claim_{key}", {}).get("data", {}).get("text/plain")
        if word is None:
            ref_warning(f"checked claim {key!r} is not glued in doc {nbdoc!r}", node)
            node.replace_self(_nodes.literal(key, key))
            continue
        holds = word.strip("'\"") == "holds"
        anchor = f"claim-{key}"
        if app.builder.name == "singlehtml":
            uri = f"#{anchor}"
        else:
            uri = app.builder.get_relative_uri(docname, nbdoc) + f"#{anchor}"
        ref = _nodes.reference("", "\u2713" if holds else "\u2717", refuri=uri, internal=True,
                               reftitle=f"checked claim {key}: {'holds' if holds else 'fails'} "
                                        f"(its numbers: the table on the notebook's page)")
        node.replace_self(_nodes.superscript("", "", ref, classes=["claim-mark"]))


def _directive():
    from docutils import nodes
    from myst_nb.ext.glue.directives import PasteFigureDirective
    from myst_nb.ext.glue.utils import (
        PendingGlueReferenceError,
        create_pending_glue_ref,
        glue_warning,
    )

    class CrossDocFigure(PasteFigureDirective):
        """``{glue:figure}`` that also takes ``path::key`` (a key glued in another document)."""

        def run(self):
            arg = self.arguments[0]
            if "::" not in arg:
                return super().run()
            doc, key = (s.strip() for s in arg.split("::", 1))
            try:
                ref = create_pending_glue_ref(self.document, self.source, self.line, doc, key)
            except PendingGlueReferenceError as exc:
                return [glue_warning(str(exc), self.document, self.line)]
            ref["attnsvm_figure"] = True
            if not self.content:  # the caption of the notebook's own figure of this key
                try:
                    self.content = _notebook_caption(self.state.document.settings.env, doc, key)
                except LookupError as exc:
                    return [glue_warning(str(exc), self.document, self.line)]
            for opt in ("alt", "height", "width", "scale", "class"):
                if opt in self.options:
                    ref[f"image_{opt}"] = self.options[opt]
            # as myst-nb's directive (after sphinx's Figure): node, options, name, caption
            figure_node = nodes.figure("", ref)
            self.set_source_info(figure_node)
            figwidth = self.options.pop("figwidth", None)
            figclasses = self.options.pop("figclass", None)
            align = self.options.pop("align", None)
            if figwidth is not None:
                figure_node["width"] = figwidth
            if figclasses:
                figure_node["classes"] += figclasses
            if align:
                figure_node["align"] = align
            self.add_name(figure_node)
            if self.content:
                node = nodes.Element()
                self.state.nested_parse(self.content, self.content_offset, node)
                first = node[0]
                if not isinstance(first, nodes.paragraph):
                    return [figure_node, glue_warning(
                        "Figure caption must be a paragraph.", self.document, self.lineno)]
                caption = nodes.caption(first.rawsource, "", *first.children)
                caption.source, caption.line = first.source, first.line
                figure_node += caption
                if len(node) > 1:
                    figure_node += nodes.legend("", *node[1:])
            return [figure_node]

    return CrossDocFigure


_FENCE = re.compile(r"^(`{3,}|:{3,})\{glue:figure\}\s+(\S+)\s*$")
_GLUE_ROLE = re.compile(r"\{(glue(?::[a-z]*)?)\}`(?![^`]*::)([^`]+)`")


def _with_format(spec: str) -> str:
    """``key`` as ``key:s``: a cross-document ``{glue:text}`` reads its last ``:`` as the start of
    the format, so a key without one needs the format the role uses by default."""
    return spec if ":" in spec else f"{spec}:s"


def _notebook_caption(env, doc: str, key: str):
    """The caption of ``{glue:figure} key`` in the notebook ``doc`` (relative to the page being
    read), its own glue roles made to point at that notebook: one caption for both pages."""
    from docutils.statemachine import StringList

    _, path = env.relfn2path(doc, env.docname)
    env.note_dependency(path)  # a changed caption re-reads the chapter
    try:
        lines = _notebook_markdown(path, strict=True).splitlines()
    except (OSError, ValueError, KeyError) as exc:
        raise LookupError(f"cannot read the caption of {key!r} from {doc}: {exc}") from None
    for k, line in enumerate(lines):
        m = _FENCE.match(line)
        if not m or m.group(2) != key:
            continue
        body = []
        for rest in lines[k + 1:]:
            if rest.strip() == m.group(1):
                break
            body.append(rest)
        while body and (body[0].startswith(":") or not body[0].strip()):
            body.pop(0)
        text = [_GLUE_ROLE.sub(lambda g: f"{{{g.group(1)}}}`{doc}::{_with_format(g.group(2))}`",
                               b) for b in body]
        return StringList(text, source=str(path))
    raise LookupError(f"no {{glue:figure}} {key} in {doc} to take its caption from")


def _fill_figures(app, doctree, docname: str):
    """Replace each pending figure reference by its image (before myst-nb's own pass)."""
    from binascii import a2b_base64

    from myst_nb._compat import findall
    from myst_nb.core.render import get_mime_priority
    from myst_nb.ext.glue.crossref import generate_any_nodes, read_glue_cache, ref_warning
    from myst_nb.ext.glue.utils import PendingGlueReference
    from sphinx.util.osutil import relative_uri

    env = app.env
    for node in list(findall(doctree)(PendingGlueReference)):
        if not node.get("attnsvm_figure"):
            continue
        data = read_glue_cache(env.mystnb_config.output_folder, node.refdoc)
        if node.key not in data:
            ref_warning(f"Glue figure {node.key!r} not found in doc {node.refdoc!r}", node)
            node.parent.remove(node)
            continue
        output = data[node.key]
        if "image/png" not in output.get("data", {}):
            ref_warning(f"Glue figure {node.key!r} of {node.refdoc!r} has no image/png", node)
            node.parent.remove(node)
            continue
        priority = get_mime_priority(app.builder.name, app.config["nb_mime_priority_overrides"])
        made = generate_any_nodes(node, {"data": {"image/png": output["data"]["image/png"]}},
                                  ["image/png"] if "image/png" in priority else priority,
                                  app.builder, env)
        if not made:
            node.parent.remove(node)
            continue
        (img,) = made
        # the file itself, under the name the notebook's page gives it (written again if absent),
        # linked from the page the builder writes (for singlehtml: the root document's)
        if app.builder.format == "html":
            name = Path(img["uri"]).name
            target = Path(app.builder.outdir) / app.builder.imagedir / name
            # as Sphinx links a page's own images (the html writer's imgpath)
            imgpath = relative_uri(app.builder.get_target_uri(docname), app.builder.imagedir)
            img["uri"] = f"{imgpath}/{name}"
            img["candidates"] = {"*": img["uri"]}
            if not target.is_file():
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(a2b_base64(output["data"]["image/png"]))
        width = output.get("metadata", {}).get("image/png", {}).get("width")
        if width and "image_width" not in node:
            img["width"] = f"{width}px"
        for opt in ("alt", "height", "width", "scale", "class"):
            if f"image_{opt}" in node:
                img["classes" if opt == "class" else opt] = node[f"image_{opt}"]
        node.replace_self(img)


_NAME = re.compile(r"^:name:\s*(\S+)\s*$")


def figure_names(text: str) -> list[tuple[str, str]]:
    """``(argument, name)`` of every ``{glue:figure}`` of a Markdown text that has a ``:name:``."""
    lines, out = text.splitlines(), []
    for k, line in enumerate(lines):
        m = _FENCE.match(line)
        if not m:
            continue
        for rest in lines[k + 1:]:
            if rest.strip() == m.group(1) or not rest.startswith(":"):
                break
            name = _NAME.match(rest.strip())
            if name:
                out.append((m.group(2), name.group(1)))
                break
    return out


def _notebook_markdown(path: Path, *, strict: bool = False) -> str:
    """The markdown cells of the notebook at ``path``, joined by newlines: ``""`` for a file
    that cannot be read as a notebook, or, with ``strict``, its OSError, ValueError or KeyError."""
    try:
        cells = json.loads(Path(path).read_text())["cells"]
    except (OSError, ValueError, KeyError):
        if strict:
            raise
        return ""
    return "\n".join("".join(c["source"]) if isinstance(c["source"], list) else c["source"]
                     for c in cells if c.get("cell_type") == "markdown")


def _same_numbers(app, env):
    """A figure that a notebook page shares with its chapter carries the chapter's number.

    The notebook pages are sections of their chapter in the table of contents, so Sphinx's
    numfig counts their figures on from the chapter's: the chapter's Figs. 9.1-9.3, shown again
    on the notebook's page, became Figs. 9.4-9.6 there. After Sphinx numbers the figures, each
    figure of a notebook page whose glued key a chapter pastes (``{glue:figure}
    ../notebooks/nb.ipynb::key``, the first such figure) takes that figure's number; figures of
    the notebook that no chapter shows keep theirs. Returns the notebook pages to write again."""
    if not env.config.numfig:
        return []
    labels = env.get_domain("std").labels
    shown = {}                                   # (notebook docname, key) -> chapter's label
    for doc in sorted(env.found_docs):
        path = Path(env.doc2path(doc))
        if path.suffix != ".md":
            continue
        for arg, name in figure_names(path.read_text()):
            if "::" in arg:
                nb, key = (t.strip() for t in arg.split("::", 1))
                nbdoc = posixpath.normpath(posixpath.join(posixpath.dirname(doc), nb))
                shown.setdefault((nbdoc.removesuffix(".ipynb"), key), name.lower())
    changed = []
    for nbdoc in sorted({d for d, _ in shown} & set(env.found_docs)):
        for key, name in figure_names(_notebook_markdown(env.doc2path(nbdoc))):
            chapter = shown.get((nbdoc, key))
            if chapter not in labels or name.lower() not in labels:
                continue
            cdoc, cid = labels[chapter][:2]
            ndoc, nid = labels[name.lower()][:2]
            number = env.toc_fignumbers.get(cdoc, {}).get("figure", {}).get(cid)
            figures = env.toc_fignumbers.get(ndoc, {}).get("figure", {})
            if number is not None and nid in figures and figures[nid] != number:
                figures[nid] = number
                changed.append(ndoc)
    return sorted(set(changed))


def setup(app):
    from sphinx.transforms.post_transforms import SphinxPostTransform

    class FillGlueFigures(SphinxPostTransform):
        default_priority = 4  # before myst-nb's ReplacePendingGlueReferences (5)

        def apply(self, **kwargs):
            _fill_figures(self.app, self.document, self.env.docname)
            _resolve_claims(self.app, self.document, self.env.docname)

    app.setup_extension("myst_nb")
    app.add_directive_to_domain("glue", "figure", _directive(), override=True)
    app.add_post_transform(FillGlueFigures)
    app.add_node(claim_mark)
    app.add_role("claim", claim_role)
    app.connect("env-get-updated", _same_numbers, priority=900)  # after Sphinx numbers figures
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}
