"""The system Chromium, shared by the browser check (``tests/browser_check.py``) and the PDF
printer (``tools/pdf.py``): where it is, the flags it runs with, which requests stay local.

Debian's ``chromium`` package (``apt-get install chromium``), driven through ``playwright`` with
no browser download; every request that is neither ``file://`` nor to ``127.0.0.1``/``localhost``
is aborted, so a page that needs the network fails.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from urllib.parse import urlparse

__all__ = ["CHROMIUM", "INSTALL_HINT", "CHROMIUM_ARGS", "chromium_path", "is_local"]

#: the system browser (Debian: apt-get install chromium)
CHROMIUM = "/usr/bin/chromium"
INSTALL_HINT = "install Chromium: apt-get update && apt-get install -y chromium"
#: no sandbox (containers), no GPU, nothing that talks to the network on its own
CHROMIUM_ARGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run",
                 "--disable-default-apps", "--disable-extensions")


def chromium_path() -> str | None:
    """Path of the system Chromium, or ``None`` (``$ATTNSVM_CHROMIUM`` overrides)."""
    cand = os.environ.get("ATTNSVM_CHROMIUM") or CHROMIUM
    if Path(cand).is_file():
        return cand
    return shutil.which("chromium") or shutil.which("chromium-browser")


def is_local(url: str) -> bool:
    """Whether a request for ``url`` stays on this machine."""
    u = urlparse(url)
    return u.scheme in ("file", "data", "blob", "about") or u.hostname in ("127.0.0.1", "localhost")
