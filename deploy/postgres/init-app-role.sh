#!/bin/sh
# The role the application connects to Postgres as. Run once by the postgres image
# on an empty data directory (docker-compose.yml mounts it into
# /docker-entrypoint-initdb.d), as the image's superuser POSTGRES_USER; or by hand
# against any server (psql's PGHOST etc. apply).
#
# The role can log in and owns its database, so that `seckill migrate` (and
# `serve`'s migrations at start) can create and change the tables there, and it
# can do nothing else: no superuser, no new roles or databases, no replication,
# no bypassing row security. A compromised API then reaches the sale's data, not
# the server (COPY ... PROGRAM, other databases, new roles).
#
# SECKILL_DB_PASSWORD (required) is its password; SECKILL_DB_USER and
# SECKILL_DB_NAME (both default `seckill`) its name and its database's.
set -eu
: "${SECKILL_DB_PASSWORD:?set SECKILL_DB_PASSWORD (e.g. openssl rand -hex 24)}"
user=${SECKILL_DB_USER:-seckill}
db=${SECKILL_DB_NAME:-seckill}
# psql quotes the values (:"name" identifiers, :'value' literals): no password or
# name is ever pasted into SQL text.
psql -v ON_ERROR_STOP=1 --no-psqlrc --username "${POSTGRES_USER:-postgres}" --dbname postgres \
  --set=user="$user" --set=db="$db" --set=pw="$SECKILL_DB_PASSWORD" <<'SQL'
CREATE ROLE :"user" LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS PASSWORD :'pw';
CREATE DATABASE :"db" OWNER :"user";
REVOKE ALL ON DATABASE :"db" FROM PUBLIC;
GRANT CONNECT, TEMPORARY ON DATABASE :"db" TO :"user";
SQL
