#!/usr/bin/env bash
# smoke.sh runs the PostgreSQL, Redis, Tiled, versitygw and metrics-server images' root filesystems
# without a node, the way the operator's pods (and the backup tests' S3 server, and the node's metrics
# API) run them: read-only root, the image's uid/gid with no capabilities and no_new_privs, the pod's
# writable volumes as tmpfs or host folders, in private mount, PID and network namespaces (only
# loopback; nothing leaves them).
#
#   hack/images/smoke.sh ~/.cache/tiled-operator/images/current/{postgres,redis,tiled,tiled-0.2.14,versitygw,metrics-server}.tar
#
# postgres: the entrypoint initialises PGDATA (a subdirectory of the volume, as the operator sets it)
#   with POSTGRES_USER/PASSWORD/DB, the operator's init script and a sourced shell script changing
#   postgresql.conf in /docker-entrypoint-initdb.d, recovering from a left-over interrupted initialisation; the operator's probe (pg_isready) passes;
#   psql as the database user reads the databases over TCP, the password is required off loopback;
#   SIGINT stops it cleanly; a second start reuses the data. What the backup Jobs run: pg_dump -Fc and
#   pg_restore --list of the catalog, sha256sum, and the image's curl as 999 through every S3
#   operation of hack/s3/s3_test.sh against versitygw (hack/s3/versitygw.sh's binary) on loopback.
# redis: as 999 with no capabilities, `sh -c` writes /tmp/redis.conf (requirepass from the
#   environment) and execs redis-server on it, /data a host folder; `REDISCLI_AUTH=... redis-cli ping`
#   answers PONG over a non-loopback address, no password gets NOAUTH and a wrong one WRONGPASS; the
#   commands of Tiled's streaming cache (INCR, HSET/EXPIRE/PUBLISH in MULTI/EXEC, GET, HMGET, a
#   SUBSCRIBE that gets the PUBLISH); SIGTERM stops it with exit 0 and nothing written to /data; the
#   same start as a uid with no passwd entry.
# tiled (tiled.tar at TiledVersion and tiled-<Oldest>.tar alike): `tiled --version` is the tag's
#   version, /bin/sh -ec works, and a server on a temporary catalog accepts an array and a table
#   written and read back through the Python client.
# versitygw: as 65532 with the pod's environment and arguments (--port :7070 ... posix /data, /data a
#   host folder), healthy on /health with no capabilities; hack/s3/s3_test.sh with the host's curl
#   passes against it (objects land in /data owned by 65532); SIGTERM stops it.
# metrics-server: as 65532 with no capabilities, `--version` is the tag and `--help` lists every flag
#   hack/node/cluster.sh passes (the node then proves it serves the metrics API).
# Needs root (chroot, namespaces). The image is recognised by its tag in manifest.json.
set -euo pipefail

