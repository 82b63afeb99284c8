"""Parameters given on the command line (``-p name value``), checked against a notebook.

A notebook's cell tagged ``parameters`` defines its parameters and their defaults
(:func:`attnsvm_book._core.notebook_parameters`). A value given with ``-p`` must name one of
them and have the type of its default: an ``int`` default takes an integer, a ``float`` default
an integer or a float, a ``bool`` default ``True``/``False``, a ``str`` default any text, a list
default a list literal (``[2, 4]``) whose elements have the default's element type; a default
``None`` or a default that is not a literal takes any Python literal (or, failing that, the
text); ``None`` is accepted for every parameter (the notebooks' "not set", e.g.
``n_train = None`` for all the images). Values are checked before anything runs; a bad one is a
:class:`ParameterError` whose message is one line naming the notebook, the parameter and the expected type.

Sweeps give several values at once, separated by commas at the top level (``-p steps 200,400``,
``-p shapes "[[6, 8]],[[3, 4]]"``): :func:`split_values`.
"""
from __future__ import annotations

import itertools
import os
from pathlib import Path

from ._core import _NO_DEFAULT, BuildError, literal, load_profiles, notebook_parameters, toc_notebooks

__all__ = ["ParameterError", "parse_value", "check_value", "split_values", "validate_overrides",
           "parameter_grid", "notebook_defaults", "resolve_profile"]


class ParameterError(BuildError):
    """A ``-p name value`` that the notebook does not define, or a value of the wrong type."""


_literal = literal  # a default that is not a literal: _NO_DEFAULT (any literal is accepted)


def notebook_defaults(path: str | os.PathLike) -> dict:
    """``{name: (source, value)}`` of a notebook's parameters cell (value ``_NO_DEFAULT`` when
    the default is not a literal)."""
    return {k: (src, _literal(src)) for k, src in notebook_parameters(path).items()}


def _type_name(value) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (list, tuple)):
        return "list"
    return type(value).__name__


def parse_value(text: str):
    """The Python value of a command-line text: a literal when it is one, else the text itself."""
    text = text.strip()
    value = _literal(text)
    return text if value is _NO_DEFAULT else value


def check_value(name: str, value, default):
    """``value`` converted to the type of ``default``; ``TypeError`` (a short reason) otherwise.

    ``value`` is a Python value (from YAML or :func:`parse_value`); ``default`` is the literal
    default of the parameters cell, or ``_NO_DEFAULT``.
    """
    if default is _NO_DEFAULT or default is None or value is None:
        return value
    if isinstance(default, bool):
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        if isinstance(value, bool):
            return value
        raise TypeError("expected a bool (True or False)")
    if isinstance(default, int):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise TypeError("expected an int")
    if isinstance(default, float):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise TypeError("expected a number (int or float)")
    if isinstance(default, str):
        if isinstance(value, str):
            return value
        raise TypeError("expected a str")
    if isinstance(default, (list, tuple)):
        if not isinstance(value, (list, tuple)):
            raise TypeError("expected a list, e.g. [1, 2]")
        if default:
            proto = default[0]
            return [check_value(name, v, proto) for v in value]
        return list(value)
    if isinstance(default, dict):
        if not isinstance(value, dict):
            raise TypeError("expected a dict, e.g. {'a': 1}")
        return value
    return value


def _coerce_text(notebook: str, name: str, text: str, defaults: dict):
    if name not in defaults:
        raise ParameterError(f"-p {name} {text}: {notebook} has no parameter {name!r} "
                             f"(its parameters: {', '.join(defaults)})")
    src, default = defaults[name]
    if isinstance(default, str):
        value = parse_value(text)
        return value if isinstance(value, str) else text.strip()
    try:
        return check_value(name, parse_value(text), default)
    except TypeError as exc:
        raise ParameterError(f"-p {name} {text}: {exc} for {notebook}'s parameter {name!r} "
                             f"(default {src}), got {text!r}") from None


