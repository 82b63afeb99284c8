"""Compare the glued values of two executed copies of a notebook (or two executed-notebook trees).

The habit of ``notes/*_glue_changes.md``: a change that should not move the book's numbers is
checked by executing the notebooks before and after it and comparing every glued value.

* numbers (and booleans) are equal when ``|a - b| <= rtol * max(|a|, |b|)`` (default
  ``rtol = 1e-10``) or both are NaN; strings must match exactly;
* every glue key counts, figures and claim words included: a key that disappears is reported,
  and so is a claim word (``claim_<name>``: ``holds`` / ``fails``) that changes.

Usage::

    python tools/glue_diff.py OLD.ipynb NEW.ipynb [--rtol 1e-10]
    python tools/glue_diff.py OLD_DIR NEW_DIR      # every *.ipynb of OLD_DIR against NEW_DIR

Exit status 0 when nothing changed, 1 otherwise (so it can gate a refactoring).
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from attnsvm_book import glue_records, glued_scalars


def glue_texts(path) -> dict:
    """``{name: text/plain}`` of every glue record of an executed notebook (figures included)."""
    out = {}
    for name, data in glue_records(path).items():
        text = data.get("text/plain", "")
        out[name] = "".join(text) if isinstance(text, list) else text
    return out


def _same(a, b, rtol) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        if isinstance(b, bool):
            return False
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b or abs(a - b) <= rtol * max(abs(a), abs(b))
    return a == b


def diff(old, new, rtol: float = 1e-10) -> dict:
    """The differences between two executed notebooks: ``changed`` (name, old, new),
    ``missing`` (names), ``new`` (names), ``claims`` (name, old word, new word)."""
    if rtol < 0:
        raise ValueError(f"rtol must be >= 0, got {rtol}")
    a, b = glued_scalars(old), glued_scalars(new)
    ta, tb = glue_texts(old), glue_texts(new)
    return {
        "changed": [(k, a[k], b[k]) for k in a if k in b and not _same(a[k], b[k], rtol)],
        "missing": [k for k in ta if k not in tb],
        "new": [k for k in tb if k not in ta],
        "claims": [(k, ta[k], tb[k]) for k in ta if k in tb and k.startswith("claim_")
                   and not k.endswith("_detail") and ta[k] != tb[k]],
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--rtol", type=float, default=1e-10)
    args = ap.parse_args(argv)
    old, new = Path(args.old), Path(args.new)
    for p in (old, new):
        if not p.exists():
            ap.error(f"no such file or directory: {p}")
    if old.is_dir():
        pairs = [(p, new / p.relative_to(old)) for p in sorted(old.rglob("*.ipynb"))]
    else:
        pairs = [(old, new)]
    dirty = False
    for a, b in pairs:
        if not b.is_file():
            print(f"== {a.name}: no executed copy at {b}")
            dirty = True
            continue
        d = diff(a, b, args.rtol)
        n = sum(len(v) for k, v in d.items() if k != "new")
        dirty |= n > 0
        print(f"== {a.stem}: {len(d['changed'])} changed, {len(d['missing'])} missing, "
              f"{len(d['claims'])} claim words changed, {len(d['new'])} new")
        for k, x, y in d["changed"]:
            print(f"  changed {k}: {x!r} -> {y!r}")
        for k in d["missing"]:
            print(f"  missing {k}")
        for k, x, y in d["claims"]:
            print(f"  claim {k}: {x} -> {y}")
        for k in d["new"]:
            print(f"  new {k}")
    return 1 if dirty else 0


if __name__ == "__main__":
    sys.exit(main())
