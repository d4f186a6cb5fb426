# shellcheck shell=sh disable=SC2059,SC2086,SC2013,SC2015,SC3012
# dbtool.sh backup|restore|list: the backups of a TiledInstance's databases, run by the backup and
# restore Jobs on the PostgreSQL image (pg_dump, pg_restore, psql, sha256sum, curl). POSIX sh.
#
# A backup NAME is one custom-format pg_dump per database (catalog.dump, storage.dump, auth.dump),
# SHA256SUMS and manifest.json. It is whole once manifest.json exists on the target, which is written
# last: on a directory target the backup is written as .NAME.partial and renamed to NAME; on an S3
# target the manifest is uploaded after every other file. A half-written backup is never listed,
# pruned as a whole one, nor restored.
#
# Environment:
#   TARGET          dir (BACKUP_ROOT, a mounted claim) or s3 (S3_ENDPOINT, S3_BUCKET, S3_PREFIX,
#                   S3_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY; CURL_CA_BUNDLE optionally)
#   BACKUP          the backup to write (empty: the UTC time now) or to restore ("latest" or a name)
#   DUMP_CATALOG_URI, DUMP_STORAGE_URI, DUMP_AUTH_URI  the databases (libpq or SQLAlchemy URIs);
#                   PGUSER and PGPASSWORD when the URIs carry no credentials
#   INSTANCE        namespace/name, recorded in the manifest
#   TILED_VERSION   backup: the version recorded; restore: a backup from a newer version is refused
#   RETAIN_COUNT, RETAIN_DAYS  backup: prune to this many whole backups / none older (newest kept)
#   RESTORE_IF_EMPTY  restore: only into an empty catalog database; one holding tables is kept
#   WORK            a scratch directory (S3: dumps are staged there)
#
# A run that could not reach the S3 endpoint at all (no connection, no answer: not an answer such as
# 403 or 404) exits with status 75 (EX_TEMPFAIL) before it has changed anything: the Jobs' pod
# failure policy runs such a pod again, and fails the Job at once on any other status.
#
# The last line of a run is a JSON report written to /dev/termination-log, which the operator reads:
# a backup's manifest (plus "available", the whole backups after pruning as NAME:BYTES, newest
# first), {"restored":NAME,...} or {"skipped":NAME,...}; a failure writes its reason there instead.
set -eu

say() { echo "[tiled-operator] $*" >&2; }
# The log's own descriptor: what is said while a request's errors go to a file (s3curl) reaches it.
exec 3>&2
# The termination log is written when it can be (the kubelet's file); where it cannot, the shell's own
# "cannot create" must not become the log's last line, which FallbackToLogsOnError would quote.
report() { { printf '%s' "$1" > /dev/termination-log; } 2> /dev/null || true; printf '%s\n' "$1"; }
fail() {
	say "$*"
	{ printf '%s' "$*" | head -c 3900 > /dev/termination-log; } 2> /dev/null || true
	exit 1
}

# tempfail: as fail, with status 75: the S3 endpoint did not answer, and nothing was changed.
tempfail() {
	say "$*"
	{ printf '%s' "$*" | head -c 3900 > /dev/termination-log; } 2> /dev/null || true
	exit 75
}

mode=${1:-}
WORK=${WORK:-/tmp/dbtool}
mkdir -p "$WORK"
target=${TARGET:-dir}

# since T: the seconds from T (date +%s.%N) to now, to the hundredth.
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }'; }

# libpq reads postgresql://, not SQLAlchemy's postgresql+asyncpg://.
libpq() { printf '%s' "$1" | sed -E 's#^postgres(ql)?\+[a-z0-9_]+://#postgresql://#'; }

uri_of() {
	case $1 in
	catalog) v=${DUMP_CATALOG_URI:-} ;;
	storage) v=${DUMP_STORAGE_URI:-} ;;
	auth) v=${DUMP_AUTH_URI:-} ;;
	*) v= ;;
	esac
	[ -z "$v" ] || libpq "$v"
}

where() {
	case $target in
	dir) echo "$BACKUP_ROOT" ;;
	s3) echo "s3://$S3_BUCKET/$S3_PREFIX at $S3_ENDPOINT" ;;
	esac
}

