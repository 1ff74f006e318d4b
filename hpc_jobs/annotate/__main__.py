"""``python -m hpc_jobs.annotate``: the annotate stage under the stage runner."""

import sys

from hpc_jobs.annotate.stage import STAGE
from runtime.runner import main

sys.exit(main(STAGE))
