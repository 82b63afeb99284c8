"""The book's build: papermill execution under a profile, cache, report, rendering.

The command line is ``python -m attnsvm.book`` (:func:`main`); the implementation lives in
:mod:`attnsvm.book.build`. Public names are re-exported here.
"""
from .build import (REPORT_MARKER, BuildError, NotebookFailed, NotebookResult, build, cache_key,
                    execute_notebooks, find_root, library_hash, load_profiles, main,
                    notebook_parameters, resolve_device, resolve_profile, stage, strip_outputs,
                    toc_files, toc_notebooks)
from .claims import ClaimError, ClaimWarning, claim, set_notebook

__all__ = ["REPORT_MARKER", "BuildError", "NotebookFailed", "NotebookResult", "build", "cache_key",
           "execute_notebooks", "find_root", "library_hash", "load_profiles", "main",
           "notebook_parameters", "resolve_device", "resolve_profile", "stage", "strip_outputs",
           "toc_files", "toc_notebooks", "ClaimError", "ClaimWarning", "claim", "set_notebook"]
