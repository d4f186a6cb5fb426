#!/usr/bin/env bash
# Conformance of the rendered deployment with real Tiled (from PyPI) and a real PostgreSQL.
#
#   hack/tiled/conformance.sh [go test flags...]
#
# Installs tiled[server]==<expansion.TiledVersion> into a virtual environment cached under
# ${TILED_OPERATOR_CACHE:-${XDG_CACHE_HOME:-~/.cache}/tiled-operator}, installs PostgreSQL from Debian when absent,
# starts it on loopback on a free port in a temporary directory, starts an S3 server (versitygw, from
# hack/s3/versitygw.sh, posix backend in a temporary directory) on loopback for the backup tests,
# installs Redis (redis-server, with redis-cli) from Debian when absent and starts one of its own for
# Tiled's streaming cache (loopback, a free port, a temporary directory, requirepass set to a random
# password in its configuration file, no persistence; never the system's service), and runs the Go
# conformance tests (build tag tiledconformance) in render/conformance. A missing prerequisite is a
# failure, never a skip; everything started here is stopped on exit.
#
# What the tests get, in the environment:
#   TILED_CONFORMANCE_VENV             the virtual environment with tiled[server]
#   TILED_CONFORMANCE_PG               127.0.0.1:PORT of PostgreSQL (user postgres)
#   TILED_CONFORMANCE_PG_PASSWORD      its password
#   TILED_CONFORMANCE_PSQL             psql
#   TILED_CONFORMANCE_PGCTL            a script: start|stop|restart|ensure the PostgreSQL server
#   TILED_CONFORMANCE_PGSERVER         a script: `new` starts another PostgreSQL server for one test, a
#                                      copy of the first as initdb left it (same superuser, password),
#                                      on a free port, and prints "DIR PORT"; `DIR PORT ACTION` then
#                                      takes start|stop|restart|ensure, or remove (stop, delete DIR)
#   TILED_CONFORMANCE_S3_ENDPOINT      http://127.0.0.1:PORT of versitygw
#   TILED_CONFORMANCE_S3_ACCESS_KEY    its root access key
#   TILED_CONFORMANCE_S3_SECRET_KEY    its root secret key
#   TILED_CONFORMANCE_REDIS_ADDR       127.0.0.1:PORT of redis-server
#   TILED_CONFORMANCE_REDIS_PASSWORD   its requirepass
#   TILED_CONFORMANCE_REDISNEW         a script running another redis-server in the foreground, with
#                                      the same configuration and password, for one test:
#                                      `redisnew.sh DIR PORT` (DIR empty, removed by the caller)
#
# The cases run concurrently (go test -parallel, TILED_CONFORMANCE_PARALLEL, default 3): those that
# provision the managed database's fixed names, or stop and restart PostgreSQL, or use Redis, each
# get a server of their own from PGSERVER and REDISNEW; the others share the first one, with databases,
# roles and buckets of their own. At the end the script prints each case's seconds, the sum, the wall
# time and the CPU seconds the tests used.
set -euo pipefail

cd "$(dirname "$0")/../.."
ROOT=$PWD
# shellcheck source=hack/lib/cache.sh
. hack/lib/cache.sh
CACHE=$(tiled_cache_root)
say() { printf '[tiled-conformance] %s\n' "$*" >&2; }
die() { say "FAIL: $*"; exit 1; }
START=$(date +%s)