# --- S3: path-style requests signed with AWS Signature Version 4 by curl -------------------------

# urlenc S: S percent-encoded as SigV4 wants (unreserved characters kept; "/" kept when $2 is "path").
urlenc() {
	printf '%s' "$1" | od -An -tx1 -v | tr -s ' \n' '  ' | tr ' ' '\n' | while read -r h; do
		[ -n "$h" ] || continue
		c=$(printf "\\$(printf %o 0x$h)")
		case $c in
		[A-Za-z0-9._~-]) printf '%s' "$c" ;;
		/) if [ "${2:-}" = path ]; then printf /; else printf %%2F; fi ;;
		*) printf '%%%s' "$(echo "$h" | tr a-f A-F)" ;;
		esac
	done
}

# unanswered RC: curl's exit status RC says that no answer came from the endpoint: a name not
# resolved, a connection not made or cut, a timeout, a TLS handshake that failed.
unanswered() {
	case $1 in
	6 | 7 | 18 | 28 | 35 | 52 | 55 | 56) return 0 ;;
	esac
	return 1
}

# s3curl URL [curl args...]: one signed request. curl tries a timeout, a refused connection, 408,
# 429 and 5xx again; any other request that got no answer (an unreachable address, a connection
# reset, an empty reply: a Service whose endpoints or a network policy's rules are not ready yet) is
# tried again here, S3_ATTEMPTS times in all, waiting S3_RETRY_SECONDS more each time (about
# 75 s). An answer (403, 404) fails at once.
s3curl() {
	u=$1
	shift
	n=1
	while :; do
		rc=0
		curl --silent --show-error --fail --retry 3 --retry-connrefused --connect-timeout 20 --max-time 3600 \
			--aws-sigv4 "aws:amz:${S3_REGION:-us-east-1}:s3" --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" \
			-H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "$@" "$u" || rc=$?
		if [ "$rc" -eq 0 ] || ! unanswered "$rc" || [ "$n" -ge "${S3_ATTEMPTS:-6}" ]; then
			return "$rc"
		fi
		pause=$((n * ${S3_RETRY_SECONDS:-5}))
		say "no answer from $S3_ENDPOINT (curl exit $rc); trying again in $pause s" 2>&3
		sleep "$pause"
		n=$((n + 1))
	done
}

# s3 METHOD KEY [curl args...]: one request for the object KEY of S3_BUCKET.
s3() {
	m=$1 k=$2
	shift 2
	s3curl "${S3_ENDPOINT%/}/$S3_BUCKET/$(urlenc "$k" path)" -X "$m" "$@"
}

# s3_or_fail RC MESSAGE: after a request that failed with curl's status RC (its errors in WORK/err),
# fails with MESSAGE when the endpoint answered, and to be run again when it did not.
s3_or_fail() {
	why=$(tail -n 1 "$WORK/err" | tail -c 300) # the last attempt's
	if unanswered "$1"; then
		tempfail "$(where) did not answer (curl exit $1: $why): a Job's pod that stops here is run again"
	fi
	fail "$2 ($why)"
}

# s3_list: "KEY SIZE" for every object under S3_PREFIX/, following continuation tokens.
s3_list() {
	token=
	while :; do
		q="list-type=2&prefix=$(urlenc "$S3_PREFIX/")"
		[ -z "$token" ] || q="continuation-token=$(urlenc "$token")&$q"
		rc=0
		page=$(s3curl "${S3_ENDPOINT%/}/$S3_BUCKET?$q" 2> "$WORK/err") || rc=$?
		[ "$rc" -eq 0 ] ||
			s3_or_fail "$rc" "cannot list s3://$S3_BUCKET/$S3_PREFIX/ at $S3_ENDPOINT (is the bucket there, are the credentials right?)"
		# One line a key; the page's last one ends with a newline too (sed would not add it to a last
		# line without one, and the next page's first key would run on into it and be lost).
		printf '%s\n' "$page" | sed 's#<Contents>#\n<Contents>#g' | sed -n 's#.*<Key>\([^<]*\)</Key>.*<Size>\([0-9]*\)</Size>.*#\1 \2#p'
		case $page in
		*"<IsTruncated>true</IsTruncated>"*)
			token=$(printf '%s' "$page" | sed -n 's#.*<NextContinuationToken>\([^<]*\)</NextContinuationToken>.*#\1#p')
			[ -n "$token" ] || break
			;;
		*) break ;;
		esac
	done
}

