#!/usr/bin/env bash
# s3_test.sh proves that curl's --aws-sigv4 (as in Debian bookworm's curl 7.88, the one the PostgreSQL
# image ships) talks to an S3-compatible server with the five operations the backup Jobs use, path
# style, region us-east-1, service s3:
#
#   create bucket  PUT    /BUCKET
#   put object     PUT    /BUCKET/KEY              -T FILE
#   get object     GET    /BUCKET/KEY              -o FILE
#   list objects   GET    /BUCKET?list-type=2&prefix=P   (v2, paginated with continuation-token)
#   delete object  DELETE /BUCKET/KEY
#
# and that what curl 7.88 needs is what the recipe below does: the x-amz-content-sha256 header sent by
# hand (curl signs its value; without it the server refuses every request), UNSIGNED-PAYLOAD or the
# body's real sha256 (checked by the server: a wrong one is refused); the canonical query written by
# hand (curl 7.88 signs the query as written: parameters sorted by name, values percent-encoded with
# uppercase hex, "/" included); keys percent-encoded the same way except "/". It fails when any
# operation or content round trip fails, when a wrong secret or an unsorted query is accepted (the
# signature would not be checked), or when listing does not page as described.
#
#   hack/s3/s3_test.sh        starts versitygw (hack/s3/versitygw.sh, built on first use) on a free
#                             port of 127.0.0.1 with a posix root in a temporary folder, stops it at the end
#
# Environment, all optional (hack/images/smoke.sh uses them):
#   VERSITYGW                 the versitygw binary to start (default: hack/s3/versitygw.sh's)
#   S3_ENDPOINT               use this running server instead (http://HOST:PORT), with S3_ACCESS_KEY
#                             and S3_SECRET_KEY; S3_DATA, its posix root, enables the 1001-key check
#   S3_CURL                   the curl command, split on spaces (default: curl), e.g. another image's
#                             curl through chroot; files are exchanged in S3_WORK, which that curl
#                             sees as S3_WORK_AS (defaults: a temporary folder, the same path)
# Needs curl, sha256sum, cmp; no root, no network beyond loopback.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
say() { printf '[s3] %s\n' "$*" >&2; }
fail() { say "FAIL: $*"; exit 1; }

REGION=us-east-1
read -r -a CURL <<<"${S3_CURL:-curl}"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/s3-test.XXXXXX")
WORK=${S3_WORK:-$TMP/work}
WORK_AS=${S3_WORK_AS:-$WORK}
mkdir -p "$WORK"
SERVER_PID=
cleanup() {
	local rc=$?
	if [[ -n $SERVER_PID ]]; then
		kill "$SERVER_PID" 2>/dev/null || true
		wait "$SERVER_PID" 2>/dev/null || true
	fi
	((rc == 0)) || [[ ! -s $TMP/server.log ]] || { say "versitygw's log:"; tail -n 30 "$TMP/server.log" >&2; }
	rm -rf "$TMP"
	[[ -z ${S3_WORK:-} ]] || rm -f "$WORK"/s3t-*
}
trap cleanup EXIT

