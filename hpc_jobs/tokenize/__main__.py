"""``python -m hpc_jobs.tokenize``: the tokenize stage under the stage runner."""

import sys

from hpc_jobs.tokenize.stage import STAGE
from runtime.runner import main

sys.exit(main(STAGE))