# --- the target: whole backups, and their files ---------------------------------------------------

# load reads the target's listing (S3: into WORK/keys), in the main shell so that a failure ends the
# run with its own message; backups and partials read it.
load() {
	[ "$target" != s3 ] || s3_list > "$WORK/keys"
}

# backups: "NAME BYTES" of every whole backup on the target (as load read it), newest first.
backups() {
	case $target in
	dir)
		[ -d "$BACKUP_ROOT" ] || return 0
		for d in "$BACKUP_ROOT"/*/; do
			[ -f "$d/manifest.json" ] || continue
			n=$(basename "$d")
			b=0
			for f in "$d"*.dump; do [ -f "$f" ] && b=$((b + $(stat -c %s "$f"))); done
			echo "$n $b"
		done | sort -r
		;;
	s3)
		awk -v p="$S3_PREFIX/" '
			index($1, p) == 1 { rest = substr($1, length(p) + 1); n = split(rest, a, "/"); if (n != 2) next
				if (a[2] == "manifest.json") whole[a[1]] = 1; else if (a[2] ~ /\.dump$/) bytes[a[1]] += $2 }
			END { for (b in whole) print b, bytes[b] + 0 }' "$WORK/keys" | sort -r
		;;
	esac
}

# partials: names of backups begun and not whole (a Job that died), for pruning.
partials() {
	case $target in
	dir) for d in "$BACKUP_ROOT"/.*.partial; do [ -d "$d" ] && basename "$d" .partial | sed 's/^\.//'; done; true ;;
	s3)
		awk -v p="$S3_PREFIX/" '
			index($1, p) == 1 { rest = substr($1, length(p) + 1); n = split(rest, a, "/"); if (n != 2) next
				seen[a[1]] = 1; if (a[2] == "manifest.json") whole[a[1]] = 1 }
			END { for (b in seen) if (!(b in whole)) print b }' "$WORK/keys"
		;;
	esac
}

# remove NAME [partial]: delete a backup from the target.
remove() {
	case $target in
	dir) if [ "${2:-}" = partial ]; then rm -rf "$BACKUP_ROOT/.$1.partial"; else rm -rf "${BACKUP_ROOT:?}/${1:?}"; fi ;;
	s3)
		# The manifest first: from then on the backup is not whole, whatever else is left.
		s3 DELETE "$S3_PREFIX/$1/manifest.json" -o /dev/null || true
		awk -v p="$S3_PREFIX/$1/" 'index($1, p) == 1 { print $1 }' "$WORK/keys" | while read -r k; do
			s3 DELETE "$k" -o /dev/null
		done
		;;
	esac
}

# fetch NAME: a directory holding backup NAME's files (S3: downloaded into WORK).
fetch() {
	case $target in
	dir)
		[ -f "$BACKUP_ROOT/$1/manifest.json" ] || fail "backup $1 not found: $BACKUP_ROOT/$1/manifest.json does not exist (no whole backup of that name on $(where))"
		echo "$BACKUP_ROOT/$1"
		;;
	s3)
		d=$WORK/restore/$1
		rm -rf "$d"
		mkdir -p "$d"
		rc=0
		s3 GET "$S3_PREFIX/$1/manifest.json" -o "$d/manifest.json" 2> "$WORK/err" || rc=$?
		[ "$rc" -eq 0 ] || s3_or_fail "$rc" "backup $1 not found: s3://$S3_BUCKET/$S3_PREFIX/$1/manifest.json cannot be read"
		s3 GET "$S3_PREFIX/$1/SHA256SUMS" -o "$d/SHA256SUMS" 2> "$WORK/err" || rc=$?
		[ "$rc" -eq 0 ] || s3_or_fail "$rc" "backup $1 is corrupt: its SHA256SUMS cannot be read"
		for f in $(awk '{print $2}' "$d/SHA256SUMS"); do
			case $f in *.dump) ;; *) fail "backup $1 is corrupt: SHA256SUMS names $f" ;; esac
			s3 GET "$S3_PREFIX/$1/$f" -o "$d/$f" 2> "$WORK/err" || rc=$?
			[ "$rc" -eq 0 ] || s3_or_fail "$rc" "backup $1 is corrupt: $f cannot be read"
		done
		echo "$d"
		;;
	esac
}

# wait_for URI: until the database answers (a new instance's PostgreSQL starts with the Job).
wait_for() {
	i=0
	until pg_isready --quiet --dbname "$1"; do
		i=$((i + 1))
		[ "$i" -lt 300 ] || fail "the database did not answer in 300 s"
		sleep 1
	done
}

revision() {
	psql --no-psqlrc --quiet --tuples-only --no-align --dbname "$1" \
		-c "SELECT version_num FROM alembic_version" 2> /dev/null | head -n 1 || true
}

# --- backup --------------------------------------------------------------------------------------

# dump DB URI: the database's custom-format dump to $out/DB.dump, its SHA-256 (a SHA256SUMS line)
# to WORK/DB.sum and its Alembic revision to WORK/DB.rev; a failure leaves WORK/DB.failed, and
# pg_dump's or tee's errors in WORK/DB.err. Run in the background, one per database.
dump() {
	rm -f "$WORK/$1.failed" "$WORK/$1.sum" "$WORK/$1.rev"
	say "dumping the $1 database"
	{ pg_dump --format=custom --no-owner --no-privileges --dbname "$2" 2> "$WORK/$1.err" || : > "$WORK/$1.failed"; } |
		{ tee "$out/$1.dump" 2>> "$WORK/$1.err" || : > "$WORK/$1.failed"; } |
		sha256sum | sed "s/ -\$/ $1.dump/" > "$WORK/$1.sum.part"
	if [ -e "$WORK/$1.failed" ]; then
		return 1
	fi
	mv "$WORK/$1.sum.part" "$WORK/$1.sum"
	revision "$2" > "$WORK/$1.rev"
}


do_backup() {
	name=${BACKUP:-$(date -u +%Y%m%dT%H%M%SZ)}
	start=$(date +%s)
	case $target in
	dir)
		mkdir -p "$BACKUP_ROOT" || fail "cannot create $BACKUP_ROOT on the backup claim"
		if [ -f "$BACKUP_ROOT/$name/manifest.json" ]; then
			say "backup $name exists already"
			report "$(tr -d '\n' < "$BACKUP_ROOT/$name/manifest.json")"
			return
		fi
		out=$BACKUP_ROOT/.$name.partial
		;;
	s3)
		# As on a directory: a whole backup of that name is kept, never written over (a Job that
		# died part way through rewriting it would leave it corrupt).
		if s3 GET "$S3_PREFIX/$name/manifest.json" --retry 0 -o "$WORK/manifest.json" 2> /dev/null; then
			say "backup $name exists already"
			report "$(tr -d '\n' < "$WORK/manifest.json")"
			return
		fi
		out=$WORK/$name
		;;
	esac
	rm -rf "$out"
	mkdir -p "$out"
	# The databases are dumped at once, each checksummed as it is written (not read again after):
	# their dumps are then also nearer one moment than one after another.
	files='' revs='' pids=''
	for db in catalog storage auth; do
		uri=$(uri_of $db)
		[ -n "$uri" ] || continue
		wait_for "$uri"
		files="$files $db.dump"
		dump "$db" "$uri" &
		pids="$pids $!"
	done
	[ -n "$files" ] || fail "no database to back up"
	for p in $pids; do wait "$p" || true; done
	: > "$out/SHA256SUMS"
	for f in $files; do
		db=${f%.dump}
		[ ! -e "$WORK/$db.failed" ] || fail "pg_dump of the $db database failed: $(tail -c 400 "$WORK/$db.err")"
		[ -s "$WORK/$db.sum" ] || fail "the dump of the $db database was not written whole to $out: $(tail -c 400 "$WORK/$db.err")"
		cat "$WORK/$db.sum" >> "$out/SHA256SUMS"
		rev=$(cat "$WORK/$db.rev")
		[ -z "$rev" ] || revs="$revs${revs:+,}\"$db\":\"$rev\""
	done
	entries='' total=0
	for f in $files; do
		size=$(stat -c %s "$out/$f")
		sum=$(grep " $f\$" "$out/SHA256SUMS" | cut -d' ' -f1)
		total=$((total + size))
		entries="$entries${entries:+,}{\"database\":\"${f%.dump}\",\"file\":\"$f\",\"bytes\":$size,\"sha256\":\"$sum\"}"
	done
	manifest=$(printf '{"name":"%s","instance":"%s","tiledVersion":"%s","revisions":{%s},"time":"%s","seconds":%s,"bytes":%s,"files":[%s]}' \
		"$name" "${INSTANCE:-}" "${TILED_VERSION:-}" "$revs" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(($(date +%s) - start))" "$total" "$entries")
	printf '%s\n' "$manifest" > "$out/manifest.json"
	case $target in
	dir)
		# The backup's own files reach the disk before the rename makes it whole (not a sync of
		# every filesystem of the node, which waits for whatever else is being written).
		sync "$out"/* "$out" 2> /dev/null || sync
		# What is left of a backup of that name (not whole: its removal was cut short) goes first, or
		# mv would move the new one into it.
		rm -rf "${BACKUP_ROOT:?}/$name"
		mv "$out" "$BACKUP_ROOT/$name"
		;;
	s3)
		# A backup not whole is never listed nor restored: one cut short here is written again whole
		# by the Job's next pod, or pruned a day later.
		rc=0
		for f in $files SHA256SUMS manifest.json; do
			s3 PUT "$S3_PREFIX/$name/$f" -T "$out/$f" -o /dev/null 2> "$WORK/err" || rc=$?
			[ "$rc" -eq 0 ] || s3_or_fail "$rc" "uploading $f of backup $name to $(where) failed"
		done
		rm -rf "$out"
		;;
	esac
	say "backup $name is whole ($total bytes) on $(where)"
	prune "$name"
	load
	avail=$(backups | head -n 100 | awk '{printf "%s%s:%s", (NR > 1 ? "," : ""), $1, $2}')
	report "${manifest%\}},\"available\":\"$avail\"}"
}

# prune NEW: keep RETAIN_COUNT whole backups and none older than RETAIN_DAYS; NEW (just written) and
# the newest are always kept. Partial backups older than a day (a Job that died) go too.
prune() {
	[ -n "${RETAIN_COUNT:-}${RETAIN_DAYS:-}" ] || return 0
	cutoff=
	if [ -n "${RETAIN_DAYS:-}" ]; then
		cutoff=$(date -u -d "@$(($(date +%s) - RETAIN_DAYS * 86400))" +%Y%m%dT%H%M%SZ)
	fi
	stale=$(date -u -d "@$(($(date +%s) - 86400))" +%Y%m%dT%H%M%SZ)
	load
	i=0
	backups | while read -r n _; do
		i=$((i + 1))
		[ "$n" != "$1" ] && [ "$i" -gt 1 ] || continue
		if { [ -n "${RETAIN_COUNT:-}" ] && [ "$i" -gt "$RETAIN_COUNT" ]; } || { [ -n "$cutoff" ] && [ "$n" \< "$cutoff" ]; }; then
			say "pruning backup $n"
			remove "$n"
		fi
	done
	partials | while read -r n; do
		[ -n "$n" ] && [ "$n" \< "$stale" ] || continue
		say "pruning the partial backup $n (begun over a day ago and never whole)"
		remove "$n" partial
	done
}

# --- restore -------------------------------------------------------------------------------------

do_restore() {
	name=${BACKUP:-latest}
	# A database that holds a catalog is kept whatever the backup: checked first, so that even a
	# name that resolves to nothing skips rather than fails.
	if [ -n "${RESTORE_IF_EMPTY:-}" ]; then
		uri=$(uri_of catalog)
		wait_for "$uri"
		tables=$(psql --no-psqlrc --quiet --tuples-only --no-align --dbname "$uri" \
			-c "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'") ||
			fail "cannot read the catalog database's tables"
		if [ "$tables" -gt 0 ]; then
			say "the catalog database holds $tables tables: it is kept, backup $name is not restored"
			report "{\"skipped\":\"$name\",\"tables\":$tables}"
			return
		fi
	fi
	start=$(date +%s) began=$(date +%s.%N) # the database answers (RESTORE_IF_EMPTY waited for it)
	if [ "$name" = latest ]; then
		load
		name=$(backups | head -n 1 | cut -d' ' -f1)
		[ -n "$name" ] || fail "no whole backup on $(where) to restore (restoreFrom: latest)"
		say "the latest backup is $name"
	fi
	dir=$(fetch "$name")
	manifest=$(tr -d '\n' < "$dir/manifest.json")
	from=$(printf '%s' "$manifest" | sed -n 's/.*"tiledVersion":"\([^"]*\)".*/\1/p')
	if [ -n "${TILED_VERSION:-}" ] && [ -n "$from" ] && [ "$from" != "$TILED_VERSION" ] &&
		[ "$(printf '%s\n%s\n' "$from" "$TILED_VERSION" | sort -V | tail -n 1)" = "$from" ]; then
		fail "backup $name was taken with Tiled $from, newer than this instance's Tiled $TILED_VERSION: its databases may be at revisions $TILED_VERSION does not know; restore it with Tiled $from or newer"
	fi
	# Everything is checked before any database is touched.
	(cd "$dir" && sha256sum -c --quiet SHA256SUMS > "$WORK/sums" 2>&1) ||
		fail "backup $name is corrupt: $(grep -v ': OK$' "$WORK/sums" | head -n 3 | tr '\n' ' ')(SHA256SUMS does not match); nothing was restored"
	dumps=$(awk '{print $2}' "$dir/SHA256SUMS")
	for f in $dumps; do
		pg_restore --list "$dir/$f" > /dev/null 2> "$WORK/err" ||
			fail "backup $name is corrupt: $f is not a readable dump ($(tail -c 300 "$WORK/err")); nothing was restored"
		[ -n "$(uri_of "${f%.dump}")" ] || fail "backup $name has $f but the instance has no ${f%.dump} database; nothing was restored"
	done
	for f in $dumps; do
		db=${f%.dump}
		uri=$(uri_of "$db")
		wait_for "$uri"
		say "restoring the $db database"
		# One transaction: the public schema dropped (tables a failed migration made go too) and the
		# dump's objects recreated; a failure leaves the database as it was. psql cannot see
		# pg_restore's exit status, and what pg_restore wrote before it stopped part way (a dump it
		# cannot read to the end, or killed) is often valid SQL that psql would commit: so it then
		# ends any COPY it began and raises an error, and psql rolls the transaction back.
		rm -f "$WORK/pg_restore.failed"
		{
			echo "DROP SCHEMA public CASCADE; CREATE SCHEMA public;"
			pg_restore --no-owner --no-privileges --file - "$dir/$f" 2> "$WORK/pg_restore.err" || {
				: > "$WORK/pg_restore.failed"
				printf '\n\\.\nDO $$BEGIN RAISE EXCEPTION %s; END$$;\n' "'pg_restore stopped part way'"
			}
		} | psql --quiet --no-psqlrc --single-transaction -v ON_ERROR_STOP=1 --dbname "$uri" > /dev/null 2> "$WORK/err" &&
			[ ! -e "$WORK/pg_restore.failed" ] || {
			why=$(tail -c 400 "$WORK/err")
			[ ! -e "$WORK/pg_restore.failed" ] || [ ! -s "$WORK/pg_restore.err" ] || why=$(tail -c 400 "$WORK/pg_restore.err")
			fail "restoring the $db database from backup $name failed (it is left as it was): $why"
		}
	done
	[ "$target" != s3 ] || rm -rf "$dir"
	say "restored backup $name"
	report "{\"restored\":\"$name\",\"tiledVersion\":\"$from\",\"seconds\":$(($(date +%s) - start)),\"restoreSeconds\":\"$(since "$began")\"}"
}

case $mode in
backup) do_backup ;;
restore) do_restore ;;
list) load && backups ;;
*) fail "usage: dbtool.sh backup|restore|list" ;;
esac