say() { printf '[smoke] %s\n' "$*" >&2; }
die() { say "FAIL: $*"; exit 1; }
[[ $(id -u) == 0 ]] || die "run as root"
(($#)) || die "usage: smoke.sh IMAGE.tar..."

S3_TEST=$(cd "$(dirname "${BASH_SOURCE[0]}")/../s3" && pwd)/s3_test.sh
export S3_TEST
TMP=$(mktemp -d "${TMPDIR:-/tmp}/images-smoke.XXXXXX")
finish() {
	local rc=$?
	rm -rf "$TMP"
	[[ $rc == 0 ]] || say "FAIL (exit $rc)"
}
trap finish EXIT

# run_in ROOT CHECK [MOUNT]... runs the bash file CHECK in private mount, PID and network namespaces
# with ROOT mounted read-only on itself, /proc, a minimal /dev, a tmpfs /tmp and each MOUNT given as
# bind:SRC:DST, robind:SRC:DST or tmpfs::DST (inside ROOT). CHECK finds the root in $ROOT, a folder
# for logs in $LOGS and the function as999 (below).
run_in() {
	local root=$1 check=$2
	shift 2
	# shellcheck disable=SC2016 # expanded by the inner shell
	unshare --mount --propagation private --net --pid --fork --mount-proc -- /bin/bash -euo pipefail -c '
		root=$1 check=$2
		shift 2
		ip link set lo up
		# An address other than loopback, to reach a server as another pod would.
		ip addr add 10.77.0.1/32 dev lo
		mount --bind "$root" "$root"
		# A FROM-scratch image has no mount points of its own (runc makes them).
		mkdir -p "$root/proc" "$root/dev" "$root/tmp"
		mount -t proc proc "$root/proc"
		mount -t tmpfs -o mode=0755 tmpfs "$root/dev"
		for d in null zero random urandom; do touch "$root/dev/$d"; mount --bind "/dev/$d" "$root/dev/$d"; done
		mkdir "$root/dev/shm" && mount -t tmpfs -o mode=1777 tmpfs "$root/dev/shm"
		# The links runc creates in every container.
		ln -s /proc/self/fd "$root/dev/fd"
		ln -s /proc/self/fd/0 "$root/dev/stdin"
		ln -s /proc/self/fd/1 "$root/dev/stdout"
		ln -s /proc/self/fd/2 "$root/dev/stderr"
		mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"
		for m in "$@"; do
			IFS=: read -r type src dst <<<"$m"
			# Resolved inside the image, as runc does (/var/run is a link to /run).
			[ ! -x "$root/usr/bin/realpath" ] || dst=$(chroot "$root" /usr/bin/realpath -m "$dst")
			case $type in
			bind) mount --bind "$src" "$root$dst" ;;
			robind) mount --bind "$src" "$root$dst"; mount -o remount,bind,ro "$root$dst" ;;
			tmpfs) mount -t tmpfs -o mode=0777 tmpfs "$root$dst" ;;
			esac
		done
		mount -o remount,bind,ro "$root"
		ROOT=$root
		# Logs of the servers, on the image'"'"'s tmpfs /tmp (this shell is outside the chroot).
		LOGS=$root/tmp
		# as999 [ENV...] -- CMD...: in the image as uid/gid 999 with no capabilities and no_new_privs,
		# a clean environment (IMAGE_ENV, then ENV), like a container of the operator pods. With
		# AS999_EXEC=exec, in a background subshell, the job becomes the command itself (its PID is
		# the one a signal must reach, as PID 1 of a container).
		as999() {
			local env=()
			while [[ $1 != -- ]]; do env+=("$1"); shift; done
			shift
			${AS999_EXEC:-} chroot "$ROOT" /usr/bin/setpriv --reuid 999 --regid 999 --clear-groups --no-new-privs \
				--inh-caps=-all --bounding-set=-all -- /usr/bin/env -i $IMAGE_ENV "${env[@]}" "$@"
		}
		. "$check"
	' _ "$root" "$check" "$@"
}