def split_values(text: str) -> list[str]:
    """Split ``text`` at the commas that are outside brackets and quotes: ``"1,[2, 3]"`` ->
    ``["1", "[2, 3]"]``."""
    out, depth, quote, cur = [], 0, None, []
    for ch in text:
        if quote:
            cur.append(ch)
            if ch == quote:
                quote = None
            continue
        if ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
            continue
        cur.append(ch)
    out.append("".join(cur).strip())
    return out


def validate_overrides(notebook: str | os.PathLike, pairs, *, root: str | os.PathLike | None = None,
                       sweep: bool = False) -> dict:
    """Check ``-p name value`` pairs against ``notebook``'s parameters cell, before anything runs.

    Parameters
    ----------
    notebook : path
        The notebook (absolute, or relative to ``root`` or the current directory).
    pairs : iterable of (str, str)
        Names and texts as given on the command line.
    root : path, optional
        The book's root, used only to name the notebook in messages.
    sweep : bool
        When true, every text is a comma-separated list of values (:func:`split_values`) and the
        result maps each name to the list of its checked values.

    Returns
    -------
    dict
        ``{name: value}`` (or ``{name: [values]}`` with ``sweep=True``), in the order given.

    Raises
    ------
    ParameterError
        An unknown name, a value of the wrong type, a name given twice or an empty value list;
        the message is one line.
    """
    path = Path(notebook)
    label = str(path)
    if root is not None:
        try:
            label = str(path.resolve().relative_to(Path(root).resolve()))
        except ValueError:
            pass
    defaults = notebook_defaults(path)
    out = {}
    for name, text in pairs:
        if name in out:
            raise ParameterError(f"-p {name} given twice; give the values of a sweep as one "
                                 f"comma-separated list (-p {name} v1,v2)")
        if sweep:
            texts = split_values(text)
            if any(t == "" for t in texts):
                raise ParameterError(f"-p {name} {text}: an empty value in the list")
            out[name] = [_coerce_text(label, name, t, defaults) for t in texts]
        else:
            out[name] = _coerce_text(label, name, text, defaults)
    return out


def parameter_grid(values: dict) -> list[dict]:
    """The product grid of ``{name: [values]}``: one dict per point, the last name fastest."""
    names = list(values)
    return [dict(zip(names, combo)) for combo in itertools.product(*(values[n] for n in names))]


def resolve_profile(root: Path, profile: str, notebooks: list[str] | None = None, *,
                    subset: bool = False) -> dict:
    """The parameters each notebook receives under ``profile``, validated before anything runs.

    Every notebook of the table of contents must appear in the profile (an empty mapping means
    "the notebook's own defaults"), the profile may name no other notebook, and every parameter it
    gives must be defined in that notebook's ``parameters`` cell. With ``subset=True`` (a partial
    table of contents), profile entries for other notebooks are ignored.
    """
    profiles = load_profiles(root)
    if profile not in profiles:
        raise BuildError(f"unknown profile {profile!r}; known profiles: {sorted(profiles)}")
    table = profiles[profile].get("notebooks", {}) or {}
    toc = toc_notebooks(root) if notebooks is None else notebooks
    unknown = sorted(set(table) - set(toc))
    if unknown and not subset:
        raise BuildError(f"profile {profile!r} names notebooks that are not in _toc.yml: {unknown}")
    missing = [nb for nb in toc if nb not in table]
    if missing:
        raise BuildError(f"profile {profile!r} has no entry for notebooks {missing} "
                         "(use an empty mapping {} for the notebook's own defaults)")
    out = {}
    for nb in toc:
        params = dict(table[nb] or {})
        defined = notebook_parameters(Path(root) / nb)
        extra = sorted(set(params) - set(defined))
        if extra:
            raise BuildError(f"profile {profile!r} gives {nb} parameters {extra} that its "
                             f"parameters cell does not define (defined: {sorted(defined)})")
        literal = notebook_defaults(Path(root) / nb)
        for name, value in params.items():
            try:
                check_value(name, value, literal[name][1])
            except TypeError as exc:
                raise ParameterError(f"profile {profile!r} gives {nb} {name}={value!r}: {exc} "
                                     f"(default {literal[name][0]})") from None
        out[nb] = params
    return out
