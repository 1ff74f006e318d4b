#!/usr/bin/env bash
# Stop what scripts/services_up.sh started, by pid file only (never by process name).
set -u
STATE="${CORPUS_SERVICES_DIR:-/var/tmp/corpus-services}"
scancel --user=root 2>/dev/null || true
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
