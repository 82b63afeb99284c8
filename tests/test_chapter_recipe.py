"""The chapter recipe, kept honest (issue 28, item 7): every notebook of ``_toc.yml`` has an entry
in both profiles of ``profiles.yml``, its chapter has a test file ``tests/test_chNN_*.py``, a row in
the README's table of chapters and a driver listed for its chapter number, both in
``attnsvm.experiments``' table and in the table of drivers of the book's page on the library
(``book/using_library.md``, which took it from the README when the README became a user's page).
CONTRIBUTING's "Add a chapter" lists these files in order."""
from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
LIBRARY_PAGE = "book/using_library.md"


def chapters(toc):
    """``{chapter file stem: [notebook stems]}`` of the numbered chapters of a ``_toc.yml``."""
    out = {}
    for part in toc.get("parts", []):
        for ch in part.get("chapters", []):
            stem = Path(ch["file"]).name
            if re.match(r"ch\d\d_", stem):
                out[stem] = [Path(s["file"]).name for s in ch.get("sections", [])
                             if s["file"].startswith("notebooks/")]
    return out


def _ranges(cells):
    """Chapter numbers of table cells such as ``8-10`` or ``4``."""
    out = set()
    for c in cells:
        m = re.fullmatch(r"\s*(\d+)(?:-(\d+))?\s*", c)
        if m:
            a, b = int(m.group(1)), int(m.group(2) or m.group(1))
            out |= set(range(a, b + 1))
    return out


def recipe_gaps(root=ROOT):
    """Every missing piece of the recipe, as a sentence naming the chapter and the file."""
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    profiles = yaml.safe_load((root / "profiles.yml").read_text())
    readme = (root / "README.md").read_text()
    library = (root / LIBRARY_PAGE).read_text()
    drivers = (root / "lib" / "attnsvm" / "experiments" / "__init__.py").read_text()
    driver_rows = [row.split() for row in drivers.splitlines() if re.match(r"``\w+``\s+\d", row)]
    driver_chapters = _ranges(r[1] for r in driver_rows)
    readme_driver_chapters = _ranges(row.split("|")[2] for row in library.splitlines()
                                     if row.startswith("| `attnsvm.experiments."))
    gaps = []
    for chapter, notebooks in chapters(toc).items():
        number = int(chapter[2:4])
        for nb in notebooks:
            for profile in ("quick", "paper"):
                if f"notebooks/{nb}.ipynb" not in (profiles.get(profile, {}).get("notebooks") or {}):
                    gaps.append(f"{nb}: no entry in profiles.yml's {profile!r} profile")
        if not list((root / "tests").glob(f"test_ch{number:02d}_*.py")):
            gaps.append(f"{chapter}: no tests/test_ch{number:02d}_*.py")
        rows = [row for row in readme.splitlines() if row.startswith("|") and f"`{chapter}`" in row]
        if not rows:
            gaps.append(f"{chapter}: no row in the README's table of chapters")
        elif any(f"`{nb}`" not in rows[0] for nb in notebooks):
            gaps.append(f"{chapter}: the README's row does not list all of {notebooks}")
        if number not in driver_chapters:
            gaps.append(f"{chapter}: no driver for chapter {number} in attnsvm.experiments' table")
        if number not in readme_driver_chapters:
            gaps.append(f"{chapter}: no driver for chapter {number} in {LIBRARY_PAGE}'s table of "
                        f"drivers")
    return gaps


def test_every_chapter_follows_the_recipe():
    gaps = recipe_gaps()
    assert not gaps, "\n".join(gaps)


def test_the_recipe_check_can_fail(tmp_path):
    """A chapter added to _toc.yml alone is reported for every file it lacks."""
    (tmp_path / "book").mkdir()
    for name in ("profiles.yml", "README.md", LIBRARY_PAGE):
        (tmp_path / name).write_text((ROOT / name).read_text())
    toc = (ROOT / "_toc.yml").read_text() + (
        "  - caption: \"V. New\"\n    chapters:\n      - file: book/ch17_new\n"
        "        sections:\n          - file: notebooks/ch17_new\n")
    (tmp_path / "_toc.yml").write_text(toc)
    (tmp_path / "tests").mkdir()
    for p in (ROOT / "tests").glob("test_ch*.py"):
        (tmp_path / "tests" / p.name).write_text("")
    (tmp_path / "lib" / "attnsvm" / "experiments").mkdir(parents=True)
    (tmp_path / "lib" / "attnsvm" / "experiments" / "__init__.py").write_text(
        (ROOT / "lib" / "attnsvm" / "experiments" / "__init__.py").read_text())
    gaps = recipe_gaps(tmp_path)
    assert gaps == ["ch17_new: no entry in profiles.yml's 'quick' profile",
                    "ch17_new: no entry in profiles.yml's 'paper' profile",
                    "ch17_new: no tests/test_ch17_*.py",
                    "ch17_new: no row in the README's table of chapters",
                    "ch17_new: no driver for chapter 17 in attnsvm.experiments' table",
                    f"ch17_new: no driver for chapter 17 in {LIBRARY_PAGE}'s table of drivers"]


def test_contributing_lists_the_files_of_a_new_chapter_in_order():
    text = (ROOT / "CONTRIBUTING.md").read_text()
    section = text[text.index("## Add a chapter"):]
    section = section[:section.find("\n## ", 4)] if "\n## " in section[4:] else section
    order = ["book/chNN_name.md", "notebooks/chNN_name.ipynb", "lib/attnsvm/experiments/",
             "lib/attnsvm/experiments/__init__.py", "tests/test_chNN_name.py", "_toc.yml",
             "profiles.yml", "README.md", "notes/", "tools/glue_diff.py"]
    where = [section.find(f"`{item}`") for item in order]
    assert all(w >= 0 for w in where), [o for o, w in zip(order, where) if w < 0]
    assert where == sorted(where), "list the files in the order above"
