r"""Checked claims: a qualitative sentence of a chapter, computed in its notebook.

A chapter that says "NGD is faster than GD" must not rely on the reader's eye. The chapter's
driver computes the statement as a boolean: its result object has ``.claims()``, a dict
``name -> (holds, detail)`` beside ``.summary()``, and the notebook checks them all with one call:

>>> check(result.claims())                                          # doctest: +SKIP

One claim at a time is :func:`claim`:

>>> claim("ngd_faster", slope_ngd < slope_gd,                       # doctest: +SKIP
...       f"slope NGD {slope_ngd:.3f} vs GD {slope_gd:.3f}")

* the outcome is glued, so the prose can quote it: ``claim_<name>`` is the word ``"holds"`` or
  ``"fails"``, ``claim_<name>_detail`` the detail string (the numbers);
* under the book build (environment variable ``ATTNSVM_STRICT_CLAIMS=1``, set by
  the book build) a false claim raises :class:`ClaimError`, naming the claim,
  the notebook and the numbers, and the build fails;
* in a reader's own run (variable unset or ``0``) a false claim emits a :class:`ClaimWarning`
  (always shown) and execution goes on.

A chapter's notebook publishes its results with one call, its last:

>>> publish(result)                                                  # doctest: +SKIP

which glues every number of ``{**result.config, **result.summary()}`` under its key (the
prose quotes them with ``{glue:text}``) and checks ``result.claims()``; in a notebook it shows
one :class:`ResultsTable`: the summary's numbers to four significant digits and every checked
claim with its outcome and numbers, each claim's row anchored ``claim-<name>`` so that the
chapter's marks link to it (figures glue themselves, :func:`attnsvm.plot.save_or_glue`). A cell
that shows some numbers on the way calls :func:`results_table` rather than leaving a dict.

The notebook's name (in the messages of false claims) comes from the build, which sets the
environment variable ``ATTNSVM_NOTEBOOK`` for each notebook it runs; :func:`set_notebook` or
``notebook=`` name it elsewhere.
"""
from __future__ import annotations

import html
import math
import numbers
import os
import warnings

import numpy as np

__all__ = ["ClaimError", "ClaimWarning", "Word", "claim", "check", "publish", "set_notebook", "strict",
           "STRICT_ENV", "NOTEBOOK_ENV", "ResultsTable", "results_table", "format_value"]

#: environment variable that turns false claims into errors
STRICT_ENV = "ATTNSVM_STRICT_CLAIMS"
#: environment variable naming the notebook (fallback of :func:`set_notebook`)
NOTEBOOK_ENV = "ATTNSVM_NOTEBOOK"

_notebook: str | None = None


class ClaimError(AssertionError):
    """A claim of a chapter is false on the numbers its notebook computed (strict mode)."""


class ClaimWarning(UserWarning):
    """A claim of a chapter is false (non-strict mode: execution goes on)."""


warnings.simplefilter("always", ClaimWarning)


def set_notebook(name: str) -> None:
    """Name the notebook that the following claims belong to (e.g. ``"ch09_rates"``)."""
    global _notebook
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty string, got {name!r}")
    _notebook = name


def strict() -> bool:
    """Whether false claims raise (``ATTNSVM_STRICT_CLAIMS`` set to anything but ``""``/``0``)."""
    return os.environ.get(STRICT_ENV, "").strip() not in ("", "0", "false", "False")


class Word:
    """A word glued as plain text (``glue:text`` shows it without the quotes of a ``str``)."""

    def __init__(self, text: str):
        self.text = str(text)

    def __repr__(self) -> str:
        return self.text

    __str__ = __repr__

    def __eq__(self, other) -> bool:
        return str(other) == self.text

    __hash__ = None


def _glue(key, value):
    try:
        from myst_nb import glue  # deferred: myst_nb is optional (notebooks only)
    except ImportError:  # pragma: no cover - myst-nb is a requirement of the book
        return
    glue(key, value, display=False)


