"""Glued numbers that would read wrong in a sentence: the check the build runs before rendering.

A ``{glue:text}`` role pastes a value computed by a notebook into the prose. When that value is
NaN (a median over an empty set, a fraction of zero trials) the page would print ``nan`` where
the reader expects a number. :func:`glued_nan_uses` finds every such use in the staged book
(chapter pages and the notebooks' own markdown cells, against the executed notebooks' glue), and
:func:`check_glued_prose` makes the build fail on them, unless the paragraph (or table) that
holds the role says why, by writing ``NaN`` itself (e.g. "NaN when no trial ends elsewhere").
"""
from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

from ._core import BuildError
from .sweep import glued_scalars

__all__ = ["glued_nan_uses", "check_glued_prose"]

#: ``{glue:text}`path::key:format``` or ``{glue:text}`key:format``` (also ``{glue}``, ``{glue:}``)
_ROLE = re.compile(r"\{glue(?::text|:)?\}`([^`]+)`")


def _blocks(text: str):
    """``(first line number, block text)`` of each blank-line-separated block of ``text``."""
    start, lines = 1, []
    for k, line in enumerate(text.splitlines() + [""], start=1):
        if line.strip():
            if not lines:
                start = k
            lines.append(line)
        elif lines:
            yield start, "\n".join(lines)
            lines = []


def _key(spec: str) -> tuple[str | None, str]:
    """``(document or None, key)`` of a glue role's content ``[doc::]key[:format]``."""
    doc, _, rest = spec.rpartition("::")
    return (doc or None), rest.split(":", 1)[0].strip()


def glued_nan_uses(stage_dir: str | os.PathLike) -> list[str]:
    """Every ``{glue:text}`` use of a NaN value in the staged book whose block does not say why.

    Parameters
    ----------
    stage_dir : path
        The tree that Jupyter Book renders (``_build/stage``): ``book/*.md`` and the executed
        notebooks under their source paths.

    Returns
    -------
    list of str
        ``"<page>:<line>: {glue:text}`<role>` is NaN"`` for each use, in file order.
    """
    stage_dir = Path(stage_dir)
    scalars: dict[Path, dict] = {}

    def value(page: Path, doc: str | None, key: str):
        nb = page if doc is None else (page.parent / doc).resolve()
        if nb.suffix != ".ipynb" or not nb.is_file():
            return None
        if nb not in scalars:
            try:
                scalars[nb] = glued_scalars(nb)
            except (OSError, ValueError):
                scalars[nb] = {}
        return scalars[nb].get(key)

    def scan(page: Path, text: str, where: str, first_line: int = 1) -> list[str]:
        found = []
        for line, block in _blocks(text):
            for m in _ROLE.finditer(block):
                doc, key = _key(m.group(1))
                v = value(page, doc, key)
                if isinstance(v, float) and math.isnan(v) and "NaN" not in block:
                    at = first_line + line - 1 + block[:m.start()].count("\n")
                    found.append(f"{where}:{at}: {m.group(0)} is NaN")
        return found

    out = []
    for page in sorted((stage_dir / "book").rglob("*.md")):
        out += scan(page.resolve(), page.read_text(), str(page.relative_to(stage_dir)))
    for nb in sorted(stage_dir.rglob("*.ipynb")):
        if "_build" in nb.relative_to(stage_dir).parts:
            continue
        try:
            cells = json.loads(nb.read_text()).get("cells", [])
        except (OSError, ValueError):
            continue
        for k, cell in enumerate(cells):
            if cell.get("cell_type") == "markdown":
                src = cell.get("source", "")
                out += scan(nb.resolve(), "".join(src) if isinstance(src, list) else src,
                            f"{nb.relative_to(stage_dir)} cell {k}")
    return out


def check_glued_prose(stage_dir: str | os.PathLike) -> None:
    """Raise :class:`~attnsvm_book.BuildError` listing every unexplained NaN that a page would
    print (:func:`glued_nan_uses`)."""
    found = glued_nan_uses(stage_dir)
    if found:
        raise BuildError("glued NaN in the prose (say why in the same paragraph, writing NaN, "
                         "or glue a value that is defined):\n  " + "\n  ".join(found))