# --- the recipe --------------------------------------------------------------------------------------
# enc STRING percent-encodes all but A-Z a-z 0-9 - _ . ~ (AWS's URI encoding, uppercase hex).
# enc_key KEY does the same but keeps "/" (an object key in the path).
enc() {
	local LC_ALL=C s=$1 out='' c i
	for ((i = 0; i < ${#s}; i++)); do
		c=${s:i:1}
		case $c in
		[A-Za-z0-9._~-]) out+=$c ;;
		*) out+=$(printf '%%%02X' "'$c") ;;
		esac
	done
	printf '%s' "$out"
}
enc_key() {
	local out='' part first=true
	local -a parts
	IFS=/ read -r -a parts <<<"$1/"
	for part in "${parts[@]}"; do
		$first || out+=/
		first=false
		out+=$(enc "$part")
	done
	# A trailing "/" of the key (read drops one empty field).
	[[ $1 != */ ]] || out+=/
	printf '%s' "$out"
}
EMPTY_SHA=$(sha256sum </dev/null | cut -d' ' -f1)

# s3 PAYLOAD_HASH CURL_ARGS... is one signed request; it prints the body (or writes -o), and the HTTP
# status on a last line of its own (after -o FILE: alone). PAYLOAD_HASH is the x-amz-content-sha256
# value, UNSIGNED-PAYLOAD or the body's sha256 hex. ACCESS/SECRET may be changed by the caller.
s3() {
	local hash=$1
	shift
	"${CURL[@]}" -sS --aws-sigv4 "aws:amz:$REGION:s3" --user "$ACCESS:$SECRET" \
		-H "x-amz-content-sha256: $hash" -w '\n%{http_code}' "$@"
}
status() { tail -n 1 <<<"$1"; }
body() { sed '$d' <<<"$1"; }
expect() { # expect WHAT WANT_STATUS RESPONSE
	[[ $(status "$3") == "$2" ]] || fail "$1: HTTP $(status "$3"), want $2: $(body "$3" | head -c 600)"
}
# xml TAG DOC prints the text of every <TAG> element, one a line (XML entities of keys decoded).
xml() {
	grep -o "<$1>[^<]*</$1>" <<<"$2" | sed -e "s!^<$1>!!; s!</$1>\$!!" \
		-e 's/&lt;/</g; s/&gt;/>/g; s/&#34;/"/g; s/&quot;/"/g; s/&#39;/'"'"'/g; s/&apos;/'"'"'/g; s/&amp;/\&/g' || true
}

# list BUCKET PREFIX [MAX_KEYS] prints every key under PREFIX, following continuation tokens; it
# records the pages' sizes in PAGES. Query parameters are in sorted order, each value encoded.
list() {
	local bucket=$1 prefix=$2 max=${3:-} token='' q r truncated
	PAGES=()
	while :; do
		q=
		[[ -z $token ]] || q+="continuation-token=$(enc "$token")&"
		q+="list-type=2"
		[[ -z $max ]] || q+="&max-keys=$max"
		q+="&prefix=$(enc "$prefix")"
		r=$(s3 "$EMPTY_SHA" "$ENDPOINT/$bucket?$q")
		expect "list $bucket?$q" 200 "$r"
		r=$(body "$r")
		[[ $r == *"<ListBucketResult"* ]] || fail "list: not a ListBucketResult: $r"
		[[ $(xml Prefix "$r") == "$prefix" ]] || fail "list: Prefix is '$(xml Prefix "$r")', want '$prefix'"
		[[ -z $token || $(xml ContinuationToken "$r") == "$token" ]] || fail "list: ContinuationToken not echoed"
		xml Key "$r"
		local n
		n=$(xml Key "$r" | grep -c . || true)
		[[ $(xml KeyCount "$r") == "$n" ]] || fail "list: KeyCount $(xml KeyCount "$r") but $n keys"
		PAGES+=("$n")
		truncated=$(xml IsTruncated "$r")
		case $truncated in
		false) return 0 ;;
		true) token=$(xml NextContinuationToken "$r") ;;
		*) fail "list: IsTruncated is '$truncated'" ;;
		esac
		[[ -n $token ]] || fail "list: IsTruncated but no NextContinuationToken"
	done
}

# --- the server ----------------------------------------------------------------------------------------
if [[ -n ${S3_ENDPOINT:-} ]]; then
	ENDPOINT=$S3_ENDPOINT
	ACCESS=${S3_ACCESS_KEY:?S3_ENDPOINT needs S3_ACCESS_KEY}
	SECRET=${S3_SECRET_KEY:?S3_ENDPOINT needs S3_SECRET_KEY}
	DATA=${S3_DATA:-}
else
	bin=${VERSITYGW:-$("$here/versitygw.sh")}
	ACCESS=test-access-key
	SECRET=test-secret-key/0123456789+$RANDOM$RANDOM
	DATA=$TMP/data
	mkdir -p "$DATA"
	# A free port: a random one, another when it is taken (versitygw exits at once then).
	for _ in $(seq 1 20); do
		port=$((20000 + RANDOM % 40000))
		ROOT_ACCESS_KEY=$ACCESS ROOT_SECRET_KEY=$SECRET "$bin" --port "127.0.0.1:$port" --region "$REGION" \
			--health /health posix "$DATA" >"$TMP/server.log" 2>&1 &
		SERVER_PID=$!
		ENDPOINT=http://127.0.0.1:$port
		for _ in $(seq 1 100); do
			kill -0 "$SERVER_PID" 2>/dev/null || break
			# The health endpoint answers unsigned; a request signed with this run's secret (list
			# buckets) makes sure the server is ours, not another one on a port ours failed to bind.
			if curl -sf -o /dev/null "$ENDPOINT/health" 2>/dev/null &&
				[[ $(s3 UNSIGNED-PAYLOAD -o /dev/null "$ENDPOINT/" 2>/dev/null | tail -n 1) == 200 ]]; then
				break 2
			fi
			sleep 0.1
		done
		kill "$SERVER_PID" 2>/dev/null || true
		wait "$SERVER_PID" 2>/dev/null || true
		SERVER_PID=
		grep -q "address already in use" "$TMP/server.log" || fail "versitygw did not start: $(tail -n 5 "$TMP/server.log")"
	done
	[[ -n $SERVER_PID ]] || fail "no free port found for versitygw"
	say "versitygw $("$bin" --version | sed -n 's/^Version *: //p') on $ENDPOINT, posix root $DATA"