def claim(name: str, holds, detail: str = "", *, notebook: str | None = None) -> bool:
    """Record, glue and check one claim of a chapter.

    Parameters
    ----------
    name : str
        Identifier of the claim (letters, digits, ``_``); glued as ``claim_<name>`` (the word
        ``"holds"`` or ``"fails"``) and ``claim_<name>_detail`` (``detail``).
    holds : bool
        The outcome, computed from the notebook's numbers (a Python or NumPy boolean; anything
        else, e.g. a float that may be NaN, is rejected).
    detail : str
        The numbers behind the outcome, for the prose and for the error message.
    notebook : str, optional
        The notebook's name; default the one given to :func:`set_notebook`, else the
        environment variable ``ATTNSVM_NOTEBOOK``, else ``"<unnamed notebook>"``.

    Returns
    -------
    bool
        ``holds``.

    Raises
    ------
    ClaimError
        ``holds`` is false and ``ATTNSVM_STRICT_CLAIMS`` is set.
    TypeError, ValueError
        Invalid ``name``, ``holds`` or ``detail`` (the message names the argument).
    """
    if not isinstance(name, str) or not name or not name.replace("_", "").isalnum():
        raise ValueError(f"name must be a non-empty identifier (letters, digits, _), got {name!r}")
    if isinstance(holds, np.ndarray) and holds.shape == ():
        holds = holds[()]
    if not isinstance(holds, (bool, np.bool_)):
        raise TypeError(f"holds must be a boolean (bool or numpy.bool_), got "
                        f"{type(holds).__name__} {holds!r}")
    if not isinstance(detail, str):
        raise TypeError(f"detail must be a string, got {type(detail).__name__}")
    holds = bool(holds)
    nb = notebook or _notebook or os.environ.get(NOTEBOOK_ENV) or "<unnamed notebook>"
    _glue(f"claim_{name}", Word("holds" if holds else "fails"))
    _glue(f"claim_{name}_detail", Word(detail))
    if not holds:
        msg = f"claim {name!r} of notebook {nb} does not hold: {detail}"
        if strict():
            raise ClaimError(msg)
        warnings.warn(msg + f" (set {STRICT_ENV}=1 to make this an error)", ClaimWarning,
                      stacklevel=2)
    return holds


def check(claims: dict, *, notebook: str | None = None) -> dict:
    """Record, glue and check every claim of a result object's ``.claims()``.

    Parameters
    ----------
    claims : dict
        ``name -> (holds, detail)``, as returned by a driver's result ``.claims()``.
    notebook : str, optional
        As in :func:`claim`.

    Returns
    -------
    dict
        ``name -> bool``, the outcomes. Every claim is glued before the first false one raises
        (strict mode), so the error names the first false claim in the dict's order.

    Raises
    ------
    ClaimError
        A claim is false and ``ATTNSVM_STRICT_CLAIMS`` is set.
    TypeError
        ``claims`` is not a dict of ``(holds, detail)`` pairs (the message names the entry).
    """
    if not isinstance(claims, dict):
        raise TypeError(f"claims must be a dict name -> (holds, detail), got {type(claims).__name__}")
    for name, value in claims.items():
        if not (isinstance(value, tuple) and len(value) == 2):
            raise TypeError(f"claims[{name!r}] must be a pair (holds, detail), got {value!r}")
    out, failed = {}, []
    for name, (holds, detail) in claims.items():
        try:
            out[name] = claim(name, holds, detail, notebook=notebook)
        except ClaimError as err:
            out[name] = False
            failed.append(err)
    if failed:
        raise failed[0]
    return out


def published_values(*results) -> dict:
    """The values :func:`publish` glues: ``{**r.config, **r.summary()}`` of every result, in
    order. A key given twice with different values is an error naming it (two results of one
    chapter must not glue different numbers under one name)."""
    out = {}
    for r in results:
        for attr in ("config", "summary", "claims"):
            if not hasattr(r, attr):
                raise TypeError(f"publish needs results with .config, .summary() and .claims(); "
                                f"{type(r).__name__} has no {attr}")
        for key, value in {**r.config, **r.summary()}.items():
            if key in out and not _same(out[key], value):
                raise ValueError(f"publish: {key!r} is {out[key]!r} in one place and {value!r} in "
                                 f"another")
            out[key] = value
    return out


def _same(a, b) -> bool:
    try:
        return bool(np.array_equal(np.asarray(a), np.asarray(b)))
    except (TypeError, ValueError):
        return a == b


# ----------------------------------------------------------------------------- results tables
#: what a value that is not defined (NaN: the set it is taken over is empty) shows
UNDEFINED = "\u2014"


def format_value(value, digits: int = 4) -> str:
    """A value of a result for a reader: floats to ``digits`` significant digits (``-0`` as
    ``0``), NaN and None as an em dash, integers with thousands separators, booleans as
    ``yes``/``no``, short sequences as a bracketed list, longer ones by their size and range."""
    if value is None:
        return UNDEFINED
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, numbers.Integral):
        return f"{int(value):,}"
    if isinstance(value, numbers.Real):
        v = float(value)
        if math.isnan(v):
            return UNDEFINED
        if math.isinf(v):
            return "\u221e" if v > 0 else "\u2212\u221e"
        text = f"{v:.{digits}g}"
        return "0" if float(text) == 0 else text
    if isinstance(value, (str, Word)):
        return str(value)
    if isinstance(value, (list, tuple, np.ndarray)):
        a = np.asarray(value, dtype=object).ravel()
        if a.size <= 8:
            return "[" + ", ".join(format_value(x, digits) for x in a) + "]"
        try:
            f = np.asarray(value, dtype=float)
            return (f"{f.size} values, {format_value(np.nanmin(f), digits)} to "
                    f"{format_value(np.nanmax(f), digits)}")
        except (TypeError, ValueError):
            return f"{a.size} values"
    return str(value)


