"""The Params every DAG that submits jobs shares (backend, partition, limits, sbatch options, job
environment), and their check against the deployment when a run starts.

Why one place: ``build_snapshot``, ``build_version`` and ``refresh_optouts`` submit their jobs the same
way (orchestration/operators.py); a Param that is data in one must be data, checked the same way,
in all of them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from airflow.sdk import Param

from orchestration.deployment import TIME_LIMIT, Deployment
from orchestration.submit import BACKENDS

#: The JSON Schema dialect of every DAG's Params. Airflow checks a Param's schema against its dialect's
#: metaschema each time it resolves the Param, dozens of times per task while it serializes a DAG: for
#: the build DAGs' ``config`` Param that check costs ~90 ms under 2020-12's metaschema (Airflow's
#: default) and ~11 ms under draft-07's, which made a parse of the DAG files ~16 s of CPU instead of ~2 s
#: (each ``airflow dags test`` parses them twice; the DAG processor every 30 s). The keywords the Params
#: use mean the same in both dialects.
PARAM_DIALECT = "http://json-schema.org/draft-07/schema#"


def param(default: Any, **schema: Any) -> Param:
    """A Param with ``default`` and ``schema``, its schema in :data:`PARAM_DIALECT`."""
    return Param(default, **{"$schema": PARAM_DIALECT, **schema})


def job_params(
    deployment: Deployment, param: Callable[..., Param], backend: str, time_limit: str = "04:00:00"
) -> dict[str, Param]:
    """The job Params; ``param(name, default, **schema)`` makes each (a DAG's defaults may override)."""
    return {
        "backend": param(
            "backend",
            backend,
            type="string",
            enum=list(BACKENDS),
            title="Backend",
            description="ssh: sbatch on a login node; local: sbatch on this host; mpiexec: no SLURM",
        ),
        "partition": param(
            "partition",
            None,
            **deployment.partition_schema(),
            title="SLURM partition",
            description="empty: the default partition; else one the deployment allows",
        ),
        "time_limit": param(
            "time_limit",
            time_limit,
            type="string",
            pattern=TIME_LIMIT,
            title="Time limit per job",
            description="MM, HH:MM:SS or D-HH:MM:SS",
        ),
        "max_requeues": param(
            "max_requeues",
            3,
            type="integer",
            minimum=0,
            maximum=20,
            title="Requeues per job",
            description="how often a pre-empted job may requeue itself (SIGUSR1 before its time limit)",
        ),
        "queue_wait": param(
            "queue_wait",
            "1-00:00:00",
            type="string",
            pattern=TIME_LIMIT,
            title="Queue-wait budget",
            description="time a job may spend waiting in the queue, in total; a job not done "
            "after time limit x (requeues + 1) + this is cancelled and fails its task",
        ),
        "sbatch_args": param(
            "sbatch_args",
            [],
            **deployment.sbatch_args_schema(),
            title="Extra sbatch options",
            description="--option or --option=value, of those the deployment allows: "
            + " ".join(deployment.sbatch_options),
        ),
        "job_env": param(
            "job_env",
            {},
            **deployment.job_env_schema(),
            title="Extra environment for the jobs",
            description="keys the deployment allows: " + " ".join(deployment.job_env_keys),
        ),
        "poll_interval": param(
            "poll_interval", 30, type="integer", minimum=1, title="Seconds between job-state polls"
        ),
    }


def resolve_job_params(p: dict[str, Any], deployment: Deployment) -> dict[str, Any]:
    """The job settings of a run within the deployment's bounds (the Params were schema-checked at
    trigger; the deployment may have changed since, so check again), as the operators take them."""
    if p["partition"] and p["partition"] not in deployment.partitions:
        raise ValueError(
            f"Param 'partition': {p['partition']!r} is not one the deployment allows "
            f"({', '.join(deployment.partitions) or 'only the default partition'})"
        )
    if refused := sorted(set(p["job_env"]) - set(deployment.job_env_keys)):
        raise ValueError(
            f"Param 'job_env': keys {refused} are not allowed ({', '.join(deployment.job_env_keys)})"
        )
    if refused := deployment.refused_sbatch_args(p["sbatch_args"]):
        raise ValueError(
            f"Param 'sbatch_args': {refused} are not allowed ({', '.join(deployment.sbatch_options)})"
        )
    return {
        "backend": p["backend"],
        "conn_id": deployment.ssh_conn_id if p["backend"] == "ssh" else "",
        "root": deployment.cluster_root,
        "python": deployment.interpreter,
        "partition": p["partition"] or "",
        "time_limit": p["time_limit"],
        "max_requeues": p["max_requeues"],
        "queue_wait": p["queue_wait"],
        "sbatch_args": p["sbatch_args"],
        "env": {k: str(v) for k, v in p["job_env"].items()},
        "poll_interval": p["poll_interval"],
    }
