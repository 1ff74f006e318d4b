"""Running a build's stages as jobs: submission backends (:mod:`.submit`), the Airflow glue
(:mod:`.operators`: the deferrable stage-job operator and its trigger) and the build steps a DAG runs on
the cluster's side (:mod:`.buildsteps`: write the build config, verify a stage, assemble the snapshot)."""
