"""tools/glue_diff.py: the check behind notes/*_glue_changes.md (a refactoring moves no number)."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "glue_diff", Path(__file__).resolve().parents[1] / "tools" / "glue_diff.py")
glue_diff = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(glue_diff)


def _glue(name, text):
    """A glue record as myst-nb writes it (display=False)."""
    prefix = "application/papermill.record/"
    return {"output_type": "display_data", "data": {prefix + "text/plain": text},
            "metadata": {"scrapbook": {"name": name, "mime_prefix": prefix}}}


def _nb(path, records):
    cell = {"cell_type": "code", "source": "", "metadata": {}, "execution_count": 1,
            "outputs": [_glue(k, v) for k, v in records.items()]}
    path.write_text(json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return path


BASE = {"slope": "np.float64(-1.0000000000)", "n": "12", "claim_fast": "holds",
        "claim_fast_detail": "slope -1.0", "fig": "<Figure>"}


def test_identical_and_rounding_pass(tmp_path):
    old = _nb(tmp_path / "old.ipynb", BASE)
    new = _nb(tmp_path / "new.ipynb", {**BASE, "slope": "np.float64(-1.00000000000001)"})
    d = glue_diff.diff(old, new)
    assert d == {"changed": [], "missing": [], "new": [], "claims": []}
    assert glue_diff.main([str(old), str(new)]) == 0


@pytest.mark.parametrize("edit, kind", [
    ({"slope": "np.float64(-1.001)"}, "changed"),          # a number moved beyond rtol
    ({"n": "13"}, "changed"),
    ({"claim_fast": "fails"}, "claims"),                   # a claim word flipped
])
def test_a_moved_value_or_claim_is_reported(tmp_path, edit, kind):
    old = _nb(tmp_path / "old.ipynb", BASE)
    new = _nb(tmp_path / "new.ipynb", {**BASE, **edit})
    d = glue_diff.diff(old, new)
    assert len(d[kind]) == 1
    assert glue_diff.main([str(old), str(new)]) == 1


def test_a_lost_key_is_reported_and_directories_pair_by_name(tmp_path, capsys):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    _nb(tmp_path / "a" / "ch.ipynb", BASE)
    _nb(tmp_path / "b" / "ch.ipynb", {k: v for k, v in BASE.items() if k != "fig"})
    _nb(tmp_path / "a" / "gone.ipynb", BASE)
    assert glue_diff.main([str(tmp_path / "a"), str(tmp_path / "b")]) == 1
    out = capsys.readouterr().out
    assert "missing fig" in out and "no executed copy" in out
    with pytest.raises(ValueError, match="rtol"):
        glue_diff.diff(tmp_path / "a" / "ch.ipynb", tmp_path / "b" / "ch.ipynb", rtol=-1)
