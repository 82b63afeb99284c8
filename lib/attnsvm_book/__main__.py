"""``python -m attnsvm_book``: the book's command line (see :mod:`attnsvm_book.cli`)."""
import sys

from .cli import main

sys.exit(main())
