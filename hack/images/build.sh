#!/usr/bin/env bash
# build.sh builds the container images a real node needs, without any registry or container engine,
# as docker-archive tarballs that `ctr -n k8s.io images import` (and `docker load`) read:
#
#   ${TILED_OPERATOR_CACHE:-${XDG_CACHE_HOME:-~/.cache}/tiled-operator}/images/current/
#     pause.tar           docker.io/local/pause:3.10            static Go sandbox program, FROM scratch
#     coredns.tar         docker.io/local/coredns:v1.15.0       CoreDNS from the Go module proxy, FROM scratch
#     tiled-operator.tar  docker.io/local/tiled-operator:e2e    ./cmd/manager of this checkout, static base
#     tiled-operator-prime.tar      ...:prime      the same code as another version (main.version <v>-prime)
#     tiled-operator-annotated.tar  ...:annotated  the same code built to render one more Tiled pod
#                                                  annotation (render.buildPodAnnotation, BUILD_ANNOTATION)
#     tiled-operator-previous.tar   ...:previous   ./cmd/manager of the previous release (hack/previous-release),
#                                                  its source tree kept in releases/<commit>/ for its config/default
#     tiled.tar           docker.io/local/tiled:<TiledVersion>  Debian bookworm + tiled[server] from PyPI
#     tiled-<Oldest>.tar  docker.io/local/tiled:<Oldest>        the same recipe at the oldest supported Tiled
#     postgres.tar        docker.io/local/postgres:15           Debian bookworm + postgresql-15, curl, ca-certificates
#     redis.tar           docker.io/local/redis:7.0             Debian bookworm + redis-server, redis-tools (the streaming cache)
#     versitygw.tar       docker.io/local/versitygw:1.8.0       versitygw (S3 gateway) from the Go module proxy, static base
#     metrics-server.tar  docker.io/local/metrics-server:v0.8.0 metrics-server from the Go module proxy, static base
#     prometheus.tar      docker.io/local/prometheus:3.16.0     the Prometheus server from the Go module proxy, static base
#
# TiledVersion is read from expansion/builtins.go and Oldest from tiledversion/versions.go (e.g.
# tiled-0.2.14.tar, docker.io/local/tiled:0.2.14, for the upgrade tests).
#
#   hack/images/build.sh             build what changed, reuse the rest, check every archive
#   hack/images/build.sh --smoke     also run hack/images/smoke.sh on every image (not only rebuilt ones)
#
# Each image except the manager (and its prime and annotated builds) is cached by a hash of its inputs (its recipe in this script, its
# files under hack/images/, mkimage, the pinned versions) and reused while they are unchanged; the
# manager is rebuilt on every run (Go's build cache makes that a few seconds). The CoreDNS,
# versitygw, metrics-server and Prometheus binaries are cached in tools/<name>/<version>-<recipe
# hash>/ (hack/lib/gotool.sh), built by hack/node/coredns.sh (which hack/node/build.sh uses too),
# hack/s3/versitygw.sh (which host-side tests use too), hack/node/metrics-server.sh (which
# hack/node/cluster.sh reads the tag from) and hack/prometheus/prometheus.sh (beside promtool). The
# Debian base
# (debootstrap --variant=minbase) is built once and shared by the two Tiled images, PostgreSQL and
# Redis.
# Archives are written by hack/images/mkimage (one layer per image, see docs/images.md).
# Needs root (debootstrap, chroot, file owners in the layers), go, and network access to the Go
# module proxy, deb.debian.org and PyPI on a cold cache only.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
# shellcheck source=hack/lib/cache.sh
source hack/lib/cache.sh
CACHE_ROOT=$(tiled_cache_root)
CACHE=$CACHE_ROOT/images
OUT=$CACHE/current
STORE=$CACHE/store

# Pinned versions. The image names and tags are a contract with hack/node (and the e2e profile).
SUITE=bookworm
MIRROR=http://deb.debian.org/debian
SECURITY_MIRROR=http://deb.debian.org/debian-security
DEBOOTSTRAP_VERSION=1.0.128+nmu2+deb12u2
PAUSE_TAG=3.10
# COREDNS_VERSION and coredns_build, shared with hack/node/build.sh.
# shellcheck source=hack/node/coredns.sh
source hack/node/coredns.sh
PG_MAJOR=15
# The tag of the Redis image: the major.minor of Debian's redis-server in bookworm(-security), which
# the build checks (docs/images.md: why Redis 7.0 from Debian).
REDIS_VERSION=7.0
# VERSITYGW_VERSION and versitygw_build, shared with host-side tests.
# shellcheck source=hack/s3/versitygw.sh
source hack/s3/versitygw.sh
# METRICS_SERVER_VERSION and metrics_server_build, shared with hack/node (the node deploys the image).
# shellcheck source=hack/node/metrics-server.sh
source hack/node/metrics-server.sh
# PROMETHEUS_VERSION and prometheus_build, shared with nothing else yet (the e2e case 14 deploys the image).
# shellcheck source=hack/prometheus/prometheus.sh
source hack/prometheus/prometheus.sh
# Set from expansion.TiledVersion and tiledversion.Oldest below, never written here.
TILED_VERSION=
TILED_OLDEST=

SMOKE_ALL=false
for a in "$@"; do
	case $a in
	--smoke) SMOKE_ALL=true ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "build.sh: unknown argument '$a' (try --help)" >&2; exit 2 ;;
	esac
done

START=$SECONDS
say() { printf '[images %3ds] %s\n' "$((SECONDS - START))" "$*" >&2; }
die() { say "FAIL: $*"; exit 1; }

# --- prerequisites -------------------------------------------------------------------------------
[[ $(id -u) == 0 ]] || die "run as root: debootstrap and chroot need it, and the layers keep file owners"
for c in go tar unshare chroot flock sha256sum mount; do
	command -v "$c" >/dev/null || die "'$c' not found on PATH"
