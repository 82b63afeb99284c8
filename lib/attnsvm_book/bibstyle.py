"""The book's bibliography style: author-year labels, sorted by author and year, arXiv links.

A Sphinx extension (``_config.yml``: ``sphinx.extra_extensions``) that registers the pybtex
formatting style ``attnsvm`` (``bibtex_default_style: attnsvm``):

* labels ``Soudry et al., 2018`` / ``Ji and Telgarsky, 2021``, matching sphinxcontrib-bibtex's
  ``author_year`` citations in the text. Two works by the same authors in the same year carry
  the letter in their ``year`` field (``2023a``, ``2023b``), so the text and the list agree;
  :func:`duplicate_labels` finds pairs that would still print alike (a test checks none);
* entries sorted by author, year, title;
* an ``eprint`` field (arXiv identifier) or ``doi`` becomes a link (pybtex's ``unsrt`` web refs).
"""
from __future__ import annotations

__all__ = ["AuthorYearLabelStyle", "AuthorYearStyle", "entry_label", "duplicate_labels",  # noqa: F822  (lazy, module __getattr__)
           "setup"]

STYLE = "attnsvm"
LABEL_STYLE = "attnsvm_author_year"


def _last(person) -> str:
    from pybtex.richtext import Text

    return Text.from_latex(" ".join(person.prelast_names + person.last_names)).render_as("text")


def entry_label(entry) -> str:
    """``Author, YEAR``, ``A and B, YEAR`` or ``A et al., YEAR`` for a pybtex entry."""
    people = entry.persons.get("author") or entry.persons.get("editor") or []
    names = [_last(p) for p in people]
    if not names:
        who = entry.key
    elif len(names) == 1:
        who = names[0]
    elif len(names) == 2:
        who = f"{names[0]} and {names[1]}"
    else:
        who = f"{names[0]} et al."
    return f"{who}, {entry.fields.get('year', 'n.d.')}"


def duplicate_labels(bib_path) -> dict:
    """Labels shared by more than one entry of a ``.bib`` file: ``{label: [keys]}``."""
    from pybtex.database import parse_file

    seen: dict = {}
    for key, entry in parse_file(str(bib_path)).entries.items():
        seen.setdefault(entry_label(entry), []).append(key)
    return {label: keys for label, keys in seen.items() if len(keys) > 1}


def _styles():
    from pybtex.style.formatting.unsrt import Style as UnsrtStyle
    from pybtex.style.labels import BaseLabelStyle

    class AuthorYearLabelStyle(BaseLabelStyle):
        """Author-year labels (see :func:`entry_label`)."""

        def format_labels(self, sorted_entries):
            for entry in sorted_entries:
                yield entry_label(entry)

    class AuthorYearStyle(UnsrtStyle):
        """``unsrt`` entries with author-year labels, sorted by author, year and title."""

        default_label_style = LABEL_STYLE
        default_sorting_style = "author_year_title"

    return AuthorYearLabelStyle, AuthorYearStyle


def __getattr__(name):
    if name in ("AuthorYearLabelStyle", "AuthorYearStyle"):
        return dict(zip(("AuthorYearLabelStyle", "AuthorYearStyle"), _styles()))[name]
    raise AttributeError(name)


def register() -> None:
    """Register the styles with pybtex (idempotent)."""
    from pybtex.plugin import find_plugin, register_plugin

    labels, style = _styles()
    try:
        find_plugin("pybtex.style.formatting", STYLE)
    except Exception:
        register_plugin("pybtex.style.labels", LABEL_STYLE, labels)
        register_plugin("pybtex.style.formatting", STYLE, style)


def setup(app):
    register()
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}
