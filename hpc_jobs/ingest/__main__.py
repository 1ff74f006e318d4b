"""``python -m hpc_jobs.ingest``: the ingest stage under the stage runner."""

import sys

from hpc_jobs.ingest.stage import STAGE
from runtime.runner import main

sys.exit(main(STAGE))
