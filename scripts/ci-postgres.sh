#!/usr/bin/env bash
# Start a local PostgreSQL for the knowledge-store tests and print its SQLAlchemy URL.
#
#   export SOVA_TEST_PG_URL="$(bash scripts/ci-postgres.sh)"
#
# Installs Debian's postgresql when absent (needs root and apt), starts the default
# cluster on 127.0.0.1, and creates a user and database "sova_test" (idempotent: safe to
# run twice). Everything it prints except the final URL goes to stderr.
set -euo pipefail

DB=${SOVA_PG_DB:-sova_test}
USER_=${SOVA_PG_USER:-sova_test}
PASS=${SOVA_PG_PASSWORD:-sova_test}
PORT=${SOVA_PG_PORT:-5432}

log() { echo "ci-postgres: $*" >&2; }

if ! command -v pg_lsclusters >/dev/null 2>&1 || [ -z "$(pg_lsclusters -h 2>/dev/null)" ]; then
  log "installing postgresql from Debian"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq postgresql >&2
fi

read -r VER CLUSTER _ STATUS _ < <(pg_lsclusters -h | head -n1)
if [ "$STATUS" != "online" ]; then
  log "starting cluster $VER/$CLUSTER"
  pg_ctlcluster "$VER" "$CLUSTER" start >&2
fi
PORT=$(pg_lsclusters -h | awk -v c="$CLUSTER" '$2 == c {print $3; exit}')

# Wait until it accepts connections (a fresh start takes a moment).
for _ in $(seq 1 50); do
  if su postgres -c "psql -p $PORT -Atqc 'select 1'" >/dev/null 2>&1; then break; fi
  sleep 0.2
done

psql_admin() { su postgres -c "psql -p $PORT -v ON_ERROR_STOP=1 -Atq $*"; }
if [ "$(psql_admin "-c \"select 1 from pg_roles where rolname='$USER_'\"")" != "1" ]; then
  psql_admin "-c \"create role $USER_ login password '$PASS'\"" >&2
fi
if [ "$(psql_admin "-c \"select 1 from pg_database where datname='$DB'\"")" != "1" ]; then
  psql_admin "-c \"create database $DB owner $USER_\"" >&2
fi

echo "postgresql+psycopg://$USER_:$PASS@127.0.0.1:$PORT/$DB"