smoke_postgres() {
	local root=$1 data=$TMP/pgvolume init=$TMP/pginit
	mkdir -p "$data" "$init"
	chown 999:999 "$data"
	# render.PostgresInitSQL(): the storage and auth databases beside POSTGRES_DB.
	printf 'CREATE DATABASE storage OWNER tiled;\nCREATE DATABASE auth OWNER tiled;\n' >"$init/10-tiled-databases.sql"
	# A sourced shell script, as the official image's users write them, changing the configuration.
	# shellcheck disable=SC2016 # for the entrypoint to expand
	printf 'echo "log_min_duration_statement = 12345" >>"$PGDATA/postgresql.conf"\n' >"$init/20-config.sh"
	# What an initialisation killed half-way leaves behind.
	mkdir -p "$data/pgdata.initdb-tmp/base"
	chown -R 999:999 "$data/pgdata.initdb-tmp"
	cat >"$TMP/postgres-check.sh" <<'CHECK'
IMAGE_ENV="PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 PGDATA=/var/lib/postgresql/data"
# The operator's container environment (render.Postgres).
PGENV=(POSTGRES_USER=tiled POSTGRES_DB=catalog POSTGRES_PASSWORD=s3cret-pw PGDATA=/var/lib/postgresql/data/pgdata)
start() {
	AS999_EXEC=exec as999 "${PGENV[@]}" -- docker-entrypoint.sh >>"$LOGS/pg.log" 2>&1 &
	PG=$!
	local i t0=$SECONDS
	for i in $(seq 1 240); do
		# The operator's readiness probe, verbatim.
		if as999 -- pg_isready -h 127.0.0.1 -U tiled -d catalog >/dev/null 2>&1; then
			echo "postgres: ready after about $((SECONDS - t0))s"
			return 0
		fi
		kill -0 $PG 2>/dev/null || { cat "$LOGS/pg.log"; echo "postgres exited"; return 1; }
		sleep 0.25
	done
	cat "$LOGS/pg.log"
	echo "postgres: not ready in 60s"
	return 1
}
stop() {
	# The image's stop signal, to the PID the entrypoint exec'ed into; bounded like a grace period.
	kill -INT $PG
	local i rc=0
	for i in $(seq 1 120); do
		kill -0 $PG 2>/dev/null || break
		sleep 0.25
	done
	if kill -0 $PG 2>/dev/null; then
		kill -KILL $PG
		cat "$LOGS/pg.log"
		echo "postgres still running 30s after SIGINT"
		return 1
	fi
	wait $PG || rc=$?
	[[ $rc == 0 ]] || { cat "$LOGS/pg.log"; echo "postgres exited $rc on SIGINT"; return 1; }
}
sql() { as999 PGPASSWORD=s3cret-pw -- psql -X -h "$1" -U tiled -d catalog -Atc "$2"; }
expect_log() { grep -qF -- "$1" "$LOGS/pg.log" || { cat "$LOGS/pg.log"; echo "log lacks: $1"; return 1; }; }

start
expect_log "removing /var/lib/postgresql/data/pgdata.initdb-tmp left by an interrupted initialisation"
expect_log "running /docker-entrypoint-initdb.d/10-tiled-databases.sql"
expect_log "sourcing /docker-entrypoint-initdb.d/20-config.sh"
[[ ! -e $ROOT/var/lib/postgresql/data/pgdata.initdb-tmp ]] || { echo "staging directory left"; exit 1; }
got=$(sql 10.77.0.1 "SELECT current_user || ' ' || string_agg(datname || ':' || pg_encoding_to_char(encoding), ',' ORDER BY datname) FROM pg_database WHERE datname NOT LIKE 'template%'")
echo "postgres: over TCP as $got"
[[ $got == "tiled auth:UTF8,catalog:UTF8,postgres:UTF8,storage:UTF8" ]] || { echo "unexpected databases"; exit 1; }
[[ $(sql 127.0.0.1 "SHOW log_min_duration_statement") == 12345ms ]] || { echo "the init script's setting is not in effect"; exit 1; }
sql 10.77.0.1 "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('still here')" >/dev/null
if as999 PGPASSWORD=wrong -- psql -X -h 10.77.0.1 -U tiled -d catalog -Atc "SELECT 1" >/dev/null 2>&1; then
	echo "a wrong password was accepted from a non-loopback address"
	exit 1
fi
stop
echo "--- second start" >>"$LOGS/pg.log"
start
expect_log "appears to contain a database; skipping initialization"
[[ $(sql 127.0.0.1 "SELECT v FROM kept") == "still here" ]] || { echo "data lost across a restart"; exit 1; }
# What a backup Job does with the catalog: a custom-format dump over TCP, its checksum, its listing.
as999 PGPASSWORD=s3cret-pw -- pg_dump -h 10.77.0.1 -U tiled -d catalog -Fc -f /tmp/catalog.dump
toc=$(as999 -- pg_restore --list /tmp/catalog.dump)
grep -q "TABLE DATA public kept" <<<"$toc" || { echo "pg_restore --list: no data of the table kept: $toc"; exit 1; }
sum=$(as999 -- sha256sum /tmp/catalog.dump)
[[ $sum =~ ^[0-9a-f]{64}\ \ /tmp/catalog.dump$ ]] || { echo "sha256sum printed: $sum"; exit 1; }
echo "postgres: pg_dump -Fc, pg_restore --list and sha256sum as 999"
stop
echo "postgres: stopped cleanly by SIGINT twice"
# The image's curl, as 999, signs every S3 request of the backups against versitygw on loopback; the
# files it sends and receives are in the image's /tmp.
v=$(as999 -- curl --version)
echo "postgres: ${v%%$'\n'*}"
mkdir -m 0777 "$ROOT/tmp/s3"
S3_CURL="chroot $ROOT /usr/bin/setpriv --reuid 999 --regid 999 --clear-groups --no-new-privs --inh-caps=-all --bounding-set=-all -- /usr/bin/env -i $IMAGE_ENV curl" \
	S3_WORK=$ROOT/tmp/s3 S3_WORK_AS=/tmp/s3 "$S3_TEST"
echo "postgres: the image's curl passed hack/s3/s3_test.sh"
CHECK
	run_in "$root" "$TMP/postgres-check.sh" "bind:$data:/var/lib/postgresql/data" "tmpfs::/var/run/postgresql" \
		"robind:$init:/docker-entrypoint-initdb.d"
	local mode
	mode=$(stat -c '%a %u:%g' "$data/pgdata")
	[[ $mode == "700 999:999" ]] || die "PGDATA is $mode, want 700 999:999"
}

