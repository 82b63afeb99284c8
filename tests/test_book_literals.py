"""Every code literal ``attnsvm.x.y`` in the book's chapters names something that exists."""
import importlib
import re
from pathlib import Path

BOOK = Path(__file__).resolve().parents[1] / "book"
LITERAL = re.compile(r"`(attnsvm(?:_book)?(?:\.[A-Za-z_][A-Za-z0-9_]*)+)`")


def resolve(dotted):
    """Import the longest module prefix of ``dotted`` and get the rest as attributes; raises
    ImportError/AttributeError naming what is missing."""
    parts = dotted.split(".")
    for k in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:k]))
        except ModuleNotFoundError as exc:
            if exc.name is None or not dotted.startswith(exc.name):
                raise                      # a missing dependency, not a missing module
            continue
        for name in parts[k:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(dotted)


def literals(root=BOOK):
    out = []
    for md in sorted(root.glob("*.md")):
        for lineno, line in enumerate(md.read_text().splitlines(), 1):
            out += [(md.name, lineno, m) for m in LITERAL.findall(line)]
    return out


def test_the_book_has_code_literals():
    assert len(literals()) > 20


def test_every_code_literal_resolves():
    bad = []
    for name, lineno, lit in literals():
        try:
            resolve(lit)
        except (ImportError, AttributeError) as exc:
            bad.append(f"{name}:{lineno}: `{lit}` ({type(exc).__name__}: {exc})")
    assert not bad, "code literals that do not resolve:\n" + "\n".join(bad)


def test_a_wrong_literal_is_caught(tmp_path):
    (tmp_path / "x.md").write_text("see `attnsvm.svm.att_svm` and `attnsvm.svm.no_such_thing`\n"
                                   "and `attnsvm.no_such_module.f`\n")
    found = literals(tmp_path)
    assert [lit for _, _, lit in found] == ["attnsvm.svm.att_svm", "attnsvm.svm.no_such_thing",
                                            "attnsvm.no_such_module.f"]
    resolve(found[0][2])
    for _, _, lit in found[1:]:
        try:
            resolve(lit)
        except (ImportError, AttributeError):
            continue
        raise AssertionError(f"{lit} resolved")
