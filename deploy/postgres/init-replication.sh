#!/bin/sh
# The primary of docker-compose.ha.yml: lets its standby stream from it and makes
# every commit wait until the standby holds it (synchronous replication), so that
# promoting the standby loses no order a worker stored. Run once by the postgres
# image on an empty data directory, after init-app-role.sh.
#
# The standby connects as the image's superuser over the compose network; until
# the standby streams, commits wait (the API starts after the standby is healthy).
set -eu
echo "host replication ${POSTGRES_USER:-postgres} all scram-sha-256" >>"$PGDATA/pg_hba.conf"
cat >>"$PGDATA/postgresql.conf" <<CONF
wal_level = replica
synchronous_commit = on
synchronous_standby_names = '*'
CONF
