"""The reader's side of the build: repository links, the theme's pinned pair, numbering.

Fast checks of the build's configuration; the rendered pages themselves are checked in a real
browser by ``test_browser.py`` (slow tier).
"""
from __future__ import annotations

import re
import types
from pathlib import Path

import pytest
import yaml

from attnsvm_book import assets

REPO = Path(__file__).resolve().parents[1]


class _App:
    def __init__(self):
        self.roles = {}

    def add_role(self, name, fn, override=False):
        self.roles[name] = fn


def _config(url):
    return types.SimpleNamespace(extlinks={}, html_theme_options={
        "repository_url": url, "repository_branch": "main", "use_repository_button": False,
        "use_issues_button": False})


def test_without_a_repository_url_nothing_links_to_a_repository():
    app, config = _App(), _config("")
    assets._on_config_inited(app, config)
    assert "repo" not in config.extlinks
    assert not any(config.html_theme_options[k] for k in assets.REPOSITORY_BUTTONS
                   if k in config.html_theme_options)
    (node,), msgs = app.roles["repo"]("repo", ":repo:`tests/test_svm.py`", "tests/test_svm.py",
                                      1, None)
    assert node.astext() == "tests/test_svm.py" and node.tagname == "literal" and not msgs


def test_a_repository_url_turns_links_and_buttons_on():
    app, config = _App(), _config("https://github.com/you/attnsvm/")
    assets._on_config_inited(app, config)
    base, caption = config.extlinks["repo"]
    assert base % "tests/x.py" == "https://github.com/you/attnsvm/blob/main/tests/x.py"
    assert config.html_theme_options["use_repository_button"]
    assert config.html_theme_options["use_issues_button"] and not app.roles


def test_a_placeholder_repository_url_stops_the_build():
    with pytest.raises(RuntimeError, match="placeholder"):
        assets._on_config_inited(_App(), _config("https://github.com/OWNER/attnsvm"))


def test_the_book_names_no_placeholder_repository():
    cfg = yaml.safe_load((REPO / "_config.yml").read_text())
    assert "OWNER" not in (cfg["repository"]["url"] or "")
    # Jupyter Book refuses the buttons without a URL: they are off, the build turns them on
    assert not cfg["html"]["use_repository_button"] and not cfg["html"]["use_issues_button"]


def _pins(name):
    pins = {}
    for line in (REPO / name).read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.-]+)==(\S+)", line)
        if m:
            pins[m.group(1).lower().replace("_", "-")] = m.group(2)
    return pins
