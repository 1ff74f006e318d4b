"""``python -m hpc_jobs.export``."""

import sys

from hpc_jobs.export.job import main

sys.exit(main())
