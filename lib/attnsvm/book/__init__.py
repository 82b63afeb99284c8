"""The book's build: papermill execution under a profile, cache, report, rendering; single-notebook
runs, parameter sweeps and parallel execution on Dask.

The command line is ``python -m attnsvm.book`` (:mod:`attnsvm.book.cli`); the build lives in
:mod:`attnsvm.book.build`, ``-p`` checking in :mod:`attnsvm.book.params`, Dask execution in
:mod:`attnsvm.book.parallel`, ``run`` in :mod:`attnsvm.book.run` and ``sweep`` in
:mod:`attnsvm.book.sweep`. Public names are re-exported here.
"""
from .build import (REPORT_MARKER, BuildError, NotebookFailed, NotebookResult, build, cache_key,
                    execute_notebooks, find_root, library_hash, load_profiles, main,
                    notebook_parameters, resolve_device, resolve_profile, stage, strip_outputs,
                    toc_files, toc_notebooks)
from .params import ParameterError, parameter_grid, split_values, validate_overrides
from .run import run_notebook
from .sweep import glued_scalars, read_table, sweep, write_table
from ..claims import ClaimError, ClaimWarning, claim, set_notebook

__all__ = ["REPORT_MARKER", "BuildError", "NotebookFailed", "NotebookResult", "build", "cache_key",
           "execute_notebooks", "find_root", "library_hash", "load_profiles", "main",
           "notebook_parameters", "resolve_device", "resolve_profile", "stage", "strip_outputs",
           "toc_files", "toc_notebooks", "ParameterError", "parameter_grid", "split_values",
           "validate_overrides", "run_notebook", "glued_scalars", "read_table", "sweep",
           "write_table",
           "ClaimError", "ClaimWarning", "claim", "set_notebook"]
