"""``python -m attnsvm.book``: the book's command line (see :mod:`attnsvm.book.cli`)."""
import sys

from .cli import main

sys.exit(main())