fi

# --- the five operations, with both payload hashes ------------------------------------------------
BUCKET=s3t-backups-$RANDOM
# A key as a backup would name it, and one with every awkward character class.
KEY1="tiled/amx/20260101T000000Z/catalog.dump"
KEY2="tiled/amx/odd dir/é+x=y&z~:,@;!'()*\$[].bin"
head -c 300000 /dev/urandom >"$WORK/s3t-in1"
printf 'small object\n' >"$WORK/s3t-in2"
SHA1=$(sha256sum "$WORK/s3t-in1" | cut -d' ' -f1)

# 1. Create bucket: no body, either hash works.
r=$(s3 UNSIGNED-PAYLOAD -X PUT "$ENDPOINT/$BUCKET")
expect "create bucket (UNSIGNED-PAYLOAD)" 200 "$r"
r=$(s3 "$EMPTY_SHA" -X PUT "$ENDPOINT/$BUCKET-2")
expect "create bucket (sha256 of the empty body)" 200 "$r"
r=$(s3 "$EMPTY_SHA" -X PUT "$ENDPOINT/$BUCKET")
expect "create an existing bucket" 409 "$r"
[[ $(body "$r") == *BucketAlreadyOwnedByYou* ]] || fail "create an existing bucket: $(body "$r")"

# 2. Put object: the body's sha256, or UNSIGNED-PAYLOAD.
r=$(s3 "$SHA1" -T "$WORK_AS/s3t-in1" "$ENDPOINT/$BUCKET/$(enc_key "$KEY1")")
expect "put $KEY1 (body sha256)" 200 "$r"
r=$(s3 UNSIGNED-PAYLOAD -T "$WORK_AS/s3t-in2" "$ENDPOINT/$BUCKET/$(enc_key "$KEY2")")
expect "put $KEY2 (UNSIGNED-PAYLOAD)" 200 "$r"
# The server checks a given hash: a wrong one is refused (and nothing is stored).
r=$(s3 "$EMPTY_SHA" -T "$WORK_AS/s3t-in1" "$ENDPOINT/$BUCKET/wrong-hash")
expect "put with a wrong x-amz-content-sha256" 400 "$r"
[[ $(body "$r") == *XAmzContentSHA256Mismatch* ]] || fail "put with a wrong hash: $(body "$r")"

# 3. Get object, to a file: no body, either hash.
r=$(s3 UNSIGNED-PAYLOAD -o "$WORK_AS/s3t-out1" "$ENDPOINT/$BUCKET/$(enc_key "$KEY1")")
expect "get $KEY1 (UNSIGNED-PAYLOAD)" 200 "$r"
cmp -s "$WORK/s3t-in1" "$WORK/s3t-out1" || fail "get $KEY1: content differs"
r=$(s3 "$EMPTY_SHA" -o "$WORK_AS/s3t-out2" "$ENDPOINT/$BUCKET/$(enc_key "$KEY2")")
expect "get $KEY2 (sha256 of the empty body)" 200 "$r"
cmp -s "$WORK/s3t-in2" "$WORK/s3t-out2" || fail "get $KEY2: content differs"
r=$(s3 "$EMPTY_SHA" -o "$WORK_AS/s3t-out3" "$ENDPOINT/$BUCKET/wrong-hash")
expect "get a key never stored" 404 "$r"

