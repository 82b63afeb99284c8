"""A tiny book for the build's tests: one notebook that counts its executions, lib/ and pinned
files. The fixture ``minibook`` (tests/conftest.py) makes one; the helpers add notebooks."""
from __future__ import annotations

from pathlib import Path

import nbformat
import yaml

import attnsvm_book as book

REPO = Path(__file__).resolve().parents[1]


def _notebook(path: Path, params_src: str, body: str) -> None:
    nb = nbformat.v4.new_notebook()
    p = nbformat.v4.new_code_cell(params_src)
    p.metadata["tags"] = ["parameters"]
    nb.cells = [p, nbformat.v4.new_code_cell(body)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(path))


def make_minibook(tmp_path):
    """A tiny book: one good notebook that counts its executions, lib/ and pinned files."""
    root = tmp_path / "mini"
    (root / "book").mkdir(parents=True)
    (root / "lib" / "attnsvm").mkdir(parents=True)
    (root / "lib" / "attnsvm" / "mod.py").write_text("X = 1\n")
    (root / "requirements.txt").write_text("numpy==1\n")
    (root / "constraints.txt").write_text("numpy==1\n")
    (root / "_config.yml").write_text("title: mini\nexecute:\n  execute_notebooks: 'off'\n")
    (root / "book" / "intro.md").write_text("# Mini\n")
    (root / "book" / "execution_report.md").write_text(
        "# Report\n\n" + book.REPORT_MARKER + "\n")
    toc = {"format": "jb-book", "root": "book/intro",
           "chapters": [{"file": "notebooks/good"}, {"file": "book/execution_report"}]}
    (root / "_toc.yml").write_text(yaml.safe_dump(toc))
    counter = root / "runs.txt"
    _notebook(root / "notebooks" / "good.ipynb", "size = 3\ndevice = 'cpu'",
              f"with open({str(counter)!r}, 'a') as fh:\n    fh.write(str(size) + '\\n')")
    profiles = {"quick": {"notebooks": {"notebooks/good.ipynb": {}}},
                "paper": {"notebooks": {"notebooks/good.ipynb": {"size": 30}}}}
    (root / "profiles.yml").write_text(yaml.safe_dump(profiles))
    return root


def _runs(root):
    p = root / "runs.txt"
    return p.read_text().split() if p.exists() else []


def _add_notebook(root, name, params_src, body, profiles_entry=None):
    _notebook(root / "notebooks" / f"{name}.ipynb", params_src, body)
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    toc["chapters"].insert(1, {"file": f"notebooks/{name}"})
    (root / "_toc.yml").write_text(yaml.safe_dump(toc))
    prof = yaml.safe_load((root / "profiles.yml").read_text())
    for p in prof.values():
        p["notebooks"][f"notebooks/{name}.ipynb"] = dict(profiles_entry or {})
    (root / "profiles.yml").write_text(yaml.safe_dump(prof))
