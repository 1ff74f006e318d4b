"""``python -m hpc_jobs.write_shards``: the write_shards stage under the stage runner."""

import sys

from hpc_jobs.write_shards.stage import STAGE
from runtime.runner import main

sys.exit(main(STAGE))
