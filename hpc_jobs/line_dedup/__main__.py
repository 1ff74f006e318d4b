"""``python -m hpc_jobs.line_dedup``: the line_dedup stage under the stage runner."""

import sys

from hpc_jobs.line_dedup.stage import STAGE
from runtime.runner import main

sys.exit(main(STAGE))
