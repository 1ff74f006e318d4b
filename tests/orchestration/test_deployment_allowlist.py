"""A deployment chooses within allow-lists, by exact name: an environment key or an sbatch option that is
not in them is refused, however the deployment is made, naming it; an abbreviation sbatch would expand is
refused like any other name; what the deployments, DAGs and tests use today still passes (issue 30,
item 20)."""

from __future__ import annotations

import json

import pytest

from orchestration.deployment import (
    ALLOWED_JOB_ENV_KEYS,
    ALLOWED_SBATCH_OPTIONS,
    DEFAULT_JOB_ENV_KEYS,
    DEFAULT_SBATCH_OPTIONS,
    Deployment,
    DeploymentError,
    hosts_roots_env,
)

#: keys the deny-list let a deployment allow (issue 30), and the ones it always refused
REFUSED_ENV = [
    "GCONV_PATH",
    "OPENSSL_CONF",
    "OPENSSL_MODULES",
    "UCX_MODULE_DIR",
    "MPIR_CVAR_CH4_NETMOD",
    "MPIR_CVAR_ENABLE_GPU",
    "PERL5OPT",
    "NODE_OPTIONS",
    "LOCPATH",
    "HOSTALIASES",
    "MALLOC_CONF",
    "LD_PRELOAD",
    "PYTHONPATH",
    "BASH_ENV",
    "PATH",
    "CORPUS_PYTHON",
    "CORPUS_HOSTS_ROOTS",
    "SLURM_CONF",
    "OMP_TOOL_LIBRARIES",
    "OMP_NUM_THREADS_X",
    "omp_num_threads",
]
#: abbreviations sbatch expands (--out is --output), options that pick a container or storage, and
#: what the submitter sets itself
REFUSED_SBATCH = [
    "--out",
    "--chd",
    "--wra",
    "--container-image",
    "--container-mounts",
    "--container",
    "--burst-buffer",
    "--output",
    "--error",
    "--chdir",
    "--wrap",
    "--export",
    "--job-name",
    "--ntasks",
    "--partition",
    "--time",
    "--mem-per",
    "--acc",
    "-D",
    "--clusters",
]


@pytest.mark.parametrize("key", REFUSED_ENV)
def test_an_environment_key_outside_the_allow_list_is_refused(key):
    with pytest.raises(DeploymentError, match=f"job_env_keys may not allow '{key}' \\(only "):
        Deployment.from_mapping({"job_env_keys": ["OMP_NUM_THREADS", key]})
    with pytest.raises(DeploymentError, match=f"may not allow '{key}'"):
        Deployment(job_env_keys=(key,))


@pytest.mark.parametrize("option", REFUSED_SBATCH)
def test_an_sbatch_option_outside_the_allow_list_is_refused_abbreviations_included(option):
    with pytest.raises(DeploymentError, match=f"sbatch_options may not allow '{option}' \\(only these"):
        Deployment.from_mapping({"sbatch_options": [option]})
    with pytest.raises(DeploymentError, match=f"may not allow '{option}'"):
        Deployment(sbatch_options=("--qos", option))


def test_what_is_used_today_still_passes():
    """The defaults, the whole allow-lists, and test_standalone's deployment (the defaults and --begin)."""
    Deployment()
    Deployment.from_env({})
    Deployment.from_mapping(
        {"job_env_keys": sorted(ALLOWED_JOB_ENV_KEYS), "sbatch_options": sorted(ALLOWED_SBATCH_OPTIONS)}
    )
    raw = json.dumps({"sbatch_options": [*DEFAULT_SBATCH_OPTIONS, "--begin"]})
    assert "--begin" in Deployment.from_env({"CORPUS_DEPLOYMENT": raw}).sbatch_options
    assert set(DEFAULT_JOB_ENV_KEYS) <= ALLOWED_JOB_ENV_KEYS
    assert set(DEFAULT_SBATCH_OPTIONS) <= ALLOWED_SBATCH_OPTIONS


def test_no_allowed_option_is_a_prefix_sbatch_could_expand_to_a_refused_one():
    """Each allowed name is an option in full: sbatch takes an exact match over any longer option."""
    for option in ALLOWED_SBATCH_OPTIONS:
        assert option.startswith("--") and option == option.lower()
        for refused in ("--output", "--chdir", "--wrap", "--container", "--burst-buffer", "--export"):
            assert not refused.startswith(option) and not option.startswith(refused)


def test_the_opt_out_roots_are_absolute_and_reach_the_version_job_whatever_the_cluster_says():
    deployment = Deployment.from_mapping({"hosts_roots": ["/lustre/optouts", "/srv/lists"]})
    assert hosts_roots_env(deployment) == {"CORPUS_HOSTS_ROOTS": "/lustre/optouts:/srv/lists"}
    assert hosts_roots_env(Deployment()) == {"CORPUS_HOSTS_ROOTS": ""}
    for bad in ("lists", "/a:/b", "/x\n"):
        with pytest.raises(DeploymentError, match="hosts_roots must be absolute paths"):
            Deployment.from_mapping({"hosts_roots": [bad]})
    with pytest.raises(DeploymentError, match="hosts_roots must be a list, got '/'"):
        Deployment.from_mapping({"hosts_roots": "/"})
