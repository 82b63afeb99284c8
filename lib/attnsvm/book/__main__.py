"""``python -m attnsvm.book``: the book's command line (see :func:`attnsvm.book.main`)."""
import sys

from .build import main

sys.exit(main())
