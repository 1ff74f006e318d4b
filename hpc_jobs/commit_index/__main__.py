"""``python -m hpc_jobs.commit_index``."""

import sys

from hpc_jobs.commit_index.job import main

sys.exit(main())
