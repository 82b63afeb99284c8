"""Figure text in the book's notation (issue 38, item 6): the figures of the notebooks write the
key-query matrix, its max-margin solutions and the loss as the chapters do, bold
:math:`\\boldsymbol{W}` and :math:`\\boldsymbol{W}^{\\mathrm{mm}}` (``\\W``, ``\\Wmm`` in
``_config.yml``) and script :math:`\\mathcal{L}`, not italic ``W_{mm}`` or plain ``L``.

Figure text is every string literal holding a ``$`` in a notebook's code cells and in
``attnsvm.plot``. Pages whose chapter writes the matrix in plain italic keep it: ch01 (vectors
``w``), ch12a/ch12b (the heads' ``W_h`` of real networks), ch15/ch15b (the NTP model's ``W``,
``L``); ch16 writes its limit direction ``W^G_{mm}`` and its loss ``L`` as its chapter does.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
PLAIN = ("ch01_", "ch12a_", "ch12b_", "ch15_", "ch15b_")

#: the old spellings inside a formula: italic max-margin matrix, italic W, plain L - L*
OLD = [
    (re.compile(r"W\^\{mm\}|W_\{mm\}|W\^\*_\{mm\}|W\^\{?\\alpha\}?_\{mm\}|W\^S_\{mm\}"), "W_mm italic"),
    (re.compile(r"(?<![A-Za-z\\{])W(?![A-Za-z]|\^G)"), "W italic"),
    (re.compile(r"(?<![A-Za-z\\{])L\s*-\s*L\^"), "plain L"),
    (re.compile(r"p_\{mm\}"), "p_mm italic"),
]


def formulas(source: str):
    """The ``$...$`` formulas of the string literals of Python ``source``."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "$" in node.value:
            yield from re.findall(r"\$[^$]*\$", node.value)


def old_notation(source: str, ntp: bool = False) -> list[tuple[str, str]]:
    """``(formula, what)`` for every formula of ``source`` in an old spelling; ``ntp``: chapter
    16, whose loss is the plain ``L`` of its chapter."""
    bad = []
    for f in formulas(source):
        for pat, what in OLD:
            if ntp and what == "plain L":
                continue
            if pat.search(f):
                bad.append((f, what))
    return bad


def _notebook_sources():
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        if path.name.startswith(PLAIN):
            continue
        nb = nbformat.read(path, as_version=4)
        code = "\n".join(c.source for c in nb.cells if c.cell_type == "code"
                         and not c.source.lstrip().startswith(("%", "!")))
        yield path.name, code


def test_figure_text_uses_the_chapters_notation():
    """The twin: a label with the old italic ``W_{mm}``, one with an italic ``W_t`` and a legend
    entry ``Polyak $L-L^\\star$`` (the spellings before this check) are each caught; ch09's
    notebook before it had 14 such formulas."""
    bad, scanned = {}, 0
    for name, code in _notebook_sources():
        scanned += len(list(formulas(code)))
        hits = old_notation(code, ntp=name.startswith("ch16"))
        if hits:
            bad[name] = hits
    hits = old_notation((ROOT / "lib" / "attnsvm" / "plot.py").read_text())
    if hits:
        bad["attnsvm/plot.py"] = hits
    assert not bad, bad
    assert scanned > 100, scanned   # the notebooks' figure formulas were found (162 here)
    assert old_notation('ax.set(ylabel=r"$1-\\mathrm{corr}(\\boldsymbol{W}_t, W_{mm})$")')
    assert old_notation('ax.set(ylabel=r"$\\|W_t\\|_F$")')
    assert old_notation('ax.plot(t, c, label=r"corr$(p_t, p_{mm})$")')
    assert old_notation('LABELS = {"polyak_star": "Polyak $L-L^\\\\star$"}')
    assert not old_notation('ax.set(ylabel=r"$\\|\\boldsymbol{W}^{\\mathrm{mm}}\\|$")')
