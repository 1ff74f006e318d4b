"""``python -m cli COMMAND …`` is the ``corpus`` command."""

import sys

from cli.main import main

sys.exit(main())
