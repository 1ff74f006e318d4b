"""Deployment configuration, and the JSON schemas that keep a run's Params data.

Whoever deploys the DAGs decides what runs on the cluster: the repository there, its interpreter, the
SSH connection, which partitions, environment keys and sbatch options a run may ask for
(``CORPUS_DEPLOYMENT``, a JSON object; every key optional). Whoever triggers a run only chooses data
within those bounds, and the deployment only chooses within allow-lists (:data:`ALLOWED_JOB_ENV_KEYS`,
:data:`ALLOWED_SBATCH_OPTIONS`), by exact name: a deny-list always missed one more key that loads code,
and sbatch reads a prefix as the option it abbreviates. The keys and their defaults:
docs/orchestration.md ("Deployment configuration").
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from corpus.model.json_schema import Problem, Schema, first_problem, path_text
from corpus.select.hosts import ROOTS_ENV as HOSTS_ROOTS_ENV
from orchestration.submit import PROJECT_ROOT

ENV_VAR = "CORPUS_DEPLOYMENT"

#: the environment keys a deployment may let a run set (``job_env_keys``), by exact name: thread counts
#: and allocator arenas, read as numbers or flags. Everything else is refused, whatever its name: a
#: deny-list let through what loads code or data by path (``GCONV_PATH``, ``OPENSSL_CONF``, ``LOCPATH``,
#: ``UCX_MODULE_DIR``, ``MPIR_CVAR_*``, ``PERL5OPT``, ``NODE_OPTIONS``, ``HOSTALIASES``, ``MALLOC_CONF``)
ALLOWED_JOB_ENV_KEYS = frozenset(
    {
        "OMP_NUM_THREADS",
        "OMP_PROC_BIND",
        "OMP_PLACES",
        "MKL_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "BLIS_NUM_THREADS",
        "NUMEXPR_NUM_THREADS",
        "NUMEXPR_MAX_THREADS",
        "RAYON_NUM_THREADS",
        "TOKENIZERS_PARALLELISM",
        "MALLOC_ARENA_MAX",
    }
)
#: the sbatch options a deployment may let a run add (``sbatch_options``), by full long name: how big,
#: how long to wait and whose allocation, never what runs, where it writes or in which container. sbatch
#: takes any unambiguous prefix of an option (``--out`` is ``--output``), so nothing but these names is
#: accepted: not an abbreviation, not ``--container*``, ``--burst-buffer``, ``--output``, ``--chdir``, ``--wrap``
ALLOWED_SBATCH_OPTIONS = frozenset(
    {
        "--account",
        "--begin",
        "--constraint",
        "--cores-per-socket",
        "--cpus-per-gpu",
        "--cpus-per-task",
        "--exclude",
        "--exclusive",
        "--gpus",
        "--gpus-per-node",
        "--gpus-per-task",
        "--gres",
        "--hint",
        "--mem",
        "--mem-per-cpu",
        "--mem-per-gpu",
        "--nice",
        "--nodelist",
        "--nodes",
        "--ntasks-per-node",
        "--oversubscribe",
        "--qos",
        "--reservation",
        "--sockets-per-node",
        "--threads-per-core",
        "--tmp",
    }
)
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

#: an absolute path: starts with "/" (so never with "-"), one line, no NUL. ``$(?!\n)``: Python's ``$`` (what
#: jsonschema uses) also matches before a final newline, which would let "/x\n" through
ABSOLUTE_PATH = r"^/[^\n\r\x00]*$(?!\n)"
#: a SLURM time limit: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS
TIME_LIMIT = r"^([0-9]+|[0-9]+:[0-9]{2}|[0-9]+:[0-9]{2}:[0-9]{2}|[0-9]+-[0-9]{1,2}(:[0-9]{2}){0,2})$(?!\n)"
#: one line of text, no NUL (a value of the job's environment, of an sbatch option)
ONE_LINE = r"[^\n\r\x00]*$(?!\n)"
NAME = r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$"

AbsolutePath = Annotated[str, Schema(pattern=ABSOLUTE_PATH)]
Names = Annotated[tuple[Annotated[str, Schema(pattern=NAME)], ...], "a list"]
EnvKeys = Annotated[tuple[Annotated[str, Schema(enum=sorted(ALLOWED_JOB_ENV_KEYS))], ...], "a list"]
Options = Annotated[tuple[Annotated[str, Schema(enum=sorted(ALLOWED_SBATCH_OPTIONS))], ...], "a list"]


class DeploymentError(ValueError):
    """The deployment configuration itself is wrong (not a run's Params)."""


@dataclass(frozen=True)
class Deployment:
    """The deployment, and its JSON object as written (``corpus config schema deployment``)."""

    cluster_root: AbsolutePath = str(PROJECT_ROOT)
    #: the interpreter on the cluster; empty: the cluster root's .venv/bin/python
    python: Annotated[str, Schema(pattern=rf"^$(?!\n)|{ABSOLUTE_PATH}")] = ""
    ssh_conn_id: str = "slurm_login"
    partitions: Names = ()
    job_env_keys: EnvKeys = DEFAULT_JOB_ENV_KEYS
    sbatch_options: Options = DEFAULT_SBATCH_OPTIONS
    #: directories an opt-out list file (``exclude_hosts_file``) of a version run may lie under, besides
    #: its selection file's own directory (the version job's ``CORPUS_HOSTS_ROOTS``)
    hosts_roots: Annotated[tuple[AbsolutePath, ...], "a list"] = ()

    def __post_init__(self) -> None:
        """Every deployment is checked, however it was made: a key or option outside the allow-lists,
        a relative path, a bad partition name is a :class:`DeploymentError` naming it."""
        for key in ("cluster_root", "python"):
            value = getattr(self, key)
            if (value or key == "cluster_root") and not re.fullmatch(ABSOLUTE_PATH, value):
                raise DeploymentError(f"{ENV_VAR}: {key} must be an absolute path, got {value!r}")
        for root in self.hosts_roots:
            if not re.fullmatch(ABSOLUTE_PATH, root) or os.pathsep in root:
                raise DeploymentError(f"{ENV_VAR}: hosts_roots must be absolute paths, got {root!r}")
        for p in self.partitions:
            if not re.fullmatch(NAME, p):
                raise DeploymentError(f"{ENV_VAR}: bad partition name {p!r}")
        for k in self.job_env_keys:
            if k not in ALLOWED_JOB_ENV_KEYS:
                raise DeploymentError(
                    f"{ENV_VAR}: job_env_keys may not allow {k!r} (only {', '.join(sorted(ALLOWED_JOB_ENV_KEYS))})"
                )
        for o in self.sbatch_options:
            if o not in ALLOWED_SBATCH_OPTIONS:
                raise DeploymentError(
                    f"{ENV_VAR}: sbatch_options may not allow {o!r} (only these, by full name: "
                    f"{', '.join(sorted(ALLOWED_SBATCH_OPTIONS))})"
                )

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any]) -> Deployment:
        """Unknown keys (naming the nearest known one) and values of the wrong type (a string for a list
        would be read letter by letter) are refused in one line before the allow-lists are looked at."""
        if (problem := first_problem(cls, raw)) is not None:
            raise DeploymentError(_problem_text(problem))
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in raw.items()})

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

    def refused_sbatch_args(self, args: list[str]) -> list[str]:
        """The sbatch options of ``args`` (``--opt`` or ``--opt=value``) this deployment does not allow."""
        return [a for a in args if a.split("=", 1)[0] not in self.sbatch_options]

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
            "additionalProperties": {"type": ["string", "integer"], "pattern": f"^{ONE_LINE}"},
        }

    def sbatch_args_schema(self) -> dict[str, Any]:
        """Each item one allowed long option, ``--opt`` or ``--opt=value`` (never a separate value word,
        never a short option: either could smuggle in another option or the job script)."""
        names = "|".join(re.escape(o[2:]) for o in self.sbatch_options) or "(?!)"
        return {
            "type": "array",
            "items": {"type": "string", "pattern": rf"^--({names})(={ONE_LINE}|$(?!\n))"},
        }


def _problem_text(p: Problem) -> str:
    if p.unknown:
        return f"{ENV_VAR}: unknown keys {list(p.unknown)}{p.hint} (known: {sorted(p.known)})"
    return f"{ENV_VAR}: {path_text(p.path)} must be {p.expected}, got {p.value!r}"


def path_schema(nullable: bool = False) -> dict[str, Any]:
    """An absolute path; ``nullable``: also null or "" (the Param's own default applies)."""
    if nullable:
        return {"type": ["null", "string"], "pattern": rf"^$(?!\n)|{ABSOLUTE_PATH}"}
    return {"type": "string", "pattern": ABSOLUTE_PATH}


def hosts_roots_env(deployment: Deployment) -> dict[str, str]:
    """The version job's environment naming where an opt-out list file may lie (besides its selection
    file's directory): the deployment's ``hosts_roots``, set always, so a DAG run reads what the deployment
    says and not whatever the cluster's login environment holds (corpus/select/hosts.py)."""
    return {HOSTS_ROOTS_ENV: os.pathsep.join(deployment.hosts_roots)}


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
