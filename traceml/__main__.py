"""`python -m traceml ...` is the same CLI as `traceml ...`."""

import sys

from traceml.cli.main import main

sys.exit(main())
