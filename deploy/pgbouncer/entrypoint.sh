#!/bin/sh
# The compose service's start: the database is the postgres service, the password comes from the
# environment (POSTGRES_PASSWORD, never written into an image), logs go to stderr.
set -eu
umask 077
mkdir -p /tmp/pgbouncer
printf '"sparkops" "%s"\n' "${POSTGRES_PASSWORD:?}" > /tmp/pgbouncer/userlist.txt
sed -e "s/^sparkops = host=127.0.0.1/sparkops = host=${PGBOUNCER_DB_HOST:-postgres}/" \
    -e "s|^auth_file = .*|auth_file = /tmp/pgbouncer/userlist.txt|" \
    -e "s|^unix_socket_dir = .*|unix_socket_dir =|" \
    -e "/^logfile = /d" -e "s|^pidfile = .*|pidfile =|" \
    /etc/pgbouncer/pgbouncer.ini > /tmp/pgbouncer/pgbouncer.ini
exec pgbouncer /tmp/pgbouncer/pgbouncer.ini