# 4. List v2 with a prefix (both keys, in order); a prefix with spaces and "+"; one page at a time.
got=$(list "$BUCKET" "tiled/amx/")
[[ $got == "$KEY1"$'\n'"$KEY2" ]] || fail "list tiled/amx/: got [$got]"
got=$(list "$BUCKET" "tiled/amx/odd dir/é+")
[[ $got == "$KEY2" ]] || fail "list with an encoded prefix: got [$got]"
got=$(list "$BUCKET" "tiled/none/")
[[ -z $got ]] || fail "list of an empty prefix: got [$got]"
list "$BUCKET" "tiled/" 1 >"$TMP/paged"
[[ $(cat "$TMP/paged") == "$KEY1"$'\n'"$KEY2" ]] || fail "list one key a page: got [$(cat "$TMP/paged")]"
list "$BUCKET" "tiled/" 1 >/dev/null
[[ ${PAGES[*]} == "1 1" ]] || fail "list one key a page: pages of ${PAGES[*]}"

# 5. Delete object: either hash; deleting a missing key also answers 204 (S3's semantics).
r=$(s3 UNSIGNED-PAYLOAD -X DELETE "$ENDPOINT/$BUCKET/$(enc_key "$KEY1")")
expect "delete $KEY1 (UNSIGNED-PAYLOAD)" 204 "$r"
r=$(s3 "$EMPTY_SHA" -X DELETE "$ENDPOINT/$BUCKET/$(enc_key "$KEY2")")
expect "delete $KEY2 (sha256 of the empty body)" 204 "$r"
r=$(s3 "$EMPTY_SHA" -X DELETE "$ENDPOINT/$BUCKET/$(enc_key "$KEY2")")
expect "delete a deleted key" 204 "$r"
r=$(s3 "$EMPTY_SHA" -o "$WORK_AS/s3t-out1" "$ENDPOINT/$BUCKET/$(enc_key "$KEY1")")
expect "get a deleted key" 404 "$r"
got=$(list "$BUCKET" "tiled/")
[[ -z $got ]] || fail "list after the deletes: got [$got]"
say "create bucket, put, get, list (paged), delete: passed with UNSIGNED-PAYLOAD and the real sha256"

# --- what the recipe guards against ------------------------------------------------------------------
# Signatures are checked: a wrong secret is refused.
r=$(SECRET=wrong-secret s3 UNSIGNED-PAYLOAD -X PUT "$ENDPOINT/$BUCKET-3")
expect "create bucket with a wrong secret" 403 "$r"
[[ $(body "$r") == *SignatureDoesNotMatch* ]] || fail "wrong secret: $(body "$r")"
# curl 7.88 signs the query as written: unsorted parameters, or a value not encoded, are refused.
r=$(s3 "$EMPTY_SHA" "$ENDPOINT/$BUCKET?prefix=tiled%2F&list-type=2")
expect "list with unsorted parameters (curl 7.88 does not sort)" 403 "$r"
r=$(s3 "$EMPTY_SHA" "$ENDPOINT/$BUCKET?list-type=2&prefix=tiled/")
expect "list with an unencoded '/' in a value" 403 "$r"
# Without x-amz-content-sha256 (curl 7.88 does not add it), every request is refused.
r=$("${CURL[@]}" -sS --aws-sigv4 "aws:amz:$REGION:s3" --user "$ACCESS:$SECRET" -w '\n%{http_code}' \
	"$ENDPOINT/$BUCKET?list-type=2&prefix=")
expect "list without x-amz-content-sha256" 400 "$r"
say "refused as expected: a wrong secret, an unsorted or unencoded query, no x-amz-content-sha256"

# --- the default page size ------------------------------------------------------------------------------
# 1001 keys, written straight into the posix root (objects without metadata are listed as well).
if [[ -n $DATA ]]; then
	mkdir -p "$DATA/$BUCKET/many"
	for i in $(seq -f '%05g' 1 1001); do : >"$DATA/$BUCKET/many/k$i"; done
	list "$BUCKET" "many/" >"$TMP/many"
	[[ $(wc -l <"$TMP/many") == 1001 && $(head -n1 "$TMP/many") == many/k00001 && $(tail -n1 "$TMP/many") == many/k01001 ]] ||
		fail "list of 1001 keys: $(wc -l <"$TMP/many") keys"
	[[ ${PAGES[*]} == "1000 1" ]] || fail "list of 1001 keys: pages of ${PAGES[*]}, want 1000 1"
	# max-keys above 1000 is capped.
	list "$BUCKET" "many/" 5000 >/dev/null
	[[ ${PAGES[*]} == "1000 1" ]] || fail "list of 1001 keys with max-keys=5000: pages of ${PAGES[*]}"
	rm -rf "${DATA:?}/$BUCKET/many"
	say "1001 keys come in pages of 1000 and 1 (max-keys above 1000 is capped at 1000)"
fi
say "passed"
