"""The README is a user's page: its example runs as written (doctest), it is short, its tables are
well formed, its timings are generated from the recorded runs of ``notes/runs/``, its test command
is the one CI calls, and it speaks to a user, not of how it was written."""
from __future__ import annotations

import doctest
import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
RUNS = sorted((ROOT / "notes" / "runs").glob("*.json"))

_spec = importlib.util.spec_from_file_location("profile_table", ROOT / "tools" / "profile_table.py")
profile_table = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(profile_table)


def test_readme_example_is_a_passing_doctest():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    text = "\n".join(b for b in blocks if ">>>" in b)
    parser = doctest.DocTestParser()
    test = parser.get_doctest(text, {}, "README.md", str(README), 0)
    assert len(test.examples) >= 5, "the README's example lost its >>> lines"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} README examples failed"


def tables(text):
    """Each Markdown table of ``text`` (outside code fences) as a list of (line number, cells)."""
    out, current, fence = [], [], False
    for k, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            fence = not fence
        if not fence and line.startswith("|"):
            cells = re.split(r"(?<!\\)\|", line.strip())[1:-1]
            current.append((k, cells))
        elif current:
            out.append(current)
            current = []
    return out + ([current] if current else [])


def malformed(text):
    """Rows whose number of cells differs from their table's header, and tables without a
    separator row of dashes under the header."""
    bad = []
    for table in tables(text):
        (k0, head), rows = table[0], table[1:]
        if not rows or not all(re.fullmatch(r"\s*:?-{3,}:?\s*", c) for c in rows[0][1]):
            bad.append(f"line {k0}: no separator row under the header")
        bad += [f"line {k}: {len(cells)} cells, the header has {len(head)}"
                for k, cells in rows if len(cells) != len(head)]
    return bad


def test_readme_is_short_and_its_tables_well_formed():
    text = README.read_text()
    assert len(text.splitlines()) < 200
    assert len(tables(text)) >= 2
    assert malformed(text) == []


def test_the_table_check_catches_a_row_with_extra_cells():
    """The README of issue 38 had rows of its table of chapters carrying the cells of another
    table: such a row, or a table with no separator, is reported."""
    good = "| a | b |\n|---|---|\n| 1 | 2 |\n"
    assert malformed(good) == []
    assert malformed(good + "| 3 | 4 | 5 min | all hold |\n") == ["line 4: 4 cells, the header has 2"]
    assert malformed("| a | b |\n| 1 | 2 |\n") == ["line 1: no separator row under the header"]
    assert malformed("```\n| a |\n```\n") == []


@pytest.mark.parametrize("word", ["session", "loaded", "this machine's load"])
def test_readme_speaks_to_a_user(word):
    assert word not in README.read_text().lower()


def test_readme_test_command_is_what_ci_calls():
    text = README.read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^make test\b", ci, flags=re.M)
    setup = text[text.index("## Set-up"):]
    assert re.search(r"^make test\s", setup[:setup.index("\n## ", 5)], flags=re.M)


def test_readme_profile_table_is_generated_from_the_recorded_runs(tmp_path):
    """The table between the README's markers is what ``tools/profile_table.py table`` makes of
    ``notes/runs/*.json``, with the machine and the date in its header; a timing typed by hand
    into it (or a run recorded without updating it) fails."""
    assert RUNS, "no recorded run in notes/runs/"
    assert profile_table.check(README, RUNS) == []
    have = profile_table.readme_table(README.read_text())
    for run in profile_table.load(RUNS):
        assert run["machine"] in have and run["date"][:10] in have
    edited = README.read_text().replace(have, have.replace(" s |", " s (edited) |", 1))
    bad = tmp_path / "README.md"
    bad.write_text(edited)
    assert profile_table.check(bad, RUNS), "a hand edit of the table went unnoticed"


def test_recorded_runs_hold_no_machine_path():
    for path in RUNS:
        text = path.read_text()
        assert "/work/" not in text and "/tmp/" not in text and "/home/" not in text, path
