"""``python -m hpc_jobs.minhash_dedup``: the minhash_dedup stage under the stage runner."""

import sys

from hpc_jobs.minhash_dedup.stage import STAGE
from runtime.runner import main

sys.exit(main(STAGE))
