"""``python -m hpc_jobs.decontaminate``: the decontaminate stage under the stage runner."""

import sys

from hpc_jobs.decontaminate.stage import STAGE
from runtime.runner import main

sys.exit(main(STAGE))
