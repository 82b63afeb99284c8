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


#: a cross-document glue role ``{glue:text}`path::key:format` ``; myst-nb splits the target at
#: its LAST colon, so without a format spec ``path::key`` is read as path ``path:`` and key
#: ``key``, and the page fails the build with a "No key" warning.
GLUE_ROLE = re.compile(r"\{glue(?::text)?\}`([^`]*\.ipynb::[^`]*)`")


def glue_roles_without_format(book=BOOK):
    bad = []
    for md in sorted(Path(book).glob("*.md")):
        for lineno, line in enumerate(md.read_text().splitlines(), 1):
            for target in GLUE_ROLE.findall(line):
                key_and_format = target.split("::", 1)[1]
                if ":" not in key_and_format:
                    bad.append(f"{md.name}:{lineno}: {target}")
    return bad


def test_every_cross_document_glue_role_has_a_format_spec():
    """Caught in seconds here rather than by the full build's render."""
    bad = glue_roles_without_format()
    assert not bad, "glue roles without a format spec (add :s, :d, :.3f, ...):\n" + "\n".join(bad)


def test_a_glue_role_without_format_is_caught(tmp_path):
    (tmp_path / "x.md").write_text("ok {glue:text}`../notebooks/a.ipynb::n:d` and "
                                   "bad {glue:text}`../notebooks/a.ipynb::claim_x`\n")
    assert glue_roles_without_format(tmp_path) == ["x.md:1: ../notebooks/a.ipynb::claim_x"]