done
if [[ $(dpkg-query -W -f='${Version}' debootstrap 2>/dev/null || true) != "$DEBOOTSTRAP_VERSION" ]]; then
	say "installing debootstrap=$DEBOOTSTRAP_VERSION from Debian"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "debootstrap=$DEBOOTSTRAP_VERSION" >/dev/null ||
		die "apt-get could not install debootstrap=$DEBOOTSTRAP_VERSION (run apt-get update?)"
fi

mkdir -p "$CACHE" "$OUT" "$STORE"
# One build at a time per cache: a second caller waits, then finds the first one's images.
exec 9>"$CACHE/.lock"
if ! flock -n 9; then
	say "another build.sh is running on $CACHE; waiting for it"
	flock 9
fi

# Read from the source rather than with `go run ./hack/tiled/version`, which would first compile the
# expansion package and its Kubernetes dependencies; the image check compares it with the compiled
# constant.
TILED_VERSION=$(sed -n 's/^const TiledVersion = "\([^"]*\)"$/\1/p' expansion/builtins.go)
[[ $TILED_VERSION =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] ||
	die "cannot read TiledVersion from expansion/builtins.go (const TiledVersion = \"x.y.z\"), got '$TILED_VERSION'"
# The oldest supported Tiled, the second Tiled image (current/tiled-<version>.tar), read the same way.
TILED_OLDEST=$(sed -n 's/^const Oldest = "\([^"]*\)"$/\1/p' tiledversion/versions.go 2>/dev/null || true)
[[ $TILED_OLDEST =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] ||
	die "cannot read Oldest from tiledversion/versions.go (const Oldest = \"x.y.z\"), got '$TILED_OLDEST'"
TILED_OLD=tiled-$TILED_OLDEST
GO_VERSION=$(go env GOVERSION)

TMP=$(mktemp -d "$CACHE/.build.XXXXXX")
# kill_tree PID...: each process and, first, its descendants (a job's go build or chroot).
kill_tree() {
	local p c
	for p in "$@"; do
		for c in $(ps -o pid= --ppid "$p" 2>/dev/null); do kill_tree "$c"; done
		kill "$p" 2>/dev/null || true
	done
}
cleanup() {
	# Only this script's own background jobs and their children, by PID.
	# shellcheck disable=SC2046 # one PID per word
	kill_tree $(jobs -pr)
	wait 2>/dev/null || true
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# run LOG CMD... runs a step with its output and duration in LOG, printed only when it fails.
run() {
	local log=$1 t=$SECONDS
	shift
	if ! "$@" >>"$log" 2>&1; then
		tail -n 40 "$log" >&2
		return 1
	fi
	printf '[step %ds] %s\n' "$((SECONDS - t))" "$*" >>"$log"
}

# chroot_run ROOTFS [SRC:DST]... -- CMD... runs CMD in ROOTFS with a clean environment, /proc and the
# host's /dev mounted and each SRC bind-mounted at DST, all in a private mount namespace: the mounts
# vanish with the command, whatever happens to it, and never appear on the host.
chroot_run() {
	local r=$1
	shift
	local binds=()
	while [[ $1 != -- ]]; do
		binds+=("$1")
		shift
	done
	shift
	# shellcheck disable=SC2016 # expanded by the inner shell
	unshare --mount --propagation private -- /bin/bash -euc '
		r=$1; shift
		mount -t proc proc "$r/proc"
		mount --rbind /dev "$r/dev"
		while [ "$1" != -- ]; do
			mkdir -p "$r${1#*:}"
			mount --bind "${1%%:*}" "$r${1#*:}"
			shift
		done
		shift
		exec chroot "$r" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
			HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"
	' _ "$r" "${binds[@]}" -- "$@"
}

# key PARTS... is a short hash of the given strings and of the files named by PATHS (global array).
key() {
	{
		printf '%s\n' "$@"
		for f in "${KEY_FILES[@]}"; do
			printf '%s\n' "$f"
			cat "$f"
		done
	} | sha256sum | cut -c1-16
}
MKIMAGE_SRC=(hack/images/mkimage/main.go hack/images/mkimage/image.go)

# publish NAME FILE makes FILE current/NAME.tar (a hard link, replaced atomically) and keeps the two
# most recently used versions of NAME in the store: two checkouts with different recipes (a branch
# and main) then do not evict each other's images on every run.
publish() {
	local name=$1 file=$2 old
	touch "$file"
	if [[ ! $file -ef $OUT/$name.tar ]]; then
		ln -f "$file" "$OUT/.$name.tar.tmp"
		mv -f "$OUT/.$name.tar.tmp" "$OUT/$name.tar"
	fi
	# Exactly NAME-<16 hex>.tar: tiled-*.tar would also match the archives of tiled-<version>.
	# shellcheck disable=SC2012 # names are ours: NAME-HEXKEY.tar
	for old in $(ls -t "$STORE/$name"-????????????????.tar | tail -n +3); do
		rm -f "${old%.tar}".*
	done
}

# --- Go programs ----------------------------------------------------------------------------------
gobuild() { CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$@"; }

# The operator-upgrade tests (test/e2e) install the previous release, then this checkout, then a
# "prime" build of it (the same code as another version: nothing it renders may differ), then an
# "annotated" build whose Tiled pod templates carry one more annotation (a change of what a release
# renders, which must roll within each cluster's budget).
BUILD_ANNOTATION=e2e.tiled.blueskyproject.io/build=annotated
MANAGER_VERSION=$(git describe --always --dirty 2>/dev/null || echo devel)
# managerbuild OUT VERSION [ANNOTATION] builds ./cmd/manager of the current directory.
managerbuild() {
	local x="-X main.version=$2"
	[[ -z ${3:-} ]] || x+=" -X github.com/bluesky/tiled-operator/render.buildPodAnnotation=$3"
	CGO_ENABLED=0 go build -trimpath -ldflags="-s -w $x" -o "$1" ./cmd/manager
}

# build_go builds the binaries of the three static images (run in the background).
build_go() {
	mkdir -p "$TMP/pause" "$TMP/manager" "$TMP/coredns"
	gobuild "$TMP/pause/pause" ./hack/images/pause
	managerbuild "$TMP/manager/manager" "$MANAGER_VERSION"
	managerbuild "$TMP/manager/manager-prime" "$MANAGER_VERSION-prime"
	managerbuild "$TMP/manager/manager-annotated" "$MANAGER_VERSION-annotated" "$BUILD_ANNOTATION"
	local cdns
	cdns=$(coredns_build)
	cp "$cdns" "$TMP/coredns/coredns"
}

# --- Debian base root filesystem -----------------------------------------------------------------
# A debootstrap minbase of bookworm with bookworm-updates and bookworm-security enabled and applied,
# and package lists kept (the images' apt-get update is then incremental), as a tarball.
build_base() {
	local r=$1 log=$2
	mkdir -p "$CACHE/debootstrap-debs"
	run "$log" debootstrap --variant=minbase --cache-dir="$CACHE/debootstrap-debs" "$SUITE" "$r" "$MIRROR"
	rm -f "$r"/etc/apt/sources.list
	cat >"$r/etc/apt/sources.list.d/debian.sources" <<-EOF
		Types: deb
		URIs: $MIRROR
		Suites: $SUITE $SUITE-updates
		Components: main
		Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

		Types: deb
		URIs: $SECURITY_MIRROR
		Suites: $SUITE-security
		Components: main
		Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
	EOF
	cp /etc/resolv.conf "$r/etc/resolv.conf"
	run "$log" chroot_run "$r" -- apt-get update -q
	run "$log" chroot_run "$r" -- apt-get -y -q -o Dpkg::Options::=--force-confold upgrade
	run "$log" chroot_run "$r" -- apt-get clean
	: >"$r/etc/resolv.conf"
	echo localhost >"$r/etc/hostname"
	rm -rf "$r"/var/log/* "$r"/var/cache/apt/*.bin
}
BASE_KEY=$(KEY_FILES=() && key "$SUITE" "$MIRROR" "$SECURITY_MIRROR" "$DEBOOTSTRAP_VERSION" "$(declare -f build_base chroot_run)")
BASE=$CACHE/rootfs/$SUITE-minbase-$BASE_KEY.tar

# --- shared steps of the Debian-based images ----------------------------------------------------
# prepare_rootfs DIR unpacks the base into DIR, ready for apt-get in a chroot.
prepare_rootfs() {
	local r=$1
	mkdir -p "$r"
	tar --numeric-owner -xpf "$BASE" -C "$r"
	cp /etc/resolv.conf "$r/etc/resolv.conf"
	# Packages' maintainer scripts must not start services in the chroot.
	printf '#!/bin/sh\nexit 101\n' >"$r/usr/sbin/policy-rc.d"
	chmod 0755 "$r/usr/sbin/policy-rc.d"
}

# apt_install ROOTFS LOG PKGS... installs packages without recommends, downloads cached per image.
apt_install() {
	local r=$1 log=$2 name
	shift 2
	name=$(basename "$(dirname "$r")")
	mkdir -p "$CACHE/debs/$name/partial"
	run "$log" chroot_run "$r" "$CACHE/debs/$name:/var/cache/apt/archives" -- apt-get update -q
	run "$log" chroot_run "$r" "$CACHE/debs/$name:/var/cache/apt/archives" -- \
		apt-get install -y -q --no-install-recommends -o Dpkg::Options::=--force-confold "$@"
}

# finalize_rootfs ROOTFS drops what a container does not use: package lists and caches, logs,
# documentation, man pages and translations, the chroot's resolver and policy, /dev and /tmp contents.
finalize_rootfs() {
	local r=${1:?}
	# Never the host's directories: only a tree below this build's temporary folder.
	[[ $r == "$TMP"/* && -d $r/etc && -d $r/usr ]] || { echo "finalize_rootfs: refusing '$r'" >&2; return 1; }
	rm -f "$r/usr/sbin/policy-rc.d"
	: >"$r/etc/resolv.conf"
	rm -rf "${r:?}"/var/lib/apt/lists/* "${r:?}"/var/cache/apt/* "${r:?}"/var/cache/debconf/*-old \
		"${r:?}"/var/log/* "${r:?}"/usr/share/doc/* "${r:?}"/usr/share/man/* "${r:?}"/usr/share/info/* \
		"${r:?}"/usr/share/locale/* "${r:?}"/usr/share/lintian "${r:?}"/dev/* "${r:?}"/proc/* \
		"${r:?}"/tmp/* "${r:?}"/tmp/.[!.]* "${r:?}"/root/.cache
	mkdir -p "$r/var/lib/apt/lists/partial" "$r/var/cache/apt/archives/partial"
	chmod 1777 "$r/tmp"
	# Record what is in the image, beside it in the cache.
	# shellcheck disable=SC2016 # dpkg-query's format, not the shell's
	chroot "$r" dpkg-query -W -f='${Package} ${Version}\n' >"$(dirname "$r")/packages.txt"
}

# --- PostgreSQL ------------------------------------------------------------------------------------
# Debian's postgresql-$PG_MAJOR with the official image's contract (hack/images/postgres/).
build_postgres() {
	local d=$1 r=$1/rootfs log=$1/log
	prepare_rootfs "$r"
	# The official image's uid and gid, before the package would pick a system uid.
	chroot "$r" groupadd --system --gid 999 postgres
	chroot "$r" useradd --system --uid 999 --gid 999 --home-dir /var/lib/postgresql --shell /bin/bash postgres
	# No cluster in the image: the entrypoint creates one in PGDATA on first start.
	mkdir -p "$r/etc/postgresql-common"
	echo "create_main_cluster = false" >"$r/etc/postgresql-common/createcluster.conf"
	# curl (with --aws-sigv4) and the CA bundle for the backup Jobs, which send dumps to S3.
	apt_install "$r" "$log" "postgresql-$PG_MAJOR" curl ca-certificates
	[[ -z $(ls -A "$r/etc/postgresql/" 2>/dev/null) ]] || { echo "a cluster was created in the image" >>"$log"; return 1; }
	local bin=/usr/lib/postgresql/$PG_MAJOR/bin f
	for f in $bin/{postgres,initdb,pg_isready,psql,pg_dump,pg_restore} /usr/bin/{sha256sum,curl}; do
		[[ -x $r$f ]] || { echo "$f is not in the image" >>"$log"; return 1; }
	done
	[[ -s $r/etc/ssl/certs/ca-certificates.crt ]] || { echo "no /etc/ssl/certs/ca-certificates.crt" >>"$log"; return 1; }
	# Like the official image: a new cluster listens on every address.
	sed -ri "s!^#?(listen_addresses)\s*=\s*\S+.*!\1 = '*'!" "$r/usr/share/postgresql/$PG_MAJOR/postgresql.conf.sample"
	grep -q "^listen_addresses = '\*'" "$r/usr/share/postgresql/$PG_MAJOR/postgresql.conf.sample" ||
		{ echo "could not set listen_addresses in postgresql.conf.sample" >>"$log"; return 1; }
	install -d -o 999 -g 999 -m 3777 "$r/var/run/postgresql"
	install -d -o 999 -g 999 -m 1777 "$r/var/lib/postgresql/data"
	install -d -m 0755 "$r/docker-entrypoint-initdb.d"
	install -m 0755 hack/images/postgres/docker-entrypoint.sh "$r/usr/local/bin/docker-entrypoint.sh"
	finalize_rootfs "$r"
	"$TMP/mkimage" -rootfs "$r" -tag "docker.io/local/postgres:$PG_MAJOR" -o "$d/image.tar" \
		-user 999:999 \
		-env "PATH=$bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
		-env LANG=C.UTF-8 -env "PG_MAJOR=$PG_MAJOR" -env PGDATA=/var/lib/postgresql/data \
		-entrypoint '["docker-entrypoint.sh"]' -cmd '["postgres"]' -stopsignal SIGINT -expose 5432/tcp \
		-label "org.opencontainers.image.description=PostgreSQL $PG_MAJOR from Debian $SUITE, official image's entrypoint contract (tiled-operator hack/images)" \
		>>"$log"
}

# --- Redis -----------------------------------------------------------------------------------------
# Debian's redis-server (BSD-3-Clause 7.0, security-supported in bookworm-security) for the streaming
# cache of each Tiled instance. The operator runs it as 999:999 with a read-only root, emptyDirs at
# /data and /tmp, and `sh -c '... exec redis-server /tmp/redis.conf'`: no entrypoint, nothing that
# needs root or a passwd entry; /bin/sh, redis-server and redis-cli on PATH.
build_redis() {
	local d=$1 r=$1/rootfs log=$1/log f v
	prepare_rootfs "$r"
	# The official image's uid and gid, before the package would pick a system uid (the name only
	# shows in ps; nothing looks it up).
	chroot "$r" groupadd --system --gid 999 redis
	chroot "$r" useradd --system --uid 999 --gid 999 --home-dir /data --no-create-home --shell /usr/sbin/nologin redis
	apt_install "$r" "$log" redis-server redis-tools
	for f in /usr/bin/redis-server /usr/bin/redis-cli /bin/sh; do
		[[ -x $r$f ]] || { echo "$f is not in the image" >>"$log"; return 1; }
	done
	# The tag must say what is installed: redis-server --version prints "Redis server v=7.0.15 sha=...".
	v=$(chroot_run "$r" -- redis-server --version)
	echo "$v" >>"$log"
	[[ $v == *" v=$REDIS_VERSION."* ]] || { echo "redis-server is not $REDIS_VERSION: $v" >>"$log"; return 1; }
	chroot_run "$r" -- redis-cli --version >>"$log"
	# The data directory of the official image, for a container run without the operator's emptyDir.
	install -d -o 999 -g 999 -m 0755 "$r/data"
	# finalize_rootfs empties /usr/share/doc; Redis's BSD-3-Clause licence (and Debian's record of
	# it) stays with its binaries.
	cp -p "$r/usr/share/doc/redis-server/copyright" "$d/copyright"
	finalize_rootfs "$r"
	mkdir -p "$r/usr/share/doc/redis-server"
	cp -p "$d/copyright" "$r/usr/share/doc/redis-server/copyright"
	"$TMP/mkimage" -rootfs "$r" -tag "docker.io/local/redis:$REDIS_VERSION" -o "$d/image.tar" \
		-user 999:999 \
		-env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin -env LANG=C.UTF-8 \
		-cmd '["redis-server"]' -workdir /data -expose 6379/tcp \
		-label "org.opencontainers.image.description=Redis $REDIS_VERSION (BSD-3-Clause) from Debian $SUITE and $SUITE-security (tiled-operator hack/images)" \
		>>"$log"
}

# --- Tiled -------------------------------------------------------------------------------------------
# build_tiled DIR VERSION: tiled[server]==VERSION from PyPI in /opt/venv (TiledVersion for tiled.tar,
# Oldest for tiled-Oldest.tar); the server extra brings the client and the libraries a client pod
# writes and reads arrays and tables with (numpy, pandas, pyarrow).
# The wheels are kept in a wheelhouse per Tiled version (images/wheels/tiled-VERSION): a rebuild
# installs the same versions offline, and only a new Tiled version (or an emptied wheelhouse) asks
# PyPI again. pip's own HTTP cache is no use here: the responses on this network are not cacheable.
# Wheelhouses of versions no longer built are removed once the builds are done (below).
build_tiled() {
	local d=$1 v=${2:?build_tiled DIR VERSION} r=$1/rootfs log=$1/log
	local wheels=$CACHE/wheels/tiled-$v
	local pipenv=(env PIP_CERT=/tmp/host-ca.crt PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
		PIP_DEFAULT_TIMEOUT=180 PIP_NO_INPUT=1)
	prepare_rootfs "$r"
	apt_install "$r" "$log" python3 python3-venv ca-certificates
	chroot "$r" groupadd --system --gid 999 tiled
	chroot "$r" useradd --system --uid 999 --gid 999 --create-home --home-dir /home/tiled --shell /bin/sh tiled
	# pip trusts the host's CA bundle (the network path to PyPI may need it); it leaves with the build.
	cp /etc/ssl/certs/ca-certificates.crt "$r/tmp/host-ca.crt"
	mkdir -p "$wheels"
	run "$log" chroot_run "$r" -- python3 -m venv /opt/venv
	if ! chroot_run "$r" "$wheels:/var/cache/wheels" -- "${pipenv[@]}" /opt/venv/bin/pip install -q \
		--no-index --find-links /var/cache/wheels "tiled[server]==$v" >>"$log" 2>&1; then
		echo "(the wheelhouse $wheels lacks something: downloading from PyPI)" >>"$log"
		run "$log" chroot_run "$r" "$wheels:/var/cache/wheels" -- "${pipenv[@]}" /opt/venv/bin/pip download -q \
			--dest /var/cache/wheels "tiled[server]==$v"
		run "$log" chroot_run "$r" "$wheels:/var/cache/wheels" -- "${pipenv[@]}" /opt/venv/bin/pip install -q \
			--no-index --find-links /var/cache/wheels "tiled[server]==$v"
	fi
	rm -f "$r/tmp/host-ca.crt"
	rmdir "$r/var/cache/wheels"
	# Test suites of the dependencies (about 110 MB; never imported at run time). Tiled's own stay.
	find "$r/opt/venv/lib" -depth -type d -name tests -path '*/site-packages/*' ! -path '*/site-packages/tiled/*' \
		-exec rm -rf {} +
	# What the operator's pods and an e2e client pod use must import, and so must every package
	# whose tests were removed.
	run "$log" chroot_run "$r" -- /opt/venv/bin/python -c '
import sys
import numpy, pandas, pyarrow, httpx, sqlalchemy, asyncpg, uvicorn, duckdb
import numba, xarray, dask.array, dask.dataframe, h5py
import tiled, tiled.server.app
from tiled.client import from_uri
print("tiled", tiled.__version__, "numpy", numpy.__version__, "pandas", pandas.__version__, "pyarrow", pyarrow.__version__)
assert tiled.__version__ == sys.argv[1], f"tiled.__version__ is {tiled.__version__}, want {sys.argv[1]}"' "$v"
	chroot "$r" /opt/venv/bin/pip freeze --all >"$d/pip-freeze.txt"
	finalize_rootfs "$r"
	"$TMP/mkimage" -rootfs "$r" -tag "docker.io/local/tiled:$v" -o "$d/image.tar" \
		-user 999:999 \
		-env "PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
		-env VIRTUAL_ENV=/opt/venv -env PYTHONUNBUFFERED=1 -env LANG=C.UTF-8 \
		-cmd '["tiled"]' -workdir /home/tiled -expose 8000/tcp \
		-label "org.opencontainers.image.description=tiled[server]==$v on Debian $SUITE (tiled-operator hack/images)" \
		>>"$log"
}

# --- static images -------------------------------------------------------------------------------------
build_pause() {
	local d=$1
	mkdir -p "$d/rootfs"
	install -m 0755 "$TMP/pause/pause" "$d/rootfs/pause"
	"$TMP/mkimage" -rootfs "$d/rootfs" -tag "docker.io/local/pause:$PAUSE_TAG" -o "$d/image.tar" \
		-user 65535:65535 -entrypoint '["/pause"]' >>"$d/log"
}

# CoreDNS as the upstream image runs it, as nonroot 65532 (hack/node has it listen on 1053: port 53
# would need the file capability upstream sets, and mkimage writes no extended attributes).
build_coredns() {
	local d=$1
	mkdir -p "$d/rootfs"
	install -m 0755 "$TMP/coredns/coredns" "$d/rootfs/coredns"
	"$TMP/mkimage" -rootfs "$d/rootfs" -tag "docker.io/local/coredns:$COREDNS_VERSION" -o "$d/image.tar" \
		-user 65532:65532 -entrypoint '["/coredns"]' -expose 1053/tcp -expose 1053/udp >>"$d/log"
}

# nonroot_files ROOTFS writes what distroless static:nonroot has besides the program: passwd/group with
# nonroot 65532, its home, a sticky /tmp.
nonroot_files() {
	local r=$1
	mkdir -p "$r/etc" "$r/tmp" "$r/home/nonroot"
	printf '%s\n' 'root:x:0:0:root:/root:/sbin/nologin' 'nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin' \
		'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' >"$r/etc/passwd"
	printf '%s\n' 'root:x:0:' 'nobody:x:65534:' 'nonroot:x:65532:' >"$r/etc/group"
	chmod 0644 "$r/etc/passwd" "$r/etc/group"
	chmod 1777 "$r/tmp"
	chown 65532:65532 "$r/home/nonroot"
	chmod 0700 "$r/home/nonroot"
}

# versitygw, an S3-compatible server with a posix backend, for the backup tests: the static binary of
# hack/s3/versitygw.sh (built there on a cold cache, a few minutes) on the nonroot base, as 65532. A pod
# runs it with ROOT_ACCESS_KEY and ROOT_SECRET_KEY in its environment and the arguments
# `--port :7070 --region us-east-1 --health /health posix /data`, /data a volume (the image's /data,
# owned by 65532, serves when there is none).
build_versitygw() {
	local d=$1 r=$1/rootfs bin
	bin=$(versitygw_build 2>>"$d/log")
	nonroot_files "$r"
	install -D -m 0755 "$bin" "$r/usr/local/bin/versitygw"
	install -d -o 65532 -g 65532 -m 0755 "$r/data"
	"$TMP/mkimage" -rootfs "$r" -tag "docker.io/local/versitygw:${VERSITYGW_VERSION#v}" -o "$d/image.tar" \
		-user 65532:65532 -entrypoint '["/usr/local/bin/versitygw"]' -workdir / -expose 7070/tcp \
		-env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
		-label "org.opencontainers.image.description=versitygw $VERSITYGW_VERSION (github.com/versity/versitygw, Apache-2.0), static, nonroot (tiled-operator hack/images)" \
		>>"$d/log"
}

# metrics-server, the resource metrics API of the node (hack/node/cluster.sh deploys it; the
# HorizontalPodAutoscalers read it): the static binary of hack/node/metrics-server.sh on the nonroot
# base, as 65532, entrypoint /metrics-server as upstream's image. The pod gives every argument; it
# writes nothing but what --cert-dir names (a /tmp emptyDir) when it has no certificate of its own.
build_metrics_server() {
	local d=$1 r=$1/rootfs bin
	bin=$(metrics_server_build 2>>"$d/log")
	nonroot_files "$r"
	install -m 0755 "$bin" "$r/metrics-server"
	"$TMP/mkimage" -rootfs "$r" -tag "docker.io/local/metrics-server:$METRICS_SERVER_VERSION" -o "$d/image.tar" \
		-user 65532:65532 -entrypoint '["/metrics-server"]' -workdir / -expose 4443/tcp \
		-env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
		-label "org.opencontainers.image.description=metrics-server $METRICS_SERVER_VERSION (sigs.k8s.io/metrics-server, Apache-2.0), static, nonroot (tiled-operator hack/images)" \
		>>"$d/log"
}

# Prometheus, the server the e2e case 14 checks config/components/prometheus against: the static
# binary of hack/prometheus/prometheus.sh (Kubernetes service discovery only, no web UI assets: the
# HTTP API serves) on the nonroot base, as 65532, at /bin/prometheus as upstream's image, with
# /prometheus (owned by 65532) for the TSDB. The pod gives every argument (--config.file ...).
build_prometheus() {
	local d=$1 r=$1/rootfs bin
	bin=$(prometheus_build 2>>"$d/log")
	nonroot_files "$r"
	install -D -m 0755 "$bin" "$r/bin/prometheus"
	install -d -o 65532 -g 65532 -m 0755 "$r/prometheus"
	"$TMP/mkimage" -rootfs "$r" -tag "docker.io/local/prometheus:$PROMETHEUS_VERSION" -o "$d/image.tar" \
		-user 65532:65532 -entrypoint '["/bin/prometheus"]' -workdir /prometheus -expose 9090/tcp \
		-env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
		-label "org.opencontainers.image.description=Prometheus $PROMETHEUS_VERSION (github.com/prometheus/prometheus $PROMETHEUS_MODULE_VERSION, Apache-2.0), static, nonroot, kubernetes_sd only, no UI assets (tiled-operator hack/images)" \
		>>"$d/log"
}

# The project's Dockerfile final stage (distroless static:nonroot) rebuilt from scratch: the manager
# on the nonroot files; numeric USER so that the kubelet can check runAsNonRoot.
# manager_image DIR BINARY TAG DESCRIPTION.
manager_image() {
	local d=$1 r=$1/rootfs
	nonroot_files "$r"
	install -m 0755 "$2" "$r/manager"
	"$TMP/mkimage" -rootfs "$r" -tag "docker.io/local/tiled-operator:$3" -o "$d/image.tar" \
		-user 65532:65532 -entrypoint '["/manager"]' -workdir / \
		-env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
		-label org.opencontainers.image.source=https://github.com/bluesky/tiled-operator \
		-label "org.opencontainers.image.description=tiled-operator manager $4" \
		>>"$d/log"
}
# build_manager DIR: this checkout's manager and its prime and annotated builds, three archives in DIR.
build_manager() {
	local d=$1 from
	from="built from $(git rev-parse --short HEAD 2>/dev/null || echo 'a checkout')$(git diff --quiet HEAD 2>/dev/null || echo ' with local changes')"
	mkdir -p "$d/e2e" "$d/prime" "$d/annotated"
	manager_image "$d/e2e" "$TMP/manager/manager" e2e "$from"
	manager_image "$d/prime" "$TMP/manager/manager-prime" prime "$from, as version $MANAGER_VERSION-prime"
	manager_image "$d/annotated" "$TMP/manager/manager-annotated" annotated "$from, rendering the pod annotation $BUILD_ANNOTATION"
	cat "$d"/*/log >>"$d/log"
}

# The previous release's source tree, extracted once per commit from this repository's history into
# releases/<commit>/ (a shallow clone without the commit finds it there, when a build on this machine
# put it there before).
extract_previous() {
	local dst=$CACHE_ROOT/releases/$PREVIOUS_COMMIT
	[[ ! -f $dst/.complete ]] || return 0
	git cat-file -e "$PREVIOUS_COMMIT^{commit}" 2>/dev/null ||
		die "the previous release $PREVIOUS_COMMIT (hack/previous-release) is neither in this clone's history (a shallow clone? git fetch --unshallow) nor in $dst"
	rm -rf "$dst.tmp"
	mkdir -p "$dst.tmp"
	git archive "$PREVIOUS_COMMIT" | tar -x -C "$dst.tmp"
	touch "$dst.tmp/.complete"
	rm -rf "$dst"
	mv "$dst.tmp" "$dst"
}
# build_tiled_operator_previous DIR: the previous release's manager, as its own release would build it.
build_tiled_operator_previous() {
	local d=$1 tree=$CACHE_ROOT/releases/$PREVIOUS_COMMIT
	mkdir -p "$d"
	(cd "$tree" && managerbuild "$d/manager" "${PREVIOUS_COMMIT:0:12}") >>"$d/log" 2>&1
	manager_image "$d" "$d/manager" previous "of the previous release ${PREVIOUS_COMMIT:0:12} (hack/previous-release)"
}

# --- which images to build ---------------------------------------------------------------------------
# Only what shapes an image's content is hashed (not the helpers that log, hash or publish).
DEB_COMMON="$BASE_KEY $(declare -f chroot_run prepare_rootfs apt_install finalize_rootfs)"
declare -A KEYS
KEY_FILES=("${MKIMAGE_SRC[@]}" hack/images/pause/main.go)
KEYS[pause]=pause-$(key "$GO_VERSION" "$PAUSE_TAG" "$(declare -f build_pause)")
KEY_FILES=("${MKIMAGE_SRC[@]}")
KEYS[coredns]=coredns-$(key "$(coredns_recipe gotool_key)" "$(declare -f build_coredns)")
# The binaries come from hack/lib/gotool.sh's cache, keyed VERSION-RECIPEHASH (gotool_key): that key
# stands for the binary's whole recipe (pin, dependency raises, tags, flags).
KEYS[versitygw]=versitygw-$(key "$(versitygw_recipe gotool_key)" "$(declare -f build_versitygw nonroot_files)")
KEYS[metrics-server]=metrics-server-$(key "$(metrics_server_recipe gotool_key)" "$(declare -f build_metrics_server nonroot_files)")
KEYS[prometheus]=prometheus-$(key "$(prometheus_recipe gotool_key prometheus "$PROMETHEUS_TAGS")" "$(declare -f build_prometheus nonroot_files)")
KEY_FILES=("${MKIMAGE_SRC[@]}" hack/images/postgres/docker-entrypoint.sh)
KEYS[postgres]=postgres-$(key "$DEB_COMMON" "$PG_MAJOR" "$(declare -f build_postgres)")
KEY_FILES=("${MKIMAGE_SRC[@]}")
KEYS[redis]=redis-$(key "$DEB_COMMON" "$REDIS_VERSION" "$(declare -f build_redis)")
KEY_FILES=("${MKIMAGE_SRC[@]}")
KEYS[tiled]=tiled-$(key "$DEB_COMMON" "$TILED_VERSION" "$(declare -f build_tiled)")
KEYS[$TILED_OLD]=$TILED_OLD-$(key "$DEB_COMMON" "$TILED_OLDEST" "$(declare -f build_tiled)")
# The Debian images to build. When Oldest is TiledVersion, tiled-<Oldest>.tar is tiled.tar's archive
# under a second name (nothing is built twice).
DEBIAN_IMAGES=(postgres redis tiled)
PREVIOUS_COMMIT=$(sed -n '1{/^[0-9a-f]\{40\}$/p}' hack/previous-release)
[[ -n $PREVIOUS_COMMIT ]] || die "hack/previous-release: its first line must be a 40-hex commit"
KEYS[tiled-operator-previous]=tiled-operator-previous-$(key "$GO_VERSION" "$PREVIOUS_COMMIT" "$(declare -f build_tiled_operator_previous managerbuild manager_image nonroot_files)")
[[ $TILED_OLDEST == "$TILED_VERSION" ]] || DEBIAN_IMAGES+=("$TILED_OLD")

# build NAME [RECIPE ARGS...] builds one cached image into the store unless it is there, then
# publishes it; RECIPE (build_NAME when not given) is called as RECIPE DIR ARGS... It runs as a
# background job (`build NAME &`, then wait) so that errexit holds in the recipes.
build() {
	local name=$1 file=$STORE/${KEYS[$1]}.tar d=$TMP/$1
	shift
	(($#)) || set -- "build_$name"
	if [[ -s $file ]]; then
		say "$name: reusing ${KEYS[$name]}"
	else
		local t=$SECONDS
		say "$name: building ${KEYS[$name]}"
		mkdir -p "$d"
		"$1" "$d" "${@:2}"
		for extra in packages.txt pip-freeze.txt; do
			[[ ! -f $d/$extra ]] || mv "$d/$extra" "$STORE/${KEYS[$name]}.$extra"
		done
		mv "$d/image.tar" "$file"
		touch "$TMP/built.$name"
		say "$name: built ${KEYS[$name]} in $((SECONDS - t))s, $(du -h "$file" | cut -f1)"
	fi
	publish "$name" "$file"
}
# finish NAME PID waits for a build job and stops everything with its log when it failed.
finish() {
	wait "$2" && return 0
	[[ ! -f $TMP/$1/log ]] || tail -n 40 "$TMP/$1/log" >&2
	die "$1 image (full log: $TMP/$1/log, kept until this script exits)"
}

# --- build ----------------------------------------------------------------------------------------
go build -o "$TMP/mkimage" ./hack/images/mkimage || die "cannot build hack/images/mkimage"
say "building pause, the manager and CoreDNS $COREDNS_VERSION (go $GO_VERSION) in the background"
build_go >"$TMP/go.log" 2>&1 &
go_pid=$!
# versitygw: a cold build is one long go build (hack/lib/gotool.sh; nice 19, one core), beside everything else.
build versitygw &
versitygw_pid=$!
# metrics-server: likewise one go build on a cold cache (the Kubernetes 1.33 libraries).
build metrics-server build_metrics_server &
metrics_server_pid=$!
# Prometheus: likewise one go build on a cold cache (a few minutes, shares promtool's module cache).
build prometheus build_prometheus &
prometheus_pid=$!
# The previous release's manager: a full build of another tree on a cold cache, once per commit.
extract_previous
build tiled-operator-previous build_tiled_operator_previous &
previous_pid=$!

# The Debian base, only when a Debian image is to be built.
need_base=false
for n in "${DEBIAN_IMAGES[@]}"; do
	[[ -s $STORE/${KEYS[$n]}.tar ]] || need_base=true
done
if $need_base; then
	if [[ -s $BASE ]]; then
		say "Debian base: reusing $BASE"
	else
		say "Debian base: debootstrap --variant=minbase $SUITE from $MIRROR (a few minutes, once)"
		mkdir -p "$CACHE/rootfs" "$TMP/base"
		# In the background so that errexit holds inside the function (it is ignored under || ).
		build_base "$TMP/base/rootfs" "$TMP/base.log" &
		wait $! || { tail -n 40 "$TMP/base.log" >&2; die "building the Debian base failed (log above)"; }
		tar --numeric-owner -C "$TMP/base/rootfs" -cf "$BASE.tmp" .
		mv "$BASE.tmp" "$BASE"
		# The two newest bases stay (see publish).
		# shellcheck disable=SC2012 # names are ours
		ls -t "$CACHE/rootfs/$SUITE-minbase-"*.tar | tail -n +3 | xargs -r rm -f
		rm -rf "$TMP/base"
		say "Debian base: $(du -h "$BASE" | cut -f1)"
	fi
fi

# The Debian images build side by side (their time is mostly downloads and unpacking), and beside
# the Go programs. Each Tiled image has its own wheelhouse and Debian download cache (debs/<name>),
# so the two never share a lock.
build postgres &
pg_pid=$!
build redis &
redis_pid=$!
build tiled build_tiled "$TILED_VERSION" &
tiled_pid=$!
if [[ $TILED_OLDEST != "$TILED_VERSION" ]]; then
	build "$TILED_OLD" build_tiled "$TILED_OLDEST" &
	tiled_old_pid=$!
fi
wait "$go_pid" || { cat "$TMP/go.log" >&2; die "building the Go programs failed"; }
say "Go programs built"
build pause &
finish pause $!
build coredns &
finish coredns $!
# The manager: rebuilt every time, not cached.
mkdir -p "$TMP/manager-image"
build_manager "$TMP/manager-image" &
wait $! || { cat "$TMP/manager-image/log" >&2; die "tiled-operator image"; }
for v in e2e prime annotated; do
	f=tiled-operator-$v.tar
	[[ $v != e2e ]] || f=tiled-operator.tar
	mv "$TMP/manager-image/$v/image.tar" "$OUT/$f"
	say "tiled-operator:$v: built, $(du -h "$OUT/$f" | cut -f1)"
done
finish tiled-operator-previous "$previous_pid"
finish versitygw "$versitygw_pid"
finish metrics-server "$metrics_server_pid"
finish prometheus "$prometheus_pid"
finish postgres "$pg_pid"
finish redis "$redis_pid"
finish tiled "$tiled_pid"
if [[ $TILED_OLDEST != "$TILED_VERSION" ]]; then
	finish "$TILED_OLD" "$tiled_old_pid"
else
	publish "$TILED_OLD" "$STORE/${KEYS[tiled]}.tar"
fi
# A former Oldest's archive would still be imported by the node: only the current one stays (the
# pattern leaves tiled-operator.tar alone). So do the wheelhouses of the two versions built here.
for f in "$OUT"/tiled-[0-9]*.tar; do
	[[ ! -e $f || $f == "$OUT/$TILED_OLD.tar" ]] || rm -f "$f"
done
[[ ! -d $CACHE/wheels ]] ||
	find "$CACHE/wheels" -mindepth 1 -maxdepth 1 ! -name "tiled-$TILED_VERSION" ! -name "tiled-$TILED_OLDEST" -exec rm -rf {} +

# --- checks -----------------------------------------------------------------------------------------
say "checking the archives (go test -tags images ./hack/images/)"
TILED_IMAGES_DIR=$OUT TILED_VERSION=$TILED_VERSION TILED_OLDEST_VERSION=$TILED_OLDEST VERSITYGW_VERSION=$VERSITYGW_VERSION \
	METRICS_SERVER_VERSION=$METRICS_SERVER_VERSION PROMETHEUS_VERSION=$PROMETHEUS_VERSION \
	go test -tags images -count=1 ./hack/images/ >"$TMP/check.log" 2>&1 ||
	{ cat "$TMP/check.log" >&2; die "the archives in $OUT failed their checks"; }
smoke=()
for n in versitygw metrics-server "${DEBIAN_IMAGES[@]}"; do
	if $SMOKE_ALL || [[ -f $TMP/built.$n ]]; then smoke+=("$OUT/$n.tar"); fi
done
if ((${#smoke[@]})); then
	say "smoke test: ${smoke[*]##*/}"
	hack/images/smoke.sh "${smoke[@]}" || die "smoke test failed"
fi
for f in "$OUT"/*.tar; do
	say "$(basename "$f"): $(du -h "$f" | cut -f1)"
done
say "done in $((SECONDS - START))s: $OUT"
