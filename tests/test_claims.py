"""Checked claims (attnsvm.claims.claim): strict under the build, a warning in a reader's run."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import attnsvm_book as book
from attnsvm import claims

REPO = Path(__file__).resolve().parents[1]


def test_true_claim_passes_in_both_modes(monkeypatch, recwarn):
    for value in ("1", ""):
        monkeypatch.setenv(claims.STRICT_ENV, value)
        assert claims.claim("fine", np.float64(1.0) < 2.0, "1 < 2", notebook="nb") is True
    assert not [w for w in recwarn if issubclass(w.category, claims.ClaimWarning)]


def test_false_claim_raises_when_strict(monkeypatch):
    monkeypatch.setenv(claims.STRICT_ENV, "1")
    with pytest.raises(claims.ClaimError) as e:
        claims.claim("ngd_fast", np.bool_(False), "slope NGD -0.02 vs GD -0.18", notebook="ch09_rates")
    msg = str(e.value)
    assert "ngd_fast" in msg and "ch09_rates" in msg and "-0.02" in msg


def test_false_claim_warns_otherwise(monkeypatch):
    monkeypatch.delenv(claims.STRICT_ENV, raising=False)
    with pytest.warns(claims.ClaimWarning, match="ngd_fast.*ch09_rates.*-0.02"):
        assert claims.claim("ngd_fast", False, "slope -0.02", notebook="ch09_rates") is False
    monkeypatch.setenv(claims.STRICT_ENV, "0")
    with pytest.warns(claims.ClaimWarning):
        claims.claim("x", False, "")


def test_notebook_name_from_set_notebook_and_env(monkeypatch):
    monkeypatch.setenv(claims.STRICT_ENV, "1")
    monkeypatch.setattr(claims, "_notebook", None)
    monkeypatch.setenv(claims.NOTEBOOK_ENV, "from_env")
    with pytest.raises(claims.ClaimError, match="from_env"):
        claims.claim("a", False, "")
    claims.set_notebook("from_call")
    with pytest.raises(claims.ClaimError, match="from_call"):
        claims.claim("a", False, "")


def test_bad_input_names_the_argument():
    with pytest.raises(TypeError, match="holds"):
        claims.claim("a", 0.5, "")
    with pytest.raises(TypeError, match="holds"):
        claims.claim("a", np.array([True, True]), "")
    with pytest.raises(ValueError, match="name"):
        claims.claim("not a name", True, "")
    with pytest.raises(TypeError, match="detail"):
        claims.claim("a", True, 3.0)
    with pytest.raises(ValueError, match="name"):
        claims.set_notebook("")


def test_the_build_is_strict_and_a_readers_run_is_not(minibook, monkeypatch):
    """A false claim fails the book's build (naming the claim and the notebook, whose name the
    build gives the kernel: a notebook never names itself), while ``run`` of the same notebook
    only warns; the build leaves the calling process's environment unchanged."""
    from minibook import _add_notebook

    monkeypatch.delenv(claims.STRICT_ENV, raising=False)
    monkeypatch.delenv(claims.NOTEBOOK_ENV, raising=False)
    _add_notebook(minibook, "claimed", "gap = 0.5\ndevice = 'cpu'",
                  "from attnsvm.claims import claim\n"
                  "claim('gap_small', gap < 0.1, f'gap = {gap}')")
    with pytest.raises(book.BuildError, match="gap_small.*of notebook claimed does not hold"):
        book.build(minibook, "quick", render_html=False, log=lambda *a: None)
    assert claims.STRICT_ENV not in os.environ and claims.NOTEBOOK_ENV not in os.environ
    res = book.run_notebook(minibook / "notebooks" / "claimed.ipynb", (), root=minibook,
                            render_html=False, log=lambda *a: None)
    assert "gap_small" in Path(res["executed"]).read_text()


def _papermill(tmp_path, strict):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO / "lib") + os.pathsep + env.get("PYTHONPATH", "")
    env.pop(claims.STRICT_ENV, None)
    if strict:
        env[claims.STRICT_ENV] = "1"
    out = tmp_path / ("strict.ipynb" if strict else "lenient.ipynb")
    return subprocess.run(
        [sys.executable, "-m", "papermill", str(REPO / "notebooks" / "ch09_rates.ipynb"), str(out),
         "--cwd", str(REPO / "notebooks"), "-p", "lr_ngd", "1e-6", "-p", "steps", "300"],
        env=env, capture_output=True, text=True, timeout=600), out


