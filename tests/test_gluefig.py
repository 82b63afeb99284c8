"""``{glue:figure} path::key``: a chapter page shows a figure glued in another notebook."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import nbformat  # noqa: E402
import pytest  # noqa: E402

import attnsvm as A  # noqa: E402

CHAPTER = """# Chapter

```{glue:figure} ../notebooks/nb.ipynb::fig_a
:name: fig-ch-a

The chapter's copy.
```

```{glue:figure} ../notebooks/nb.ipynb::fig_a
:name: fig-ch-b
```

See {numref}`fig-ch-a` and {numref}`fig-nb-a`.
"""


def _book(root: Path, monkeypatch, chapter: str = CHAPTER) -> Path:
    import IPython
    import IPython.display

    (root / "book").mkdir(parents=True)
    (root / "notebooks").mkdir()
    (root / "_config.yml").write_text(
        "title: mini\nexecute:\n  execute_notebooks: 'off'\nsphinx:\n  extra_extensions:\n"
        "    - attnsvm_book.gluefig\n  config:\n    numfig: true\n")
    (root / "_toc.yml").write_text("format: jb-book\nroot: book/intro\nchapters:\n"
                                   "  - file: book/ch\n    sections:\n"
                                   "      - file: notebooks/nb\n")
    (root / "book" / "intro.md").write_text("# Intro\n")
    (root / "book" / "ch.md").write_text(chapter)
    fig, ax = A.plot.figure(width=5)
    ax.plot([1, 2], [1, 3], label="GD")
    ax.legend()
    shown = []
    monkeypatch.setattr(IPython, "get_ipython", lambda: object())
    monkeypatch.setattr(IPython.display, "display",
                        lambda data, raw, metadata: shown.append((data, metadata)))
    A.plot.save_or_glue(fig, "fig_a")
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("A.plot.save_or_glue(fig, 'fig_a')")
    cell.outputs = [nbformat.v4.new_output("display_data", data=d, metadata=m) for d, m in shown]
    prefix = "application/papermill.record/"
    cell.outputs.append(nbformat.v4.new_output(
        "display_data", data={prefix + "text/plain": "3.14159", "text/plain": "3.14159"},
        metadata={"scrapbook": {"name": "x", "mime_prefix": prefix}}))
    for name, word in (("claim_fast", "holds"), ("claim_slow", "fails")):   # as claims.claim glues
        cell.outputs.append(nbformat.v4.new_output(
            "display_data", data={prefix + "text/plain": word, "text/plain": word},
            metadata={"scrapbook": {"name": name, "mime_prefix": prefix}}))
    nb.cells = [cell, nbformat.v4.new_markdown_cell(
        "# Notebook\n\n```{glue:figure} fig_a\n:name: fig-nb-a\n\nThe notebook's copy, "
        "$x =$ {glue:text}`x:.2f`, unformatted {glue:text}`x`.\n```\n")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nbformat.write(nb, str(root / "notebooks" / "nb.ipynb"))
    return root


def _render(root: Path):
    exe = Path(sys.executable).with_name("jupyter-book")
    return subprocess.run([str(exe), "build", str(root), "-W", "-n", "--keep-going"],
                          capture_output=True, text=True)


@pytest.mark.slow
def test_a_chapter_shows_its_notebooks_figure(tmp_path, monkeypatch):
    root = _book(tmp_path / "mini", monkeypatch)
    proc = _render(root)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    html = (root / "_build" / "html" / "book" / "ch.html").read_text()
    nb_html = (root / "_build" / "html" / "notebooks" / "nb.html").read_text()
    src = re.search(r'<figure[^>]*id="fig-ch-a".*?<img[^>]*src="([^"]+)"', html, re.S).group(1)
    assert (root / "_build" / "html" / "book" / src).resolve().is_file()
    assert src.rsplit("/", 1)[1] in nb_html  # the same PNG file as the notebook's page
    nb = nbformat.read(str(root / "notebooks" / "nb.ipynb"), as_version=4)
    width = nb.cells[0].outputs[0].metadata["image/png"]["width"]
    assert f"width: {width}px" in html  # the display width that save_or_glue gave it
    assert "The chapter’s copy." in html and "Fig. 1" in html and "Fig. 2" in html
    # the notebook's copy of the figure carries the chapter's number (it was Fig. 3 before:
    # the notebook page, a section of the chapter, counted on from the chapter's figures)
    assert "Fig. 3" not in html + nb_html
    assert re.search(r'id="fig-nb-a".*?<span class="caption-number">Fig\. 1 </span>', nb_html, re.S)
    assert re.search(r'href="[^"]*#fig-nb-a"[^>]*>.*?Fig\. 1', html, re.S)
    # without a caption of its own: the notebook's, its glue read from the notebook
    second = re.search(r'<figure[^>]*id="fig-ch-b".*?</figure>', html, re.S).group(0)
    assert "The notebook’s copy" in second and '<span class="pasted-text">3.14</span>' in second
    assert '<span class="pasted-text">3.14159</span>' in second  # a role without a format
    assert src in second


@pytest.mark.slow
def test_a_missing_key_or_document_fails_the_strict_build(tmp_path, monkeypatch):
    bad = CHAPTER + ("\n```{glue:figure} ../notebooks/nb.ipynb::no_such_key\n:name: fig-x\n\nX.\n"
                     "```\n\n```{glue:figure} ../notebooks/nope.ipynb::fig_a\n:name: fig-y\n\nY.\n"
                     "```\n")
    root = _book(tmp_path / "mini", monkeypatch, bad)
    proc = _render(root)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "'no_such_key' not found in doc 'notebooks/nb'" in out
    assert "notebooks/nope" in out


@pytest.mark.slow
def test_a_claim_mark_links_to_its_row_on_the_notebook_page(tmp_path, monkeypatch):
    """``{claim}`nb.ipynb::name``` renders a small superscript mark (a check mark when the glued
    word is ``holds``, a cross otherwise) linking to ``nb.html#claim-<name>``, the row of the
    claims table that ``publish`` shows; a claim the notebook does not glue fails the strict
    build, naming it."""
    chapter = CHAPTER + ("\nNGD is fast{claim}`../notebooks/nb.ipynb::fast` and GD is not"
                         "{claim}`../notebooks/nb.ipynb::slow`.\n")
    root = _book(tmp_path / "mini", monkeypatch, chapter)
    proc = _render(root)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    html = (root / "_build" / "html" / "book" / "ch.html").read_text()
    marks = re.findall(r'<sup class="claim-mark">(.*?)</sup>', html, re.S)
    assert len(marks) == 2
    assert 'href="../notebooks/nb.html#claim-fast"' in marks[0] and "\u2713" in marks[0]
    assert 'title="checked claim fast: holds' in marks[0]
    assert 'href="../notebooks/nb.html#claim-slow"' in marks[1] and "\u2717" in marks[1]
    assert "{claim}" not in html and "claim `" not in html
    bad = _book(tmp_path / "bad", monkeypatch,
                CHAPTER + "\nA sentence{claim}`../notebooks/nb.ipynb::no_such_claim`.\n")
    proc = _render(bad)
    assert proc.returncode != 0
    assert "checked claim 'no_such_claim' is not glued in doc 'notebooks/nb'" in proc.stdout + proc.stderr