smoke_redis() {
	local root=$1 data=$TMP/redisvolume
	# Like an emptyDir: root's, writable by all.
	mkdir -m 0777 "$data"
	cat >"$TMP/redis-check.sh" <<'CHECK'
IMAGE_ENV="PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8"
PW=smoke-redis-0123456789abcdef
# The shape of the operator's command: the password comes from the environment (a Secret) into a
# configuration file on the /tmp emptyDir, never onto redis-server's command line.
CMD='umask 077
printf "port %s\nbind * -::*\nprotected-mode yes\nrequirepass \"%s\"\ndir /data\nsave \"\"\nappendonly no\n" "$REDIS_PORT" "$REDIS_PASSWORD" >/tmp/redis.conf
exec redis-server /tmp/redis.conf'
# cli [ENV...] -- ARGS...: redis-cli of the image as 999.
cli() {
	local env=()
	while [[ $1 != -- ]]; do env+=("$1"); shift; done
	shift
	as999 "${env[@]}" -- redis-cli "$@"
}
# ready PID PORT LOG: the server answers PONG (with the password) within 10 s.
ready() {
	local i
	for i in $(seq 1 100); do
		[[ $(cli REDISCLI_AUTH=$PW -- -h 10.77.0.1 -p "$2" ping 2>/dev/null) == PONG ]] && return 0
		kill -0 "$1" 2>/dev/null || { cat "$3"; echo "redis-server exited"; return 1; }
		sleep 0.1
	done
	cat "$3"
	echo "redis-server: no PONG in 10s"
	return 1
}
# stop PID LOG: SIGTERM, as the kubelet sends it, ends it with status 0 within 10 s.
stop() {
	local i rc=0
	kill -TERM "$1"
	for i in $(seq 1 100); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
	if kill -0 "$1" 2>/dev/null; then kill -KILL "$1"; cat "$2"; echo "redis-server still running 10s after SIGTERM"; return 1; fi
	wait "$1" || rc=$?
	[[ $rc == 0 ]] || { cat "$2"; echo "redis-server exited $rc on SIGTERM"; return 1; }
}

AS999_EXEC=exec as999 REDIS_PASSWORD=$PW REDIS_PORT=6379 -- sh -c "$CMD" >"$LOGS/redis.log" 2>&1 &
R=$!
ready $R 6379 "$LOGS/redis.log"
# chroot, setpriv, env and sh each exec the next: $R is the server, with no privilege.
[[ $(readlink /proc/$R/exe) == "$ROOT/usr/bin/redis-check-rdb" ]] || { echo "PID $R is $(readlink /proc/$R/exe)"; exit 1; }
status=$(grep -E '^(Uid|Gid|CapEff|CapPrm|NoNewPrivs):' /proc/$R/status | tr -s '\t' ' ' | tr '\n' ';')
[[ $status == "Uid: 999 999 999 999;Gid: 999 999 999 999;CapPrm: 0000000000000000;CapEff: 0000000000000000;NoNewPrivs: 1;" ]] ||
	{ echo "redis-server runs with $status"; exit 1; }
grep -q "Redis version=7\.0\." "$LOGS/redis.log" || { cat "$LOGS/redis.log"; echo "not Redis 7.0"; exit 1; }
echo "redis: PONG with REDISCLI_AUTH over 10.77.0.1, as 999 with no capabilities"
# No password: the server answers every command with NOAUTH (redis-cli prints it, status 0).
got=$(cli -- -h 10.77.0.1 ping 2>&1 || true)
[[ $got == *NOAUTH* ]] || { echo "unauthenticated ping gave: $got"; exit 1; }
got=$(cli REDISCLI_AUTH=wrong -- -h 10.77.0.1 ping 2>&1 || true)
[[ $got == *WRONGPASS* ]] || { echo "a wrong password gave: $got"; exit 1; }
[[ $got != *PONG* ]] || { echo "a wrong password was answered PONG"; exit 1; }
echo "redis: NOAUTH without a password, WRONGPASS with a wrong one"
# What Tiled's streaming cache sends (tiled/server/streaming.py, 0.2.20): INCR of the node's
# sequence; a MULTI/EXEC pipeline with HSET of the record, EXPIREs and PUBLISH of the sequence number;
# GET and HMGET to read; SUBSCRIBE to the node's notifications. Key names as Tiled's.
r() { cli REDISCLI_AUTH=$PW -- -h 10.77.0.1 "$@"; }
AS999_EXEC=exec as999 REDISCLI_AUTH=$PW -- redis-cli -h 10.77.0.1 SUBSCRIBE notify:node >"$LOGS/sub.out" 2>&1 &
S=$!
for i in $(seq 1 100); do
	[[ $(r PUBSUB NUMSUB notify:node | tr '\n' ' ') == "notify:node 1 " ]] && break
	kill -0 $S 2>/dev/null || { cat "$LOGS/sub.out"; echo "redis-cli SUBSCRIBE exited"; exit 1; }
	sleep 0.1
done
[[ $(r INCR sequence:node) == 1 ]] || { echo "INCR"; exit 1; }
# redis-cli runs the lines of its standard input on one connection, as a pipeline does.
got=$(printf '%s\n' MULTI "HSET data:node:1 metadata '{\"a\":1}' payload xyz" "EXPIRE data:node:1 2592000" \
	"PUBLISH notify:node 1" "EXPIRE sequence:node 3600" EXEC | cli REDISCLI_AUTH=$PW -- -h 10.77.0.1 | tr '\n' ' ')
[[ $got == "OK QUEUED QUEUED QUEUED QUEUED 2 1 1 1 " ]] || { echo "MULTI/HSET/EXPIRE/PUBLISH/EXEC gave: $got"; exit 1; }
[[ $(r GET sequence:node) == 1 ]] || { echo "GET"; exit 1; }
[[ $(r HMGET data:node:1 metadata payload | tr '\n' ' ') == '{"a":1} xyz ' ]] || { echo "HMGET"; exit 1; }
ttl=$(r TTL data:node:1)
((ttl > 2591000 && ttl <= 2592000)) || { echo "TTL of the record is $ttl"; exit 1; }
for i in $(seq 1 100); do
	[[ $(tr '\n' ' ' <"$LOGS/sub.out") == *"message notify:node 1"* ]] && break
	sleep 0.1
done
kill -TERM $S; wait $S 2>/dev/null || true
[[ $(tr '\n' ' ' <"$LOGS/sub.out") == *"message notify:node 1"* ]] || { cat "$LOGS/sub.out"; echo "the subscriber got no message"; exit 1; }
echo "redis: INCR, MULTI/HSET/EXPIRE/PUBLISH/EXEC, GET, HMGET, TTL; the PUBLISH reached a SUBSCRIBE"
stop $R "$LOGS/redis.log"
[[ -z $(ls -A "$ROOT/data") ]] || { ls -la "$ROOT/data"; echo "redis-server wrote to /data with persistence off"; exit 1; }
echo "redis: stopped by SIGTERM with status 0, /data left empty"
# No entrypoint, no lookup of the user: any uid without a passwd entry starts it the same way.
grep -q '^[^:]*:[^:]*:4242:' "$ROOT/etc/passwd" && { echo "uid 4242 is in the image's passwd"; exit 1; }
# A new pod's /tmp emptyDir: the first server's configuration (mode 600, 999's) is not there.
rm -f "$ROOT/tmp/redis.conf"
exec chroot "$ROOT" /usr/bin/setpriv --reuid 4242 --regid 4242 --clear-groups --no-new-privs --inh-caps=-all \
	--bounding-set=-all -- /usr/bin/env -i $IMAGE_ENV REDIS_PASSWORD=$PW REDIS_PORT=6380 sh -c "$CMD" \
	>"$LOGS/redis4242.log" 2>&1 &
R=$!
ready $R 6380 "$LOGS/redis4242.log" || exit 1
stop $R "$LOGS/redis4242.log"
echo "redis: the same start as 4242:4242, a uid with no passwd entry"
CHECK
	run_in "$root" "$TMP/redis-check.sh" "bind:$data:/data"
}