@pytest.mark.slow
def test_acceptance_ch09_claims(tmp_path):
    """A crippled NGD step breaks the chapter's claims: the build's strict run fails with
    ClaimError; a reader's run completes and warns."""
    res, out = _papermill(tmp_path, strict=True)
    assert res.returncode != 0
    assert "ClaimError" in res.stdout + res.stderr
    assert "ngd_fast" in res.stdout + res.stderr
    res, out = _papermill(tmp_path, strict=False)
    assert res.returncode == 0, res.stderr[-2000:]
    text = out.read_text()
    assert "ClaimWarning" in text and "ngd_fast" in text


def test_check_runs_every_claim_and_raises_on_the_first_false(monkeypatch):
    """``check`` glues every claim of a ``.claims()`` dict and, strict, raises naming the false one."""
    glued = []
    monkeypatch.setattr(claims, "_glue", lambda k, v: glued.append((k, str(v))))
    monkeypatch.setenv(claims.STRICT_ENV, "1")
    assert claims.check({"a": (True, "x=1"), "b": (np.bool_(True), "y")}, notebook="nb") == {"a": True, "b": True}
    with pytest.raises(claims.ClaimError, match="'bad'.*nb.*z=3"):
        claims.check({"ok": (True, ""), "bad": (False, "z=3"), "late": (True, "")}, notebook="nb")
    # every claim was glued, the one after the false one too
    assert ("claim_late", "holds") in glued and ("claim_bad", "fails") in glued
    with pytest.raises(TypeError, match=r"claims\['x'\]"):
        claims.check({"x": True})
    with pytest.raises(TypeError, match="dict"):
        claims.check([("x", True, "")])


class _Result:
    def __init__(self, config, summary, claims_):
        self.config, self._summary, self._claims = config, summary, claims_

    def summary(self):
        return dict(self._summary)

    def claims(self):
        return dict(self._claims)


def test_publish_glues_config_and_summary_and_checks_the_claims(monkeypatch):
    """``publish(result)`` glues ``{**config, **summary()}`` and every claim, returns nothing, and
    (strict) raises on a false claim after gluing everything; two values under one key and a
    result without ``claims`` are errors naming them."""
    glued = {}
    monkeypatch.setattr(claims, "_glue", lambda k, v: glued.__setitem__(k, v))
    monkeypatch.setenv(claims.STRICT_ENV, "1")
    r = _Result({"n": 4, "steps": 100}, {"corr": 0.99}, {"fast": (True, "x")})
    assert claims.publish(r) is None
    assert glued["n"] == 4 and glued["steps"] == 100 and glued["corr"] == 0.99
    assert str(glued["claim_fast"]) == "holds"
    glued.clear()
    bad = _Result({"n": 4}, {"gap": 0.5}, {"small_gap": (False, "gap = 0.5")})
    with pytest.raises(claims.ClaimError, match="small_gap"):
        claims.publish(bad, notebook="nb")
    assert glued["gap"] == 0.5 and str(glued["claim_small_gap"]) == "fails"
    with pytest.raises(ValueError, match="'n'"):
        claims.publish(r, _Result({"n": 5}, {}, {}))
    claims.publish(r, _Result({"n": 4}, {"other": 1}, {"also": (True, "")}))    # same value: fine
    with pytest.raises(TypeError, match="claims"):
        claims.publish(type("NoClaims", (), {"config": {}, "summary": lambda self: {}})())


