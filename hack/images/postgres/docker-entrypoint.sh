#!/bin/sh
# docker-entrypoint.sh of docker.io/local/postgres (hack/images/build.sh): the start-up contract of the
# official postgres image, in POSIX sh, for Debian's postgresql package.
#
#   POSTGRES_PASSWORD  superuser password; required unless POSTGRES_HOST_AUTH_METHOD=trust
#   POSTGRES_USER      superuser name (default postgres)
#   POSTGRES_DB        database created on first start (default: POSTGRES_USER)
#   *_FILE             each of the three read from a file instead (exclusive with the plain variable)
#   POSTGRES_INITDB_ARGS, POSTGRES_INITDB_WALDIR   extra initdb arguments / WAL directory
#   POSTGRES_HOST_AUTH_METHOD   method of the "host all all all" line (default: password_encryption,
#                      scram-sha-256)
#   PGDATA             data directory (default /var/lib/postgresql/data)
#   /docker-entrypoint-initdb.d/*.sh, *.sql, *.sql.gz, *.sql.xz, *.sql.zst   run once, in name order,
#                      after initdb, against a temporary server listening on the Unix socket only
#
# Arguments: none or `postgres [options]` (or options alone) start the server, initialising PGDATA
# first when it holds no cluster; anything else is executed as given.
#
# Unlike the official image, the first initialisation is restartable: initdb and the init scripts run
# in a sibling directory (PGDATA.initdb-tmp) that is renamed to PGDATA only once everything succeeded,
# so a container killed mid-way starts over on its next start instead of finding a half-initialised
# cluster. Init scripts then see PGDATA set to that staging directory, the cluster being initialised.
# (When PGDATA is itself a mount point or its parent is not writable, it initialises in place, as the
# official image does.) The image runs as uid 999 (postgres) and needs no root.
set -eu

log() { printf '%s\n' "docker-entrypoint.sh: $*" >&2; }

# file_env VAR [DEFAULT]: VAR from VAR or the file named by VAR_FILE, else DEFAULT.
file_env() {
	_var=$1
	_def=${2-}
	eval "_val=\${$_var-}"
	eval "_file=\${${_var}_FILE-}"
	if [ -n "$_val" ] && [ -n "$_file" ]; then
		log "error: both $_var and ${_var}_FILE are set (but are exclusive)"
		exit 1
	fi
	if [ -n "$_file" ]; then
		_val=$(cat "$_file")
	elif [ -z "$_val" ]; then
		_val=$_def
	fi
	export "$_var=$_val"
	unset "${_var}_FILE"
	unset _var _def _val _file
}

# want_help ARGS: postgres options that print and exit, for which nothing is initialised.
want_help() {
	for _a in "$@"; do
		case $_a in
		-'?' | --help | --describe-config | -V | --version) return 0 ;;
		esac
	done
	return 1
}

setup_env() {
	file_env POSTGRES_PASSWORD
	file_env POSTGRES_USER postgres
	file_env POSTGRES_DB "$POSTGRES_USER"
	: "${POSTGRES_INITDB_ARGS:=}"
	: "${PGDATA:=/var/lib/postgresql/data}"
	export PGDATA
}

create_dirs() {
	mkdir -p "$PGDATA"
	chmod 00700 "$PGDATA" 2>/dev/null || :
	mkdir -p /var/run/postgresql 2>/dev/null || :
	chmod 03775 /var/run/postgresql 2>/dev/null || :
	if [ -n "${POSTGRES_INITDB_WALDIR:-}" ]; then
		mkdir -p "$POSTGRES_INITDB_WALDIR"
		chmod 00700 "$POSTGRES_INITDB_WALDIR" 2>/dev/null || :
	fi
}

verify_minimum_env() {
	if [ -z "$POSTGRES_PASSWORD" ] && [ "${POSTGRES_HOST_AUTH_METHOD:-}" != trust ]; then
		log "error: database is uninitialized and superuser password is not specified."
		log "  Set POSTGRES_PASSWORD (or POSTGRES_PASSWORD_FILE) to a non-empty value, or"
		log "  POSTGRES_HOST_AUTH_METHOD=trust to allow every connection without a password (not recommended)."
		exit 1
	fi
}

# is_mountpoint DIR: DIR is on another file system than its parent.
is_mountpoint() {
	[ "$(stat -c %d "$1")" != "$(stat -c %d "$1/..")" ]
}

# init_dir DIR: initdb into DIR with the superuser's password read from a pipe (never a file).
init_dir() {
	set -- --username="$POSTGRES_USER" --pwfile=/dev/stdin
	if [ -n "${POSTGRES_INITDB_WALDIR:-}" ]; then
		set -- "$@" --waldir "$POSTGRES_INITDB_WALDIR"
	fi
	# initdb refuses an empty password file, hence the newline.
	# shellcheck disable=SC2086 # POSTGRES_INITDB_ARGS is a list of words, as in the official image.
	printf '%s\n' "$POSTGRES_PASSWORD" | eval 'initdb -D "$DATADIR" "$@" '"$POSTGRES_INITDB_ARGS"
}