smoke_tiled() {
	local root=$1
	cat >"$TMP/tiled-check.sh" <<'CHECK'
IMAGE_ENV="PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin VIRTUAL_ENV=/opt/venv PYTHONUNBUFFERED=1 LANG=C.UTF-8"
v=$(as999 HOME=/tmp -- tiled --version | tail -n1)
[[ $v == "$WANT" ]] || { echo "tiled --version says $v, want $WANT"; exit 1; }
echo "tiled --version: $v"
[[ $(as999 -- /bin/sh -ec 'echo $(id -u):$(id -g)') == 999:999 ]] || { echo "/bin/sh -ec as 999 failed"; exit 1; }
AS999_EXEC=exec as999 HOME=/tmp -- tiled serve catalog --temp --host 127.0.0.1 --port 8000 --api-key smokekey0123456789 >"$LOGS/tiled.log" 2>&1 &
T=$!
as999 HOME=/tmp TILED_PID=$T -- python - <<'PY' || { cat "$LOGS/tiled.log"; kill $T 2>/dev/null || true; exit 1; }
import os, time, numpy, pandas
from tiled.client import from_uri
start = time.monotonic()
while True:
    try:
        c = from_uri("http://127.0.0.1:8000", api_key="smokekey0123456789")
        break
    except Exception:
        if not os.path.exists(f"/proc/{os.environ['TILED_PID']}"):
            raise SystemExit("tiled serve exited")
        if time.monotonic() - start > 90:
            raise SystemExit("tiled did not answer in 90s")
        time.sleep(0.25)
print(f"tiled: answering after {time.monotonic() - start:.1f}s")
a = numpy.arange(12, dtype="float64").reshape(3, 4)
t = pandas.DataFrame({"motor": [1.0, 2.0], "det": [10, 20]})
c.write_array(a, key="a")
c.write_table(t, key="t")
assert (c["a"].read() == a).all(), "array differs"
assert c["t"].read().equals(t), "table differs"
print("tiled: array and table written and read back")
PY
kill -TERM $T
wait $T || true
echo "tiled: stopped by SIGTERM"
CHECK
	WANT=$2 run_in "$root" "$TMP/tiled-check.sh"
}

