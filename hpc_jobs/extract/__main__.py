"""``python -m hpc_jobs.extract``: the extract stage under the stage runner."""

import sys

from hpc_jobs.extract.stage import STAGE
from runtime.runner import main

sys.exit(main(STAGE))
