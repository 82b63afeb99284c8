"""attnsvm_book: the build of the book *Attention as an SVM*, a sibling of the library.

papermill execution under a profile, a content-checked cache, the execution report, rendering
with Jupyter Book; single-notebook runs, parameter sweeps and parallel execution on Dask. It needs
the ``book`` extra (``pip install .[book]``); the library ``attnsvm`` does not import it.

The command line is ``python -m attnsvm_book`` (:mod:`attnsvm_book.cli`). Modules, bottom up (no
module imports one above it): :mod:`attnsvm_book._core` (errors, configuration, the parameters
cell, cache keys and records, the build-directory lock, one execution, one render),
:mod:`attnsvm_book.params` (``-p`` checking, profiles), :mod:`attnsvm_book.parallel` (Dask),
then :mod:`attnsvm_book.build`, :mod:`attnsvm_book.run` and :mod:`attnsvm_book.sweep`, and the
command line on top. The Sphinx extensions of ``_config.yml`` are :mod:`attnsvm_book.assets`,
:mod:`attnsvm_book.bibstyle` and :mod:`attnsvm_book.apidoc`. Public names are re-exported here.
"""
from ._core import (BuildError, BuildLock, NotebookFailed, cache_key, cache_miss_reason,
                    find_root, library_hash, load_profiles, notebook_parameters, resolve_device,
                    strip_outputs, toc_files, toc_notebooks)
from .build import (REPORT_MARKER, NotebookResult, build, execute_notebooks, stage)
from .cli import main
from .params import (ParameterError, parameter_grid, resolve_profile, split_values,
                     validate_overrides)
from .run import run_notebook
from .sweep import glue_records, glued_scalars, read_table, sweep, write_table

__all__ = ["REPORT_MARKER", "BuildError", "BuildLock", "NotebookFailed", "NotebookResult", "build",
           "cache_key", "cache_miss_reason", "execute_notebooks", "find_root", "library_hash",
           "load_profiles", "main", "notebook_parameters", "resolve_device", "resolve_profile",
           "stage", "strip_outputs", "toc_files", "toc_notebooks", "ParameterError",
           "parameter_grid", "split_values", "validate_overrides", "run_notebook",
           "glue_records", "glued_scalars", "read_table", "sweep", "write_table"]
