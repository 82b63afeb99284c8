"""Input validation shared by every module.

Every public function of :mod:`attnsvm` validates its arguments with these helpers so
that bad input fails early with a :class:`ValueError` that names the argument and says
what was wrong, instead of returning ``None``, NaN or a garbage matrix.
"""
from __future__ import annotations

import functools
import numbers

import numpy as np

__all__ = ["as_float_array", "check_positive", "check_int", "check_choice", "check_bool", "renamed"]


def as_float_array(name, x, *, ndim=None, min_ndim=None, max_ndim=None, shape=None,
                   finite=True, dtype=np.float64):
    """Convert ``x`` to a float array and check its rank, shape and finiteness.

    Parameters
    ----------
    name : str
        The argument's name, used in error messages.
    x : array_like
        The value to check.
    ndim, min_ndim, max_ndim : int, optional
        Required number of dimensions, or bounds on it.
    shape : tuple, optional
        Required shape; ``None`` entries match any length.
    finite : bool
        Reject NaN and inf.
    """
    try:
        a = np.asarray(x, dtype=dtype)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a numeric array, got {type(x).__name__}: {exc}") from None
    if ndim is not None and a.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {a.shape}")
    if min_ndim is not None and a.ndim < min_ndim:
        raise ValueError(f"{name} must have at least {min_ndim} dimensions, got shape {a.shape}")
    if max_ndim is not None and a.ndim > max_ndim:
        raise ValueError(f"{name} must have at most {max_ndim} dimensions, got shape {a.shape}")
    if shape is not None:
        if a.ndim != len(shape) or any(s is not None and s != t for s, t in zip(shape, a.shape)):
            want = "(" + ", ".join("*" if s is None else str(s) for s in shape) + ")"
            raise ValueError(f"{name} must have shape {want}, got {a.shape}")
    if finite and a.size and not np.all(np.isfinite(a)):
        raise ValueError(f"{name} contains NaN or inf")
    return a


def check_positive(name, value, *, allow_zero=False):
    """Return ``value`` as a float after checking that it is a finite positive number."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    value = float(value)
    if not np.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be finite and {bound}, got {value!r}")
    return value


def check_int(name, value, *, minimum=None):
    """Return ``value`` as an int after checking its type and lower bound."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def check_choice(name, value, choices):
    """Return ``value`` after checking it is one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {sorted(choices)!r}, got {value!r}")
    return value


def check_bool(name, value):
    """Return ``value`` if it is a bool (or numpy bool), else raise ValueError naming ``name``."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def renamed(**old):
    """Decorator: a keyword of the old spelling raises a ``TypeError`` that names the new one.

    ``@renamed(rule="optimizer", query="cross (a bool: cross=True for query='cross')")`` makes
    ``f(rule="gd")`` raise ``TypeError: f() takes optimizer=, not rule= (renamed)``; the old
    keyword is never accepted silently.
    """
    def deco(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            for name, new in old.items():
                if name in kwargs:
                    raise TypeError(f"{fn.__name__}() takes {new.split(' ', 1)[0]}=, not {name}= "
                                    f"(renamed{': ' + new.split(' ', 1)[1] if ' ' in new else ''})")
            return fn(*args, **kwargs)
        return wrapper
    return deco