# --- Tiled ---------------------------------------------------------------------------------------
VERSION=$(go run ./hack/tiled/version) || die "cannot read the Tiled version from the expansion package"
[[ $VERSION =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "unexpected Tiled version '$VERSION'"
PYTHON=${PYTHON:-python3}
command -v "$PYTHON" >/dev/null || die "$PYTHON not found: install python3 and python3-venv"
VENV=$CACHE/tiled-venv-$VERSION
mkdir -p "$CACHE"
if [[ ! -x $VENV/bin/tiled ]] || [[ $("$VENV/bin/tiled" --version 2>/dev/null | tail -n1) != "$VERSION" ]]; then
	say "installing tiled[server]==$VERSION into $VENV"
	rm -rf "$VENV"
	"$PYTHON" -m venv "$VENV" || die "cannot create a virtual environment (apt-get install python3-venv)"
	"$VENV/bin/pip" install --quiet --disable-pip-version-check "tiled[server]==$VERSION" \
		|| { rm -rf "$VENV"; die "pip could not install tiled[server]==$VERSION from PyPI"; }
fi
say "Tiled $("$VENV/bin/tiled" --version | tail -n1) in $VENV"

# --- PostgreSQL ----------------------------------------------------------------------------------
pg_bin() {
	local d
	if command -v pg_ctl >/dev/null && command -v initdb >/dev/null; then
		dirname "$(readlink -f "$(command -v pg_ctl)")"
		return
	fi
	for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
		[[ -x $d/pg_ctl && -x $d/initdb ]] && { echo "$d"; return; }
	done
	return 1
}
if ! PGBIN=$(pg_bin); then
	if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
		say "installing PostgreSQL from Debian"
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null \
			|| die "apt-get could not install postgresql"
		PGBIN=$(pg_bin) || die "postgresql installed but pg_ctl/initdb not found"
	else
		die "PostgreSQL (pg_ctl, initdb) not found and cannot be installed (need root and apt-get)"
	fi
fi
PSQL=$PGBIN/psql
[[ -x $PSQL ]] || PSQL=$(command -v psql) || die "psql not found"

PGDIR=$(mktemp -d "${TMPDIR:-/tmp}/tiled-conformance-pg.XXXXXX")
PGPORT=$("$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
PGPASS=$("$PYTHON" -c 'import secrets; print(secrets.token_hex(16))')
RUNAS=()
if [[ $(id -u) == 0 ]]; then
	id postgres >/dev/null 2>&1 || die "running as root but there is no postgres user to run PostgreSQL as"
	chown postgres "$PGDIR"
	RUNAS=(runuser -u postgres --)
fi
S3PID='' S3DIR='' REDISPID='' REDISDIR=''
cleanup() {
	if [[ -n $REDISPID ]]; then
		kill "$REDISPID" 2>/dev/null || true
		wait "$REDISPID" 2>/dev/null || true
	fi
	[[ -z $REDISDIR ]] || rm -rf "$REDISDIR"
	local d
	for d in "$PGDIR"/own.*/data "$PGDIR/data"; do
		[[ -f $d/postmaster.pid ]] || continue
		"${RUNAS[@]}" "$PGBIN/pg_ctl" -D "$d" -m fast -w stop >/dev/null 2>&1 || true
	done
	rm -rf "$PGDIR"
	if [[ -n $S3PID ]]; then
		kill "$S3PID" 2>/dev/null || true
		wait "$S3PID" 2>/dev/null || true
	fi
	[[ -z $S3DIR ]] || rm -rf "$S3DIR"
}
trap cleanup EXIT
printf '%s\n' "$PGPASS" >"$PGDIR/pwfile"
chmod 600 "$PGDIR/pwfile"
[[ ${#RUNAS[@]} -gt 0 ]] && chown postgres "$PGDIR/pwfile"
"${RUNAS[@]}" "$PGBIN/initdb" -D "$PGDIR/data" -U postgres --pwfile="$PGDIR/pwfile" \
	--auth-local=scram-sha-256 --auth-host=scram-sha-256 >"$PGDIR/initdb.log" 2>&1 \
	|| { cat "$PGDIR/initdb.log" >&2; die "initdb failed"; }
# The template of the servers the tests ask for (pgserver.sh new): the cluster as initdb left it, never
# started.
"${RUNAS[@]}" cp -a "$PGDIR/data" "$PGDIR/template"
# pgserver.sh DIR PORT start|stop|restart|ensure|remove: one server, its data in DIR/data, its socket
# in DIR, on 127.0.0.1:PORT. The tests stop the server (a database that is not up yet) and restart it
# (an outage under a running Tiled); fast shutdown cuts every connection, as deleting the pod does.
# pgserver.sh new: a server of its own for one test, a copy of the template (same superuser and
# password) in PGDIR/own.*, on a free port, started; prints "DIR PORT". The exit trap stops those left.
{
	printf '#!/usr/bin/env bash\nset -euo pipefail\n'
	printf 'PGBIN=%q PYTHON=%q PGDIR=%q\n' "$PGBIN" "$PYTHON" "$PGDIR"
	printf 'RUNAS=(%s)\n' "$(printf '%q ' "${RUNAS[@]}")"
	cat <<-'EOF'
		if [[ ${1:-} == new ]]; then
			dir=$(mktemp -d "$PGDIR/own.XXXXXX")
			chmod 755 "$dir"
			cp -a "$PGDIR/template" "$dir/data"
			[[ ${#RUNAS[@]} == 0 ]] || chown postgres "$dir"
			port=$("$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
			"$0" "$dir" "$port" start || { cat "$dir/postgres.log" >&2; exit 1; }
			echo "$dir $port"
			exit 0
		fi
		dir=${1:?usage: $0 new | DIR PORT start|stop|restart|ensure|remove} port=${2:?} action=${3:?}
		pgctl() { "${RUNAS[@]}" "$PGBIN/pg_ctl" -D "$dir/data" "$@"; }
		start() { pgctl -l "$dir/postgres.log" -w -t 60 -o "-p $port -k $dir -c listen_addresses=127.0.0.1" start >/dev/null; }
		stop() { pgctl -m fast -w stop >/dev/null; }
		case $action in
			start) start ;;
			stop) stop ;;
			restart) stop; start ;;
			ensure) pgctl status >/dev/null || start ;;
			remove) if pgctl status >/dev/null; then stop; fi; rm -rf "$dir" ;;
			*) echo "usage: $0 new | DIR PORT start|stop|restart|ensure|remove" >&2; exit 2 ;;
		esac
	EOF
} >"$PGDIR/pgserver.sh"
chmod 755 "$PGDIR/pgserver.sh"
"$PGDIR/pgserver.sh" "$PGDIR" "$PGPORT" start || { cat "$PGDIR/postgres.log" >&2; die "PostgreSQL did not start"; }
say "$("$PGBIN/postgres" --version) on 127.0.0.1:$PGPORT"
# pgctl.sh stop|start|restart|ensure: the first server.
printf '#!/usr/bin/env bash\nexec %q %q %q "$@"\n' "$PGDIR/pgserver.sh" "$PGDIR" "$PGPORT" >"$PGDIR/pgctl.sh"
chmod 755 "$PGDIR/pgctl.sh"

# --- S3 (versitygw) ------------------------------------------------------------------------------
# The backup tests' S3 target (render/conformance/dbtool_test.go): a real S3 server on loopback, with
# random root credentials; each test makes its own bucket.
VERSITYGW=$(hack/s3/versitygw.sh) || die "cannot build versitygw (hack/s3/versitygw.sh)"
S3DIR=$(mktemp -d "${TMPDIR:-/tmp}/tiled-conformance-s3.XXXXXX")
mkdir "$S3DIR/posix"
S3PORT=$("$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
S3ACCESS=conformance$("$PYTHON" -c 'import secrets; print(secrets.token_hex(6))')
S3SECRET=$("$PYTHON" -c 'import secrets; print(secrets.token_hex(20))')
ROOT_ACCESS_KEY=$S3ACCESS ROOT_SECRET_KEY=$S3SECRET "$VERSITYGW" --port "127.0.0.1:$S3PORT" --region us-east-1 \
	--health /health posix "$S3DIR/posix" >"$S3DIR/versitygw.log" 2>&1 &
S3PID=$!
for _ in $(seq 1 120); do
	curl --silent --fail --max-time 2 "http://127.0.0.1:$S3PORT/health" >/dev/null && break
	kill -0 "$S3PID" 2>/dev/null || { cat "$S3DIR/versitygw.log" >&2; S3PID=''; die "versitygw exited"; }
	sleep 0.5
done
curl --silent --fail --max-time 2 "http://127.0.0.1:$S3PORT/health" >/dev/null \
	|| { cat "$S3DIR/versitygw.log" >&2; die "versitygw did not answer on 127.0.0.1:$S3PORT in 60 s"; }
say "versitygw $("$VERSITYGW" --version | sed -n 's/^Version *: *//p') (S3) on 127.0.0.1:$S3PORT"

# --- Redis ---------------------------------------------------------------------------------------
# Tiled's streaming cache (streaming_cache: INCR, GET, HSET, EXPIRE, PUBLISH, HMGET, SUBSCRIBE). A
# server of this script's own, whatever else runs on the machine: installing Debian's package may
# start its service on 6379, which is never used.
if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
	if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
		say "installing Redis (redis-server, redis-tools) from Debian"
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-tools >/dev/null \
			|| die "apt-get could not install redis-server"
		command -v redis-server >/dev/null && command -v redis-cli >/dev/null \
			|| die "redis-server installed but redis-server/redis-cli not on PATH"
	else
		die "redis-server (or redis-cli) not found and cannot be installed (need root and apt-get)"
	fi
fi
REDIS_SERVER=$(command -v redis-server)
REDIS_CLI=$(command -v redis-cli)
REDISDIR=$(mktemp -d "${TMPDIR:-/tmp}/tiled-conformance-redis.XXXXXX")
REDISPORT=$("$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
REDISPASS=$("$PYTHON" -c 'import secrets; print(secrets.token_hex(16))')
# As root, as the package's unprivileged user when there is one (setpriv execs: the PID is the server's).
REDISRUNAS=()
if [[ $(id -u) == 0 ]] && id redis >/dev/null 2>&1; then
	chown redis: "$REDISDIR"
	REDISRUNAS=(setpriv --reuid=redis --regid=redis --init-groups --)
fi
# The password only in this file (mode 600 in a 700 directory), not on any command line.
(
	umask 077
	cat >"$REDISDIR/redis.conf" <<-EOF
		bind 127.0.0.1
		port $REDISPORT
		protected-mode yes
		requirepass $REDISPASS
		daemonize no
		supervised no
		pidfile ""
		logfile ""
		dir $REDISDIR
		save ""
		appendonly no
	EOF
)
[[ ${#REDISRUNAS[@]} == 0 ]] || chown redis: "$REDISDIR/redis.conf"
"${REDISRUNAS[@]}" "$REDIS_SERVER" "$REDISDIR/redis.conf" >"$REDISDIR/redis.log" 2>&1 &
REDISPID=$!
redis_ping() { REDISCLI_AUTH=$REDISPASS "$REDIS_CLI" -h 127.0.0.1 -p "$REDISPORT" ping 2>/dev/null; }
for _ in $(seq 1 120); do
	[[ $(redis_ping) == PONG ]] && break
	kill -0 "$REDISPID" 2>/dev/null || { cat "$REDISDIR/redis.log" >&2; REDISPID=''; die "redis-server exited"; }
	sleep 0.25
done
[[ $(redis_ping) == PONG ]] || { cat "$REDISDIR/redis.log" >&2; die "redis-server did not answer on 127.0.0.1:$REDISPORT in 30 s"; }
# The password is required: without it, NOAUTH.
[[ $("$REDIS_CLI" -h 127.0.0.1 -p "$REDISPORT" ping 2>&1) == *NOAUTH* ]] || die "redis-server on 127.0.0.1:$REDISPORT answers without its password"
say "$("$REDIS_SERVER" --version | cut -d' ' -f1-3) on 127.0.0.1:$REDISPORT (requirepass)"
# redisnew.sh DIR PORT: another server for one test, in the foreground (the test owns the process):
# this one's configuration (its password) with only the port and the directory changed.
{
	printf '#!/usr/bin/env bash\nset -euo pipefail\n'
	printf 'REDIS_SERVER=%q CONF=%q\n' "$REDIS_SERVER" "$REDISDIR/redis.conf"
	printf 'REDISRUNAS=(%s)\n' "$(printf '%q ' "${REDISRUNAS[@]}")"
	cat <<-'EOF'
		dir=${1:?usage: $0 DIR PORT} port=${2:?usage: $0 DIR PORT}
		(umask 077; printf 'include %s\nport %s\ndir %s\n' "$CONF" "$port" "$dir" >"$dir/redis.conf")
		[[ ${#REDISRUNAS[@]} == 0 ]] || chown -R redis: "$dir"
		exec "${REDISRUNAS[@]}" "$REDIS_SERVER" "$dir/redis.conf"
	EOF
} >"$REDISDIR/redisnew.sh"
chmod 755 "$REDISDIR/redisnew.sh"

# --- Go conformance tests ------------------------------------------------------------------------
export TILED_CONFORMANCE_VENV=$VENV
export TILED_CONFORMANCE_PG=127.0.0.1:$PGPORT
export TILED_CONFORMANCE_PG_PASSWORD=$PGPASS
export TILED_CONFORMANCE_PSQL=$PSQL
export TILED_CONFORMANCE_PGCTL=$PGDIR/pgctl.sh
export TILED_CONFORMANCE_PGSERVER=$PGDIR/pgserver.sh
export TILED_CONFORMANCE_S3_ENDPOINT=http://127.0.0.1:$S3PORT
export TILED_CONFORMANCE_S3_ACCESS_KEY=$S3ACCESS
export TILED_CONFORMANCE_S3_SECRET_KEY=$S3SECRET
export TILED_CONFORMANCE_REDIS_ADDR=127.0.0.1:$REDISPORT
export TILED_CONFORMANCE_REDIS_PASSWORD=$REDISPASS
export TILED_CONFORMANCE_REDISNEW=$REDISDIR/redisnew.sh
# How many cases at once. 3 on 2 cores: a case alternates between CPU (Python starting Tiled, psql,
# pg_dump) and waiting (on PostgreSQL, on its own servers, on deliberate waits of 10 to 15 s), so
# that 3 keep both cores busy; more only lengthens each case (Tiled's start-up is bounded at 120 s).
PARALLEL=${TILED_CONFORMANCE_PARALLEL:-3}
say "go test -parallel $PARALLEL"
# CPU seconds of the processes this shell has waited for (bash's times, second line): go test's, and
# through it the test binary's and every process that one waited for (not the servers started here).
# times runs in this shell (a pipe or $(...) would run it in a fork, which has waited for no one).
OUT=$(mktemp "${TMPDIR:-/tmp}/tiled-conformance-out.XXXXXX")
children_cpu() { awk 'NR == 2 { split($1, u, /[ms]/); split($2, s, /[ms]/); printf "%d", u[1]*60 + u[2] + s[1]*60 + s[2] }' "$OUT.times"; }
times >"$OUT.times"
CPU0=$(children_cpu)
TESTSTART=$(date +%s)
status=0
# -v (unless other flags are given) for the table below, which reads the "--- PASS: TestX (12.34s)"
# lines.
go test -tags tiledconformance -count=1 -timeout 60m -parallel "$PARALLEL" "${@:--v}" ./render/conformance/ 2>&1 \
	| tee "$OUT" || status=$?
WALL=$(($(date +%s) - TESTSTART))
times >"$OUT.times"
CPU=$(($(children_cpu) - CPU0))
# Where the minutes go: each top-level case's own seconds (a parallel case's from when it ran, not
# while it waited for a slot; a case whose two targets ran as parallel subtests, their sum), longest
# first.
awk -v wall="$WALL" -v cpu="$CPU" -v par="$PARALLEL" '
	/^--- (PASS|FAIL|SKIP): Test/ { t = $4; gsub(/[()s]/, "", t); i = ++n; name[i] = $3; secs[i] = t; res[i] = $2; sub(/:$/, "", res[i]); idx[$3] = i }
	/^    --- (PASS|FAIL|SKIP): Test[^ \/]*\/[^ ]* \(/ { t = $4; gsub(/[()s]/, "", t); p = $3; sub(/\/.*/, "", p); sub_sum[p] += t }
	END {
		if (n == 0) exit
		printf "\n[tiled-conformance] seconds per case (-parallel %s; a case whose targets ran as parallel subtests: their sum):\n", par
		for (i = 1; i <= n; i++) { if (sub_sum[name[i]] > secs[i]) secs[i] = sub_sum[name[i]]; sum += secs[i]; order[i] = i }
		for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (secs[order[j]] + 0 > secs[order[i]] + 0) { k = order[i]; order[i] = order[j]; order[j] = k }
		for (i = 1; i <= n; i++) { k = order[i]; printf "  %8.1f  %-5s %s\n", secs[k], res[k], name[k] }
		printf "  %8.1f  sum of the cases\n  %8d  wall time of go test (its build included)\n  %8d  CPU seconds of go test, the cases and their processes (not the shared servers)\n", sum, wall, cpu
	}' "$OUT" >&2
rm -f "$OUT" "$OUT.times"
say "Tiled $VERSION: $([[ $status == 0 ]] && echo PASS || echo FAIL) in $(($(date +%s) - START))s"
exit $status