def _flat(values, prefix=""):
    for key, value in values.items():
        if isinstance(value, dict):
            yield from _flat(value, f"{prefix}{key} / ")
        else:
            yield f"{prefix}{key}", value


class ResultsTable:
    """A notebook's numbers as a table (HTML in a notebook, aligned text elsewhere).

    ``values``: name -> value (nested dicts are flattened as ``outer / inner``), formatted by
    :func:`format_value`; ``claims``: name -> (holds, detail), shown in a second table whose rows
    are anchored ``claim-<name>``; ``title``: a caption."""

    def __init__(self, values: dict | None = None, *, claims: dict | None = None,
                 title: str | None = None, digits: int = 4):
        if values is not None and not isinstance(values, dict):
            raise TypeError(f"values must be a dict name -> value, got {type(values).__name__}")
        self.rows = [(str(k), format_value(v, digits)) for k, v in _flat(values or {})]
        self.claims = [(str(k), bool(h), str(d)) for k, (h, d) in (claims or {}).items()]
        self.title = title

    @property
    def note(self) -> str:
        return (f"{UNDEFINED}: not defined (the set it is taken over is empty)"
                if any(v == UNDEFINED for _, v in self.rows) else "")

    def _repr_html_(self) -> str:
        e = html.escape
        out = []
        if self.rows:
            cap = f"<caption>{e(self.title)}</caption>" if self.title else ""
            body = "".join(f"<tr><td><code>{e(k)}</code></td><td>{e(v)}</td></tr>"
                           for k, v in self.rows)
            out.append(f'<table class="attnsvm-results">{cap}<thead><tr><th>name</th>'
                       f'<th>value</th></tr></thead><tbody>{body}</tbody></table>')
            if self.note:
                out.append(f'<p class="attnsvm-results-note">{e(self.note)}</p>')
        if self.claims:
            n_hold = sum(h for _, h, _ in self.claims)
            body = "".join(f'<tr id="claim-{e(k)}"><td><code>{e(k)}</code></td>'
                           f'<td>{"holds" if h else "<strong>fails</strong>"}</td>'
                           f"<td>{e(d)}</td></tr>" for k, h, d in self.claims)
            out.append(f'<table class="attnsvm-claims"><caption>Checked claims: {n_hold} of '
                       f"{len(self.claims)} hold</caption><thead><tr><th>claim</th>"
                       f"<th>outcome</th><th>the numbers</th></tr></thead><tbody>{body}"
                       f"</tbody></table>")
        return "\n".join(out)

    def __repr__(self) -> str:
        lines = [self.title] if self.title else []
        if self.rows:
            w = max(len(k) for k, _ in self.rows)
            lines += [f"{k:<{w}}  {v}" for k, v in self.rows]
            if self.note:
                lines.append(self.note)
        if self.claims:
            lines.append(f"checked claims: {sum(h for _, h, _ in self.claims)} of "
                         f"{len(self.claims)} hold")
            lines += [f"  {k}: {'holds' if h else 'FAILS'} ({d})" for k, h, d in self.claims]
        return "\n".join(lines)


def results_table(values: dict, *, title: str | None = None, digits: int = 4) -> ResultsTable:
    """Some of a result's numbers, to show in a notebook cell as a formatted table (not a dict)."""
    return ResultsTable(values, title=title, digits=digits)


def _show(obj) -> None:
    """Display ``obj`` under IPython (a notebook); do nothing elsewhere."""
    try:
        from IPython import get_ipython  # deferred: IPython is optional (notebooks only)
        from IPython.display import display  # deferred: IPython is optional (notebooks only)
    except ImportError:  # pragma: no cover - IPython comes with the book's requirements
        return
    if get_ipython() is not None:
        display(obj)


def publish(*results, notebook: str | None = None) -> None:
    """Publish a chapter's results, the last call of its notebook: glue every value of
    :func:`published_values` (``{**result.config, **result.summary()}``) under its key, then
    check all the results' claims (:func:`check`). In a notebook it shows one
    :class:`ResultsTable` of the summaries' numbers and the claims (no dump of a dict); nothing
    is returned.

    Raises
    ------
    ClaimError
        A claim is false and ``ATTNSVM_STRICT_CLAIMS`` is set (after everything is glued).
    TypeError, ValueError
        A result lacks ``config``, ``summary`` or ``claims``; a key has two values.
    """
    if not results:
        raise TypeError("publish needs at least one result")
    values = published_values(*results)
    claims = {}
    for r in results:
        for name, value in r.claims().items():
            if name in claims:
                raise ValueError(f"publish: claim {name!r} comes from two results")
            claims[name] = value
    for key, value in values.items():
        _glue(key, value)
    summary = {}
    for r in results:
        summary.update(r.summary())
    try:
        check(claims, notebook=notebook)
    finally:
        _show(ResultsTable(summary, claims=claims, title="Results"))
