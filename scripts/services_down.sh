#!/usr/bin/env bash
# Stop what scripts/services_up.sh started, by pid file only (never by process name).
#
# First it cancels this project's SLURM jobs -- never every job of the user: the cluster (or the user
# account) may be shared, and another project's jobs are not ours to kill. A project job is one of the
# invoking user's jobs whose name starts with CORPUS_JOB_PREFIX (default "corpus-"): every sbatch/*.sbatch
# script and the DAGs' submitter (orchestration/submit.py) name their jobs so.
#
#   bash scripts/services_down.sh              cancel the project's jobs, then stop the services
#   bash scripts/services_down.sh --jobs-only  cancel the project's jobs, leave the services running
set -u
STATE="${CORPUS_SERVICES_DIR:-/var/tmp/corpus-services}"
PREFIX="${CORPUS_JOB_PREFIX:-corpus-}"
case "${1:-}" in
  "") jobs_only=0 ;;
  --jobs-only) jobs_only=1 ;;
  *) echo "usage: services_down.sh [--jobs-only]" >&2; exit 2 ;;
esac

if command -v squeue >/dev/null 2>&1; then
  # "ID|NAME" per job; a name may hold spaces, so split on '|' and compare the prefix literally
  mapfile -t ours < <(squeue -h -u "$(id -un)" -o '%i|%j' 2>/dev/null \
                      | awk -F'|' -v p="$PREFIX" 'substr($2, 1, length(p)) == p { print $1 }')
  if [ ${#ours[@]} -gt 0 ]; then
    scancel -- "${ours[@]}" && echo "cancelled this project's jobs: ${ours[*]}"
  fi
fi
[ "$jobs_only" = 1 ] && exit 0

PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
if [ -n "$PGBIN" ] && [ -s "$STATE/pgdata/postmaster.pid" ]; then
  runuser -u postgres -- "$PGBIN/pg_ctl" -D "$STATE/pgdata" -m fast -w stop >/dev/null && echo "stopped postgres"
fi
for pf in /run/sshd_corpus.pid /run/slurmd.pid /run/slurmctld.pid /run/munge/munged.pid; do
  [ -s "$pf" ] || continue
  pid=$(cat "$pf")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -0 "$pid" 2>/dev/null && { echo "SIGKILL $pf ($pid)"; kill -9 "$pid"; }
    echo "stopped $pf ($pid)"
  fi
  rm -f "$pf"
done
