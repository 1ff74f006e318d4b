#!/usr/bin/env bash
# `make airflow`: Airflow standalone (API server + UI, scheduler, triggerer, DAG processor) with this
# repository's DAGs, a login, and its metadata in PostgreSQL when scripts/services_up.sh has started
# it (SQLite otherwise). Prints the URL and the login, then runs in the foreground (Ctrl-C stops it).
#
# Settings (environment):
#   CORPUS_AIRFLOW_HOME  Airflow's state (default /tmp/corpus-airflow; never inside the repository)
#   CORPUS_AIRFLOW_PORT  UI / REST API port on 127.0.0.1 (default 8080)
#   CORPUS_AIRFLOW_DB    PostgreSQL database name (default corpus_airflow); created if missing
#   CORPUS_AIRFLOW_PASSWORD  the admin's password (default: generated once, kept in AIRFLOW_HOME)
#   CORPUS_PG_PORT       PostgreSQL port (default 55432, as services_up.sh starts it)
#   AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION  default False: every DAG is live once parsed
# The ssh backend's Connection `slurm_login` points at sshd on 127.0.0.1 with services_up.sh's key.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV_BIN="$ROOT/.venv/bin"
export AIRFLOW_HOME="${CORPUS_AIRFLOW_HOME:-/tmp/corpus-airflow}"
PORT="${CORPUS_AIRFLOW_PORT:-8080}"
DB="${CORPUS_AIRFLOW_DB:-corpus_airflow}"
PG_PORT="${CORPUS_PG_PORT:-55432}"
SERVICES="${CORPUS_SERVICES_DIR:-/var/tmp/corpus-services}"
mkdir -p "$AIRFLOW_HOME"

if (exec 3<>"/dev/tcp/127.0.0.1/$PG_PORT") 2>/dev/null; then
  if ! psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname = '$DB'" | grep -q 1; then
    psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -qc "CREATE DATABASE \"$DB\"" >/dev/null
  fi
  export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="postgresql+psycopg2://postgres@127.0.0.1:$PG_PORT/$DB"
  db_note="PostgreSQL 127.0.0.1:$PG_PORT/$DB"
else
  export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="sqlite:///$AIRFLOW_HOME/airflow.db?timeout=60"
  db_note="SQLite (start PostgreSQL with scripts/services_up.sh for concurrent runs)"
fi

PASSWORDS="$AIRFLOW_HOME/simple_auth_manager_passwords.json"
if [ -n "${CORPUS_AIRFLOW_PASSWORD:-}" ]; then
  "$VENV_BIN/python" -c 'import json,sys; print(json.dumps({"admin": sys.argv[1]}))' "$CORPUS_AIRFLOW_PASSWORD" > "$PASSWORDS"
elif [ ! -s "$PASSWORDS" ]; then
  "$VENV_BIN/python" -c 'import json,secrets; print(json.dumps({"admin": secrets.token_urlsafe(12)}))' > "$PASSWORDS"
fi
chmod 600 "$PASSWORDS"
PASSWORD="$("$VENV_BIN/python" -c 'import json,sys; print(json.load(open(sys.argv[1]))["admin"])' "$PASSWORDS")"

export AIRFLOW__CORE__DAGS_FOLDER="$ROOT/dags"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION="${AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION:-False}"
export AIRFLOW__CORE__PARALLELISM="${AIRFLOW__CORE__PARALLELISM:-4}"
export AIRFLOW__API__HOST=127.0.0.1
export AIRFLOW__API__PORT="$PORT"
# the task supervisors reach the API server here (the default assumes port 8080)
export AIRFLOW__API__BASE_URL="http://127.0.0.1:$PORT"
export AIRFLOW__CORE__EXECUTION_API_SERVER_URL="http://127.0.0.1:$PORT/execution/"
export AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL="${AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL:-30}"
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS="admin:admin"
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE="$PASSWORDS"
if [ -z "${AIRFLOW_CONN_SLURM_LOGIN:-}" ] && [ -f "$SERVICES/ssh/id_ed25519" ]; then
  export AIRFLOW_CONN_SLURM_LOGIN="{\"conn_type\": \"ssh\", \"host\": \"127.0.0.1\", \"port\": 22, \"login\": \"root\", \"extra\": {\"key_file\": \"$SERVICES/ssh/id_ed25519\", \"no_host_key_check\": true}}"
fi
export PATH="$VENV_BIN:$PATH"

cat <<MSG
Airflow standalone for corpus-pipeline
  UI and REST API: http://127.0.0.1:$PORT/   (health: /api/v2/monitor/health)
  login:           admin / $PASSWORD
  metadata DB:     $db_note
  AIRFLOW_HOME:    $AIRFLOW_HOME
  DAGs:            $ROOT/dags (build_snapshot, build_version, contamination_check, ingest_crawl, refresh_optouts)
MSG
exec "$VENV_BIN/airflow" standalone