smoke_versitygw() {
	local root=$1 data=$TMP/s3volume
	# Like an emptyDir: root's, writable by all.
	mkdir -m 0777 "$data"
	cat >"$TMP/versitygw-check.sh" <<'CHECK'
# The image's environment and the pod's; the entrypoint with the pod's arguments, as 65532 with no
# capabilities left (chroot drops them with root) and no_new_privs.
env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
	ROOT_ACCESS_KEY=smoke-access ROOT_SECRET_KEY=smoke-secret/0123456789+ \
	setpriv --no-new-privs --inh-caps=-all -- chroot --userspec=65532:65532 --groups=65532 "$ROOT" \
	/usr/local/bin/versitygw --port :7070 --region us-east-1 --health /health posix /data >"$LOGS/vgw.log" 2>&1 &
V=$!
for i in $(seq 1 100); do
	curl -sf -o /dev/null http://127.0.0.1:7070/health && break
	kill -0 $V 2>/dev/null || { cat "$LOGS/vgw.log"; echo "versitygw exited"; exit 1; }
	sleep 0.1
done
curl -sf http://10.77.0.1:7070/health >/dev/null || { cat "$LOGS/vgw.log"; echo "versitygw not healthy in 10s"; exit 1; }
grep -q "Version v$WANT," "$LOGS/vgw.log" || { cat "$LOGS/vgw.log"; echo "versitygw is not v$WANT"; exit 1; }
# env, setpriv and chroot each exec the next: $V is the server.
[[ $(readlink /proc/$V/exe) == "$ROOT/usr/local/bin/versitygw" ]] || { echo "PID $V is $(readlink /proc/$V/exe)"; exit 1; }
status=$(grep -E '^(Uid|Gid|CapEff|CapPrm|NoNewPrivs):' /proc/$V/status | tr -s '\t' ' ' | tr '\n' ';')
[[ $status == "Uid: 65532 65532 65532 65532;Gid: 65532 65532 65532 65532;CapPrm: 0000000000000000;CapEff: 0000000000000000;NoNewPrivs: 1;" ]] ||
	{ echo "versitygw runs with $status"; exit 1; }
echo "versitygw: healthy as 65532, no capabilities"
S3_ENDPOINT=http://10.77.0.1:7070 S3_ACCESS_KEY=smoke-access S3_SECRET_KEY=smoke-secret/0123456789+ S3_DATA=$VOLUME "$S3_TEST" ||
	{ cat "$LOGS/vgw.log"; exit 1; }
kill -TERM $V
for i in $(seq 1 100); do kill -0 $V 2>/dev/null || break; sleep 0.1; done
kill -0 $V 2>/dev/null && { kill -KILL $V; echo "versitygw still running 10s after SIGTERM"; exit 1; }
echo "versitygw: stopped by SIGTERM"
CHECK
	WANT=$2 VOLUME=$data run_in "$root" "$TMP/versitygw-check.sh" "bind:$data:/data"
	# What the server wrote (its buckets; the test's objects were deleted) is the pod user's.
	local bad
	bad=$(find "$data" -mindepth 1 -maxdepth 1 ! -user 65532 -printf '%p %u\n' | head -n 3)
	[[ -z $bad ]] || die "versitygw wrote files not owned by 65532: $bad"
}