def test_every_notebook_ends_in_one_publish_call():
    """Issue 28.2: the last statement of every notebook's last code cell is ``publish(...)``, the
    only call of it in the notebook; no notebook names itself (``set_notebook(``) or writes its
    parameters out again (``parameters = dict(``). Can fail: a figure cell after the publish
    cell, or a second publish, is caught (checked on a planted copy below)."""
    import ast
    import json

    root = REPO

    def last_call_is_publish(nb):
        code = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
        body = ast.parse(code[-1]).body
        last = body[-1] if body else None
        calls = sum("publish(" in src for src in code)
        return (calls == 1 and isinstance(last, ast.Expr) and isinstance(last.value, ast.Call)
                and getattr(last.value.func, "id", None) == "publish")

    bad = []
    for p in sorted((root / "notebooks").glob("*.ipynb")):
        nb = json.loads(p.read_text())
        text = "".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
        if not last_call_is_publish(nb) or "set_notebook(" in text or "parameters = dict(" in text:
            bad.append(p.name)
    assert not bad, f"notebooks not ending in one publish(...) call: {bad}"
    planted = json.loads((root / "notebooks" / "ch08_global.ipynb").read_text())
    planted["cells"].append({"cell_type": "code", "metadata": {}, "source": "fig = 1\n",
                             "outputs": [], "execution_count": None})
    assert not last_call_is_publish(planted)


def test_format_value_reads_as_a_reader_expects():
    """Four significant digits, no ``nan`` and no ``-0``: the raw dumps of issue 38 (16 digits,
    ``nan`` on ch04b and ch08, ``-0`` in ch08) are what this replaces."""
    f = claims.format_value
    assert f(0.123456789) == "0.1235" and f(-1.97512) == "-1.975" and f(123456.7) == "1.235e+05"
    assert f(float("nan")) == f(None) == claims.UNDEFINED and f(np.float64("nan")) != "nan"
    assert f(-0.0) == "0" and f(-1e-20 * 0) == "0" and f(np.float64(-0.0)) == "0"
    assert f(1200) == "1,200" and f(np.int64(7)) == "7" and f(True) == "yes" and f(np.bool_(0)) == "no"
    assert f(float("inf")) == "\u221e" and f([1.0, 2.5, float("nan")]) == "[1, 2.5, \u2014]"
    assert f(np.arange(20.0)) == "20 values, 0 to 19"
    assert f(claims.Word("holds")) == "holds"


def test_results_table_html_and_text():
    t = claims.ResultsTable({"slope_ngd": -1.97512, "runs": {"gd": {"loss": 0.5}}, "gap": float("nan")},
                            claims={"ngd_fast": (np.bool_(True), "slope -1.975"),
                                    "bad": (False, "x < 1")}, title="Results")
    h = t._repr_html_()
    assert "<code>slope_ngd</code></td><td>-1.975</td>" in h and "runs / gd / loss" in h
    assert 'id="claim-ngd_fast"' in h and "1 of 2 hold" in h and "<strong>fails</strong>" in h
    assert "nan" not in h.lower() and "not defined" in h
    text = repr(t)
    assert re.search(r"^slope_ngd +-1.975$", text, re.M) and "bad: FAILS (x < 1)" in text
    assert "not defined" not in repr(claims.results_table({"a": 1.0}))
    with pytest.raises(TypeError, match="dict"):
        claims.results_table([1, 2])


def test_publish_shows_one_table_in_a_notebook(monkeypatch):
    """Under IPython ``publish`` displays one ResultsTable (summary and claims), also when a
    strict claim fails; outside IPython it shows nothing."""
    import IPython
    import IPython.display
    shown = []
    monkeypatch.setattr(claims, "_glue", lambda k, v: None)
    monkeypatch.setattr(IPython.display, "display", lambda obj: shown.append(obj))
    r = _Result({"n": 4}, {"corr": 0.99, "gap": float("nan")}, {"fast": (True, "x")})
    monkeypatch.setattr(IPython, "get_ipython", lambda: None)
    claims.publish(r)
    assert shown == []                                   # not under IPython
    monkeypatch.setattr(IPython, "get_ipython", lambda: object())
    claims.publish(r)
    (table,) = shown
    assert isinstance(table, claims.ResultsTable)
    assert ("corr", "0.99") in table.rows and ("n", "4") not in table.rows   # the summary only
    assert table.claims == [("fast", True, "x")]
    monkeypatch.setenv(claims.STRICT_ENV, "1")
    with pytest.raises(claims.ClaimError):
        claims.publish(_Result({}, {"g": 1.0}, {"bad": (False, "y")}))
    assert len(shown) == 2 and shown[1].claims == [("bad", False, "y")]
