#!/usr/bin/env bash
# Start the services the orchestration tests and `make cluster-up` need, on this one machine:
#   munge + a single-node SLURM cluster (slurmctld, slurmd; node of $CORPUS_SLURM_CPUS CPUs,
#   jobcomp/filetxt so `sacct -c` reports finished jobs), sshd on 127.0.0.1 with a generated key
#   (for the ssh backend), and PostgreSQL on a private port (Airflow standalone's metadata DB).
#   Also installs chromium (the UI test drives it headless through playwright).
# Idempotent: a service that is already up is left alone. Installs its Debian packages if missing.
# Needs root (as CI and the dev machines are). Stop everything with scripts/services_down.sh.
set -euo pipefail

STATE="${CORPUS_SERVICES_DIR:-/var/tmp/corpus-services}"   # ssh key, postgres data, logs
NCPUS="${CORPUS_SLURM_CPUS:-4}"
PG_PORT="${CORPUS_PG_PORT:-55432}"
export DEBIAN_FRONTEND=noninteractive
say() { echo "[services] $*"; }
t0=$(date +%s)

[ "$(id -u)" = 0 ] || { echo "services_up.sh must run as root (it starts slurmctld, munged, sshd)" >&2; exit 1; }

# ---------- packages ----------
need=()
for pair in munge:/usr/sbin/munged slurmctld:/usr/sbin/slurmctld slurmd:/usr/sbin/slurmd \
            slurm-client:/usr/bin/sbatch openssh-server:/usr/sbin/sshd openssh-client:/usr/bin/ssh \
            postgresql:/usr/lib/postgresql chromium:/usr/bin/chromium; do
  [ -e "${pair#*:}" ] || need+=("${pair%%:*}")
done
if [ ${#need[@]} -gt 0 ]; then
  say "installing ${need[*]}"
  apt-get -o DPkg::Lock::Timeout=600 update -qq
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
install -d -m 0755 "$STATE" "$STATE/logs"

wait_port() {  # wait_port PORT: until something listens on 127.0.0.1:PORT
  for _ in $(seq 1 120); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.25; done
  echo "port $1 never opened" >&2; return 1
}
alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

# ---------- munge ----------
[ -s /etc/munge/munge.key ] || mungekey --create --keyfile=/etc/munge/munge.key
chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
install -d -o munge -g munge -m 0755 /run/munge
if ! alive /run/munge/munged.pid; then
  runuser -u munge -- /usr/sbin/munged
fi
munge -n | unmunge >/dev/null

# ---------- SLURM ----------
H=$(hostname -s)
getent hosts "$H" >/dev/null || echo "127.0.0.1 $H" >> /etc/hosts
MEM_MB=$(( $(awk '/MemTotal/{print $2}' /proc/meminfo) / 1024 * 8 / 10 ))
if ! alive /run/slurmctld.pid || ! alive /run/slurmd.pid; then
  install -d /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
  # a fresh cluster: no saved DRAIN state, no old jobs; job ids restart at 1, so drop old jobcomp records
  rm -rf /var/spool/slurmctld/* /var/spool/slurmd/*
  rm -f /var/log/slurm/jobcomp.log
  cat > /etc/slurm/slurm.conf <<CONF
# written by corpus-pipeline scripts/services_up.sh: a single-node cluster for tests and demos
ClusterName=corpus
SlurmctldHost=$H
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
# no slurmdbd: finished jobs are read back with \`sacct -c\` from this file
JobCompType=jobcomp/filetxt
JobCompLoc=/var/log/slurm/jobcomp.log
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# the PyPI mpich wheel speaks PMI-2, so \`srun python prog.py\` can start MPI ranks; the stage scripts use the
# wheel's Hydra mpiexec inside the allocation instead (docs/orchestration.md says why)
MpiDefault=pmi2
MailProg=/bin/true
ReturnToService=2
SlurmdParameters=config_overrides
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=300
KillWait=5
Waittime=0
NodeName=$H NodeAddr=127.0.0.1 CPUs=$NCPUS RealMemory=$MEM_MB State=UNKNOWN
PartitionName=debug Nodes=$H Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
  for pf in /run/slurmd.pid /run/slurmctld.pid; do
    if alive "$pf"; then kill "$(cat "$pf")"; sleep 1; fi
  done
  /usr/sbin/slurmctld
  /usr/sbin/slurmd
fi
for _ in $(seq 1 120); do sinfo -h -n "$H" -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated)$' && break; sleep 0.25; done
sinfo -h -n "$H" -o %T | grep -qE '^(idle|mixed|allocated)$' \
  || { sinfo -N -l; tail -20 /var/log/slurm/slurmctld.log /var/log/slurm/slurmd.log; exit 1; }
say "slurm up (node $H, $NCPUS CPUs)"

# ---------- sshd on loopback, root login with a generated key ----------
install -d -m 0755 /run/sshd
ssh-keygen -A >/dev/null
install -d -m 700 "$STATE/ssh" /root/.ssh
[ -f "$STATE/ssh/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C corpus-local-hpc -f "$STATE/ssh/id_ed25519"
touch /root/.ssh/authorized_keys && chmod 600 /root/.ssh/authorized_keys
grep -qxF "$(cat "$STATE/ssh/id_ed25519.pub")" /root/.ssh/authorized_keys \
  || cat "$STATE/ssh/id_ed25519.pub" >> /root/.ssh/authorized_keys
if ! alive /run/sshd_corpus.pid; then
  /usr/sbin/sshd -o ListenAddress=127.0.0.1 -o Port=22 -o PidFile=/run/sshd_corpus.pid \
    -o MaxStartups=50:30:100 -E "$STATE/logs/sshd.log"
fi
wait_port 22
ssh -i "$STATE/ssh/id_ed25519" -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null \
  -o BatchMode=yes -o LogLevel=ERROR root@127.0.0.1 true
say "sshd up (127.0.0.1:22, key $STATE/ssh/id_ed25519)"

# ---------- PostgreSQL on a private port (initdb refuses root: run as postgres) ----------
PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
PGDATA="$STATE/pgdata"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  install -d -o postgres -g postgres -m 0700 "$PGDATA"
  runuser -u postgres -- "$PGBIN/initdb" -D "$PGDATA" -U postgres --auth=trust -E UTF8 >/dev/null
fi
chown postgres:postgres "$STATE/logs"
if ! runuser -u postgres -- "$PGBIN/pg_ctl" -D "$PGDATA" status >/dev/null 2>&1; then
  runuser -u postgres -- "$PGBIN/pg_ctl" -D "$PGDATA" -l "$STATE/logs/postgres.log" -w \
    -o "-p $PG_PORT -k /tmp -c listen_addresses=127.0.0.1 -c max_connections=200" start >/dev/null
fi
wait_port "$PG_PORT"
say "postgres up (127.0.0.1:$PG_PORT, user postgres, trust auth on loopback)"

say "all up after $(( $(date +%s) - t0 ))s (the tests find them under CORPUS_SERVICES_DIR=$STATE):"
echo "  ssh key:    $STATE/ssh/id_ed25519 (root@127.0.0.1)"
echo "  postgres:   postgresql+psycopg2://postgres@127.0.0.1:$PG_PORT/postgres"