smoke_metrics_server() {
	local root=$1
	cat >"$TMP/metrics-server-check.sh" <<'CHECK'
# ms ARGS...: the entrypoint as 65532 with no capabilities and no_new_privs, the image's environment.
ms() {
	env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
		setpriv --no-new-privs --inh-caps=-all -- chroot --userspec=65532:65532 --groups=65532 "$ROOT" /metrics-server "$@"
}
v=$(ms --version)
[[ $v == "$WANT" ]] || { echo "metrics-server --version says '$v', want $WANT"; exit 1; }
echo "metrics-server: --version $v"
ms --help >"$LOGS/help.txt" 2>&1 || { cat "$LOGS/help.txt"; echo "metrics-server --help failed"; exit 1; }
# Every flag hack/node/cluster.sh passes must exist in this release.
for f in --secure-port --tls-cert-file --tls-private-key-file --kubelet-preferred-address-types \
	--kubelet-use-node-status-port --kubelet-certificate-authority --metric-resolution --profiling; do
	grep -qE -- "^ +$f[ =]" "$LOGS/help.txt" || { echo "metrics-server --help lacks $f"; exit 1; }
done
echo "metrics-server: --help lists the node's flags"
CHECK
	WANT=$2 run_in "$root" "$TMP/metrics-server-check.sh"
}

for tarball in "$@"; do
	[[ -f $tarball ]] || die "$tarball: no such file"
	name=$(basename "$tarball" .tar)
	root=$TMP/$name/rootfs
	t=$SECONDS
	manifest=$(tar -xOf "$tarball" manifest.json)
	layer=$(grep -o '"Layers":\["[^"]*"' <<<"$manifest" | cut -d'"' -f4)
	tag=$(grep -o '"RepoTags":\["[^"]*"' <<<"$manifest" | cut -d'"' -f4)
	[[ -n $layer && -n $tag ]] || die "$tarball: no layer or tag in manifest.json"
	mkdir -p "$root"
	tar -xOf "$tarball" "$layer" | tar --numeric-owner -xpf - -C "$root"
	say "$tag: unpacked in $((SECONDS - t))s"
	# Plain calls: errexit stops the script at the first failing step (a `|| die` would disable it).
	case $tag in
	docker.io/local/postgres:*) smoke_postgres "$root" ;;
	docker.io/local/redis:*) smoke_redis "$root" ;;
	docker.io/local/tiled:*) smoke_tiled "$root" "${tag##*:}" ;;
	docker.io/local/versitygw:*) smoke_versitygw "$root" "${tag##*:}" ;;
	docker.io/local/metrics-server:*) smoke_metrics_server "$root" "${tag##*:}" ;;
	*) die "$tarball: no smoke test for $tag" ;;
	esac
	say "$tag: passed in $((SECONDS - t))s"
	rm -rf "${TMP:?}/$name"
done
say "all passed"
