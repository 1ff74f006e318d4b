"""The stage runtime: the runner every stage runs under and the checkpointed global phases.

Layering: ``corpus`` (the library) <- ``mpi_kernels`` and ``runtime`` <- ``hpc_jobs`` (the stages) <- the CLI
and ``dags``. Nothing here imports a stage.
"""
