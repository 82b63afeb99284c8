"""One source for the status of each result (issue 37, item 7): the introduction, the "results
at a glance" boxes and ch08's comparison table must not contradict the chapters.

The status of a labelled result is the suffix of its directive's title ("(proved here)",
"(cited ...)", "(observed)"); ``book/results_status.yml`` lists the directional orders that other
pages restate, each with its label and the words naming its condition. The checks, each shown
failing on a planted contradiction by its twin below:

* every order of the registry has the status of its label's title;
* every row of a "results at a glance" box whose status cell says "proved" cites only results
  proved here, and one that says "cited" only cited results;
* no sentence of the restating pages (intro, ch08) says "not proved" or "open" about an order
  the registry lists as proved, unless it names the order's condition.
"""
from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
_DIRECTIVE = re.compile(r"^`{3,}\{prf:(\w+)\}\s*(.*?)\s*\n:label:\s*(\S+)", re.M)


def _status(title):
    t = title.lower()
    if "(proved here" in t or "proof written here" in t:
        return "proved"
    if "(cited" in t:
        return "cited"
    if "(observed" in t:
        return "observed"
    return None


def directive_statuses(texts):
    """label -> status read from the titles of every prf directive of ``texts`` (name -> text)."""
    out = {}
    for text in texts.values():
        for kind, title, label in _DIRECTIVE.findall(text):
            if kind not in ("proof", "definition", "remark", "example"):
                out[label] = _status(title)
    return out


def glance_rows(text):
    """(status cell, labels) of each row of the chapter's "Results at a glance" box."""
    m = re.search(r"```\{admonition\} Results at a glance.*?\n```", text, re.S)
    if not m:
        return []
    rows = []
    for line in m.group(0).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and not set(cells[0]) <= set("-: ") and cells[2] != "status":
            rows.append((cells[-2], re.findall(r"prf:ref\}`([^`]+)`", cells[-1])))
    return rows


def glance_contradictions(text, statuses):
    bad = []
    for status, labels in glance_rows(text):
        # a cited statement whose proof the chapter writes out may point to a proved result
        want = ({"proved"} if status.startswith("proved") else
                {"cited", "proved"} if status.startswith("cited") and "proof written here" in status else
                {"cited"} if status.startswith("cited") else None)
        for lab in labels:
            if want and statuses.get(lab) is not None and statuses[lab] not in want:
                bad.append((status, lab, statuses.get(lab)))
    return bad


def _norm(s):
    return re.sub(r"[\s$]", "", s)


def prose_contradictions(text, registry):
    """Sentences saying an order listed as proved is "not proved"/"open" without its condition."""
    bad = []
    sentences = re.split(r"(?<=[.;|])\s+", text.replace("\n", " "))
    for sent in sentences:
        low = sent.lower()
        if "not proved" not in low and " open" not in low:
            continue
        flat = _norm(sent)
        for entry in registry["orders"]:
            if entry["status"] == "proved" and _norm(entry["order"]) in flat:
                if not any(q.lower() in low for q in entry["qualifiers"]):
                    bad.append((entry["order"], sent.strip()[:160]))
    return bad


def _load():
    texts = {p.name: p.read_text() for p in sorted(BOOK.glob("*.md"))}
    registry = yaml.safe_load((BOOK / "results_status.yml").read_text())
    return texts, registry, directive_statuses(texts)


def test_registry_agrees_with_the_chapters():
    texts, registry, st = _load()
    for entry in registry["orders"]:
        assert st.get(entry["label"]) == entry["status"], (entry, st.get(entry["label"]))
    for page in registry["restating"]:
        assert (ROOT / page).exists(), page


def test_glance_boxes_agree_with_the_chapters():
    texts, _, st = _load()
    boxes = [n for n, t in texts.items() if glance_rows(t)]
    assert len(boxes) >= 9, boxes
    bad = {n: glance_contradictions(t, st) for n, t in texts.items()}
    assert not any(bad.values()), {k: v for k, v in bad.items() if v}


def test_restating_pages_do_not_contradict():
    texts, registry, _ = _load()
    bad = {p: prose_contradictions((ROOT / p).read_text(), registry) for p in registry["restating"]}
    for name in (n for n in texts if n.startswith("ch09")):   # the chapter and its parts
        bad[name] = prose_contradictions(texts[name], registry)
    assert not any(bad.values()), bad


def test_planted_contradictions_are_caught():
    """The twins: the sentence the introduction carried before issue 37, a glance row calling a
    cited result proved, and a registry entry whose status differs from its label's title, each
    fail the corresponding check; the corrected sentence passes."""
    texts, registry, st = _load()
    old = ("and of order $1/\\log t$ for gradient descent and the capped Polyak step; the faster "
           "rate ($1/t^2$) observed for the first two is not proved. These results start")
    assert prose_contradictions(old, registry)
    new = ("the faster rate ($1/t^2$) observed for the first two is not proved without strict "
           "complementarity.")
    assert not prose_contradictions(new, registry)
    cited = next(lab for lab, s in st.items() if s == "cited")
    box = ("```{admonition} Results at a glance\n:class: tip\n\n| result | statement | status | where |\n"
           "|---|---|---|---|\n| x | y | proved | {prf:ref}`" + cited + "` |\n```\n")
    assert glance_contradictions(box, st) == [("proved", cited, "cited")]
    wrong = dict(registry["orders"][0], status="observed")
    assert st.get(wrong["label"]) != wrong["status"]
