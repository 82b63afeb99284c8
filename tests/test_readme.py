"""The README's example runs as written (doctest)."""
from __future__ import annotations

import doctest
import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


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
