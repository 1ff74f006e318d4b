"""The top layer: the ``corpus`` command line (``cli.main``, one module per subcommand under
``cli.commands``) and what the Airflow DAGs call (``orchestration``). It may import every layer
below it: the library (``corpus``), the runtime, the stages (by name, as ``python -m hpc_jobs.<stage>``)
and the loader."""
