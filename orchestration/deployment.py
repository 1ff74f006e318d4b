"""Deployment configuration, and the JSON schemas that keep a run's Params data.

Whoever deploys the DAGs decides what runs on the cluster: the repository there, its interpreter, the
SSH connection, which partitions, environment keys and sbatch options a run may ask for
(``CORPUS_DEPLOYMENT``, a JSON object; every key optional). Whoever triggers a run only chooses data
within those bounds. Some keys and options are never allowed, whatever the deployment says
(:data:`FORBIDDEN_ENV`, :data:`FORBIDDEN_SBATCH_OPTIONS`): they choose code or override what the
submitter sets itself. The keys and their defaults: docs/orchestration.md ("Deployment configuration").
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from orchestration.submit import PROJECT_ROOT

ENV_VAR = "CORPUS_DEPLOYMENT"

DEFAULT_JOB_ENV_KEYS = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "TOKENIZERS_PARALLELISM",
    "MALLOC_ARENA_MAX",
)
DEFAULT_SBATCH_OPTIONS = (
    "--account",
    "--qos",
    "--constraint",
    "--exclusive",
    "--oversubscribe",
    "--mem",
    "--mem-per-cpu",
    "--cpus-per-task",
    "--nodes",
    "--exclude",
    "--nodelist",
    "--reservation",
    "--gres",
    "--nice",
)

#: environment keys that load code or reconfigure the job's shell, MPI launcher or the project itself
FORBIDDEN_ENV = re.compile(
    r"LD_\w*|PYTHON\w*|BASH_ENV|ENV|BASH_FUNC_\S*|BASHOPTS|SHELLOPTS|PS4|IFS|PATH|"
    r"GLIBC_TUNABLES|CORPUS_\w*|SLURM_\w*|SBATCH_\w*|SRUN_\w*|HYDRA_\w*|MPIEXEC_\w*|"
    r"OMPI_\w*|PMIX?_\w*|I_MPI_\w*|FI_PROVIDER_PATH"
)
#: sbatch options the submitter sets itself, or that change what or where the job runs
FORBIDDEN_SBATCH_OPTIONS = frozenset(
    {
        "--output",
        "--error",
        "--input",
        "--chdir",
        "--wrap",
        "--export",
        "--export-file",
        "--job-name",
        "--comment",
        "--parsable",
        "--ntasks",
        "--partition",
        "--time",
        "--open-mode",
        "--uid",
        "--gid",
        "--get-user-env",
        "--propagate",
        "--requeue",
        "--no-requeue",
        "--signal",
        "--wait",
        "--array",
        "--container",
        "--wckey",
    }
)

#: an absolute path: starts with "/" (so never with "-"), one line, no NUL. ``$(?!\n)``: Python's ``$`` (what
#: jsonschema uses) also matches before a final newline, which would let "/x\n" through
ABSOLUTE_PATH = r"^/[^\n\r\x00]*$(?!\n)"
#: a SLURM time limit: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS
TIME_LIMIT = r"^([0-9]+|[0-9]+:[0-9]{2}|[0-9]+:[0-9]{2}:[0-9]{2}|[0-9]+-[0-9]{1,2}(:[0-9]{2}){0,2})$"
NAME = r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$"


class DeploymentError(ValueError):
    """The deployment configuration itself is wrong (not a run's Params)."""


@dataclass(frozen=True)
class Deployment:
    cluster_root: str = str(PROJECT_ROOT)
    python: str = ""
    ssh_conn_id: str = "slurm_login"
    partitions: tuple[str, ...] = ()
    job_env_keys: tuple[str, ...] = DEFAULT_JOB_ENV_KEYS
    sbatch_options: tuple[str, ...] = DEFAULT_SBATCH_OPTIONS

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any]) -> Deployment:
        known = set(cls.__dataclass_fields__)
        if unknown := sorted(set(raw) - known):
            raise DeploymentError(f"{ENV_VAR}: unknown keys {unknown} (known: {sorted(known)})")
        d = cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in raw.items()})
        for key in ("cluster_root", "python"):
            value = getattr(d, key)
            if (value or key == "cluster_root") and not re.fullmatch(ABSOLUTE_PATH, value):
                raise DeploymentError(f"{ENV_VAR}: {key} must be an absolute path, got {value!r}")
        for p in d.partitions:
            if not re.fullmatch(NAME, p):
                raise DeploymentError(f"{ENV_VAR}: bad partition name {p!r}")
        for k in d.job_env_keys:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k) or FORBIDDEN_ENV.fullmatch(k):
                raise DeploymentError(f"{ENV_VAR}: job_env_keys may not allow {k!r}")
        for o in d.sbatch_options:
            if not re.fullmatch(r"--[a-z][a-z-]*", o) or o in FORBIDDEN_SBATCH_OPTIONS:
                raise DeploymentError(f"{ENV_VAR}: sbatch_options may not allow {o!r}")
        return d

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Deployment:
        text = (os.environ if env is None else env).get(ENV_VAR) or "{}"
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as e:
            raise DeploymentError(f"{ENV_VAR} is not JSON: {e}") from e
        if not isinstance(raw, dict):
            raise DeploymentError(f"{ENV_VAR} must be a JSON object")
        return cls.from_mapping(raw)

    @property
    def interpreter(self) -> str:
        return self.python or f"{self.cluster_root}/.venv/bin/python"

    # -- JSON schemas of the per-run Params that these bounds shape --------------------------------
    def partition_schema(self) -> dict[str, Any]:
        """null (the cluster's default partition) or one the deployment allows."""
        return {"type": ["null", "string"], "enum": [None, *self.partitions]}

    def job_env_schema(self) -> dict[str, Any]:
        return {
            "type": "object",
            "propertyNames": {"enum": list(self.job_env_keys)},
            "additionalProperties": {"type": ["string", "integer"], "pattern": r"^[^\n\r\x00]*$"},
        }

    def sbatch_args_schema(self) -> dict[str, Any]:
        """Each item one allowed long option, ``--opt`` or ``--opt=value`` (never a separate value word,
        never a short option: either could smuggle in another option or the job script)."""
        names = "|".join(re.escape(o[2:]) for o in self.sbatch_options) or "(?!)"
        return {"type": "array", "items": {"type": "string", "pattern": rf"^--({names})(=[^\n\r\x00]*)?$"}}


def path_schema(nullable: bool = False) -> dict[str, Any]:
    """An absolute path; ``nullable``: also null or "" (the Param's own default applies)."""
    if nullable:
        return {"type": ["null", "string"], "pattern": rf"^$(?!\n)|{ABSOLUTE_PATH}"}
    return {"type": "string", "pattern": ABSOLUTE_PATH}


def check_run_conf(conf: Mapping[str, Any], params: Mapping[str, Any]) -> None:
    """Refuse a run conf key that is not one of the DAG's Params. Airflow accepts any extra key (it
    becomes a Param without a schema), so a run triggered with, say, ``python`` would otherwise go
    through and silently do nothing -- or, in an older deployment, choose the interpreter."""
    deployment_keys = set(Deployment.__dataclass_fields__)
    for key in sorted(set(conf) - set(params)):
        if key in deployment_keys:
            raise ValueError(
                f"Param {key!r} is not a per-run Param: it is deployment configuration "
                f"({ENV_VAR}), which a run cannot choose"
            )
        raise ValueError(f"Param {key!r} is unknown (known: {', '.join(sorted(params))})")
