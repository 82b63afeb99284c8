"""Citations: author-year labels that tell works apart, only cited works in the bibliography."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from pybtex.database import parse_file

from attnsvm_book import bibstyle

REPO = Path(__file__).resolve().parents[1]
BIB = REPO / "book" / "references.bib"
CITE = re.compile(r"\{cite(?::[a-z]+)?\}`([^`]+)`")


def _cited_keys() -> set[str]:
    keys = set()
    for path in [*(REPO / "book").glob("*.md"), *(REPO / "notebooks").glob("*.ipynb")]:
        for group in CITE.findall(path.read_text()):
            keys.update(k.strip() for k in group.split(","))
    return keys


@pytest.mark.slow
def test_every_citation_has_an_entry_and_no_two_entries_print_alike():
    entries = parse_file(str(BIB)).entries
    assert _cited_keys() <= set(entries), sorted(_cited_keys() - set(entries))
    assert bibstyle.duplicate_labels(BIB) == {}
    labels = {k: bibstyle.entry_label(e) for k, e in entries.items()}
    assert labels["tarzanagh2023maxmargin"] == "Tarzanagh et al., 2023a"
    assert labels["tarzanagh2023transformers"] == "Tarzanagh et al., 2023b"
    assert labels["ji2021characterizing"] == "Ji and Telgarsky, 2021"


def test_duplicate_labels_are_found(tmp_path):
    bib = tmp_path / "x.bib"
    bib.write_text("@misc{a1, author={Doe, J. and Roe, R. and Poe, P.}, title={A}, year={2020}}\n"
                   "@misc{a2, author={Doe, Jane and Moe, M. and Zoe, Z.}, title={B}, year={2020}}\n")
    assert bibstyle.duplicate_labels(bib) == {"Doe et al., 2020": ["a1", "a2"]}


@pytest.mark.slow
def test_rendered_bibliography_is_author_year_with_links(full_build):
    out, _ = full_build
    html = (out / "html" / "book" / "bibliography.html").read_text()
    cited, further = html.split('id="further-reading"', 1)
    assert "Tarzanagh et al., 2023a" in cited and "Tarzanagh et al., 2023b" in cited
    assert "https://arxiv.org/abs/2308.16898" in cited
    entries = parse_file(str(BIB)).entries
    for key in _cited_keys():
        assert f"[</span>{bibstyle.entry_label(entries[key])}" in cited, key
    # uncited works are listed only under "Further reading"
    for key in set(entries) - _cited_keys():
        assert bibstyle.entry_label(entries[key]) in further, key
        assert bibstyle.entry_label(entries[key]) not in cited, key
    chapter = (out / "html" / "book" / "ch02_attsvm.html").read_text()
    assert "2023a" in chapter or "2023b" in chapter


def test_every_arxiv_identifier_is_a_link():
    """An arXiv identifier written into another field (``note = {arXiv:2305.17544}``, ``journal
    = {arXiv preprint arXiv:2408.15417}``) was printed as text; only ``eprint`` becomes a link
    (bibstyle), so every identifier of the file sits in an entry's ``eprint`` field."""
    arxiv = re.compile(r"\b\d{4}\.\d{4,5}\b")
    for key, entry in parse_file(str(BIB)).entries.items():
        for field, value in entry.fields.items():
            if field.lower() == "eprint" or field.lower() == "doi":
                continue
            found = arxiv.findall(str(value))
            assert not found, f"{key}: arXiv identifier {found} in {field}, not in eprint"
