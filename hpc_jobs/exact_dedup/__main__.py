"""``python -m hpc_jobs.exact_dedup``: the exact_dedup stage under the stage runner."""

import sys

from hpc_jobs.exact_dedup.stage import STAGE
from runtime.runner import main

sys.exit(main(STAGE))
