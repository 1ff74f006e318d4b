"""``python -m hpc_jobs.version``."""

import sys

from hpc_jobs.version.job import main

sys.exit(main())