setup_hba() {
	_auth=$(postgres -D "$DATADIR" -C password_encryption)
	: "${POSTGRES_HOST_AUTH_METHOD:=$_auth}"
	{
		printf '\n'
		if [ "$POSTGRES_HOST_AUTH_METHOD" = trust ]; then
			printf '# warning trust is enabled for all connections\n'
		fi
		printf 'host all all all %s\n' "$POSTGRES_HOST_AUTH_METHOD"
	} >>"$DATADIR/pg_hba.conf"
}

temp_server_start() {
	PGUSER=${PGUSER:-$POSTGRES_USER} pg_ctl -D "$DATADIR" -o "-c listen_addresses='' -p ${PGPORT:-5432}" -w start
}

temp_server_stop() {
	PGUSER=${PGUSER:-postgres} pg_ctl -D "$DATADIR" -m fast -w stop
}

# process_sql DB [psql args]: psql on the temporary server's socket, stopping at the first error.
process_sql() {
	_db=$1
	shift
	PGHOST='' PGHOSTADDR='' psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --no-password --no-psqlrc \
		--port "${PGPORT:-5432}" --dbname "$_db" "$@"
}

# setup_db creates POSTGRES_DB unless it exists (psql interpolates :'db' only in scripts, not in -c).
setup_db() {
	_exists=$(printf '%s\n' "SELECT 1 FROM pg_database WHERE datname = :'db';" |
		process_sql postgres --set db="$POSTGRES_DB" --tuples-only --no-align)
	if [ -z "$_exists" ]; then
		printf '%s\n' 'CREATE DATABASE :"db";' | process_sql postgres --set db="$POSTGRES_DB" >/dev/null
		log "created database $POSTGRES_DB"
	fi
}

process_init_files() {
	for f in /docker-entrypoint-initdb.d/*; do
		[ -e "$f" ] || continue
		case $f in
		*.sh)
			if [ -x "$f" ]; then
				log "running $f"
				"$f"
			else
				log "sourcing $f"
				# shellcheck disable=SC1090
				. "$f"
			fi
			;;
		*.sql) log "running $f"; process_sql "$POSTGRES_DB" -f "$f" ;;
		*.sql.gz) log "running $f"; gunzip -c "$f" | process_sql "$POSTGRES_DB" ;;
		*.sql.xz) log "running $f"; xzcat "$f" | process_sql "$POSTGRES_DB" ;;
		*.sql.zst) log "running $f"; zstd -dc "$f" | process_sql "$POSTGRES_DB" ;;
		*) log "ignoring $f" ;;
		esac
	done
}

# initialise: a new cluster in DATADIR, its databases and init scripts, then stopped. The init
# scripts see PGDATA=DATADIR, the cluster being initialised (e.g. to append to postgresql.conf).
initialise() {
	_pgdata=$PGDATA
	export PGDATA="$DATADIR"
	init_dir
	setup_hba
	export PGPASSWORD="${PGPASSWORD:-$POSTGRES_PASSWORD}"
	temp_server_start
	setup_db
	process_init_files
	temp_server_stop
	unset PGPASSWORD
	export PGDATA="$_pgdata"
}

main() {
	if [ "$#" -eq 0 ] || [ "${1#-}" != "$1" ]; then
		set -- postgres "$@"
	fi
	if [ "$1" = postgres ] && ! want_help "$@"; then
		if [ "$(id -u)" = 0 ]; then
			log "error: running as root; PostgreSQL refuses it. Run as uid 999 (the image's USER)."
			exit 1
		fi
		setup_env
		create_dirs
		if [ ! -s "$PGDATA/PG_VERSION" ]; then
			verify_minimum_env
			parent=$(dirname "$PGDATA")
			staging=${PGDATA%/}.initdb-tmp
			if [ -z "$(ls -A "$PGDATA")" ] && ! is_mountpoint "$PGDATA" && [ -w "$parent" ]; then
				if [ -e "$staging" ]; then
					log "removing $staging left by an interrupted initialisation"
					rm -rf "$staging"
				fi
				DATADIR=$staging
				initialise
				# One rename(2), which replaces the empty PGDATA: the cluster appears whole or not at all.
				mv -T "$staging" "$PGDATA"
			else
				DATADIR=$PGDATA
				initialise
			fi
			log "PostgreSQL init process complete; ready for start up."
		else
			log "PostgreSQL database directory appears to contain a database; skipping initialization"
		fi
	fi
	exec "$@"
}

main "$@"
