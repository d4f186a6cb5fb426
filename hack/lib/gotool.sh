# shellcheck shell=bash
# gotool.sh: the one way hack/ builds a pinned tool from the Go module proxy (sourced). Used by
# hack/node/coredns.sh, hack/s3/versitygw.sh, hack/node/metrics-server.sh, hack/node/kube-router.sh and
# hack/prometheus/prometheus.sh (the server and promtool); a new tool is one call. See hack/README.md,
# "lib/".
#
#   gotool_build NAME MODULE@VERSION PACKAGE [OPTION...]   build unless cached; print the binary's path
#   gotool_path  NAME MODULE@VERSION PACKAGE [OPTION...]   print the path only (it may not exist yet)
#   gotool_key   NAME MODULE@VERSION PACKAGE [OPTION...]   print the cache key, VERSION-RECIPEHASH
#
#   NAME      the binary's name and its cache folder's (lower case, digits, . _ -)
#   MODULE@VERSION  the pin: the module on the proxy and its exact version
#   PACKAGE   the main package's full import path (MODULE/cmd/NAME, or MODULE itself)
#
# Options (those marked * are part of the recipe hash; the others do not change the binary):
#   --dep MODULE@VERSION  * raise a dependency of the tool to VERSION (`go get`, after the pin); the
#                           built binary's `go version -m` must show it. Repeatable.
#   --tags TAGS           * build tags (comma separated)
#   --ldflags FLAGS       * linker flags after "-s -w", e.g. the -X that stamp the version in
#   --check ARGS          * the arguments that make the binary print its version (split on spaces;
#                           default --version)
#   --expect TEXT         * text that output must contain (required): a binary that does not report
#                           its pinned version is refused, nothing is installed
#   --nice N                the build's niceness (default 10)
#   --jobs N                go build -p N with GOMAXPROCS=N (default: Go's, the number of cores)
#   --about TEXT            how long a cold build takes, for the message printed when building
#
# The binary lives at
#
#   $(tiled_cache_root)/tools/NAME/VERSION-RECIPEHASH/NAME
#
# where RECIPEHASH is the first 12 hex digits of the sha256 of the recipe: NAME, the module, version
# and package, the options marked *, and GOTOOL_RECIPE_VERSION below (raise it when the build below
# changes in a way that changes binaries). Go's own version is not part of it. A change of any pin or
# flag therefore builds into a new folder; the old one stays until removed by hand
# (rm -rf $(tiled_cache_root)/tools/NAME/OLDKEY is always safe: a caller that needs it rebuilds it).
#
# A build, once per key for every clone on the machine: a flock on tools/NAME/.KEY.lock (a second
# caller waits, then reuses the first one's binary; the go commands do not inherit the lock, so a go
# process orphaned by a killed caller never holds it); a temporary folder tools/NAME/.build-KEY.*
# (removed afterwards, and also when a killed caller left one) holding a wrapper module:
#   go mod init; its go line set to the tool's own (so GODEBUG defaults are upstream's); the tool's
#   go.mod replace and exclude directives copied in when it has any (replacements by a local folder
#   cannot be and are reported); go get MODULE@VERSION; go get every --dep;
#   CGO_ENABLED=0 go build -trimpath -ldflags "-s -w FLAGS" -tags TAGS -o NAME PACKAGE
# then the checks (`go version -m`: the module at the pinned version, every --dep, CGO_ENABLED=0,
# -trimpath; the version check), then the folder renamed into place, so NAME appears complete or not
# at all. The wrapper module's MVS gives the versions the tool's own go.mod gives (its requirements
# are complete since Go 1.17), so the binary matches what `go install MODULE/...@VERSION` builds,
# except for the raised dependencies. Progress and errors go to stderr; only the path to stdout.

_gotool_dir=$(dirname "${BASH_SOURCE[0]}")
# shellcheck source=hack/lib/cache.sh
source "$_gotool_dir/cache.sh"

GOTOOL_RECIPE_VERSION=1

# _gotool_parse ARGS... sets the gt_* variables of the calling subshell from gotool_*'s arguments.
_gotool_parse() {
	if (($# < 3)); then
		echo "gotool: usage: gotool_build NAME MODULE@VERSION PACKAGE [--dep M@V]... [--tags T] [--ldflags F] [--check ARGS] --expect TEXT [--nice N] [--jobs N] [--about TEXT]" >&2
		return 2
	fi
	gt_name=$1 gt_modver=$2 gt_pkg=$3
	shift 3
	gt_module=${gt_modver%@*} gt_version=${gt_modver##*@}
	gt_deps=() gt_tags='' gt_ldflags='' gt_check=(--version) gt_expect='' gt_nice=10 gt_jobs='' gt_about=''
	while (($#)); do
		(($# >= 2)) || { echo "gotool: $gt_name: option $1 needs a value" >&2; return 2; }
		case $1 in
		--dep) gt_deps+=("$2") ;;
		--tags) gt_tags=$2 ;;
		--ldflags) gt_ldflags=$2 ;;
		--check) read -r -a gt_check <<<"$2" ;;
		--expect) gt_expect=$2 ;;
		--nice) gt_nice=$2 ;;
		--jobs) gt_jobs=$2 ;;
		--about) gt_about=$2 ;;
		*) echo "gotool: $gt_name: unknown option $1" >&2; return 2 ;;
		esac
		shift 2
	done
	[[ $gt_name =~ ^[a-z0-9][a-z0-9._-]*$ ]] || { echo "gotool: bad NAME '$gt_name' (lower case, digits, . _ -)" >&2; return 2; }
	[[ $gt_modver == *@v* && -n $gt_module ]] || { echo "gotool: $gt_name: '$gt_modver' is not MODULE@VERSION" >&2; return 2; }
	[[ -n $gt_expect ]] || { echo "gotool: $gt_name: --expect is required (the text its version check prints)" >&2; return 2; }
	local d
	for d in "${gt_deps[@]}"; do
		[[ $d == *@v* ]] || { echo "gotool: $gt_name: --dep '$d' is not MODULE@VERSION" >&2; return 2; }
	done
}

# _gotool_key prints VERSION-RECIPEHASH of the parsed recipe.
_gotool_key() {
	local h
	h=$(
		printf '%s\n' "gotool $GOTOOL_RECIPE_VERSION" "name $gt_name" "module $gt_module" "version $gt_version" \
			"package $gt_pkg" "tags $gt_tags" "ldflags $gt_ldflags" "check ${gt_check[*]}" "expect $gt_expect"
		((${#gt_deps[@]} == 0)) || printf 'dep %s\n' "${gt_deps[@]}"
	)
	h=$(sha256sum <<<"$h")
	echo "$gt_version-${h:0:12}"
}

gotool_key() (
	_gotool_parse "$@" || exit
	_gotool_key
)

gotool_path() (
	_gotool_parse "$@" || exit
	echo "$(tiled_cache_root)/tools/$gt_name/$(_gotool_key)/$gt_name"
)

# _gotool_directives GOMOD prints the replace and exclude directives of a go.mod, one a line:
# "replace OLD [OLDVERSION] => NEW [NEWVERSION]" or "exclude PATH VERSION".
_gotool_directives() {
	awk '
		{ sub(/\/\/.*/, "") }
		NF == 0 { next }
		block != "" && $1 == ")" { block = ""; next }
		block != "" { print block, $0; next }
		($1 == "replace" || $1 == "exclude") && $2 == "(" { block = $1; next }
		$1 == "replace" || $1 == "exclude" { print }
	' "$1"
}

# _gotool_compile TMP builds the parsed recipe into TMP/out/NAME in a wrapper module TMP/mod. Run
# with stdout on stderr and without the lock's descriptor.
_gotool_compile() {
	local tmp=$1 gomod toolgo kind line left right f i
	local -a nice_=(nice -n "$gt_nice") w
	# Called where `set -e` does not apply (its status is tested): every step says || return.
	mkdir -p "$tmp/mod" "$tmp/out" && cd "$tmp/mod" || return
	export GOFLAGS=-mod=mod GOWORK=off CGO_ENABLED=0
	go mod init "$gt_name-build" 2>/dev/null || return
	# The tool's own go.mod: its go line and its replace/exclude directives.
	gomod=$("${nice_[@]}" go mod download -json "$gt_modver" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
	[[ -f $gomod ]] || { echo "$gt_name: go mod download $gt_modver gave no go.mod" >&2; return 1; }
	toolgo=$(awk '$1 == "go" {print $2; exit}' "$gomod")
	[[ -z $toolgo ]] || go mod edit -go="$toolgo" || return
	while read -r kind line; do
		read -r -a w <<<"$line"
		if [[ $kind == exclude ]]; then
			go mod edit -exclude="${w[0]}@${w[1]}" || return
			continue
		fi
		i=-1
		for f in "${!w[@]}"; do [[ ${w[f]} != "=>" ]] || i=$f; done
		((i == 1 || i == 2)) || continue
		left=${w[0]}
		((i == 1)) || left+=@${w[1]}
		right=${w[i + 1]:-}
		if [[ -z ${w[i + 2]:-} ]]; then
			echo "$gt_name: $gt_modver's go.mod replaces $left by the folder $right, which a wrapper module cannot copy; built without it" >&2
			continue
		fi
		right+=@${w[i + 2]}
		echo "$gt_name: copying $gt_modver's replace $left => $right" >&2
		go mod edit -replace="$left=$right" || return
	done < <(_gotool_directives "$gomod")
	"${nice_[@]}" go get "$gt_modver" || return
	((${#gt_deps[@]} == 0)) || "${nice_[@]}" go get "${gt_deps[@]}" || return
	local -a flags=(-trimpath -ldflags "-s -w $gt_ldflags" -o "$tmp/out/$gt_name")
	[[ -z $gt_tags ]] || flags+=(-tags "$gt_tags")
	[[ -z $gt_jobs ]] || { flags+=(-p "$gt_jobs"); export GOMAXPROCS=$gt_jobs; }
	"${nice_[@]}" go build "${flags[@]}" "$gt_pkg"
}

# _gotool_verify BIN checks a freshly built binary against the recipe, or says why not.
_gotool_verify() {
	local bin=$1 info d out
	info=$(go version -m "$bin") || { echo "$gt_name: go version -m $bin failed" >&2; return 1; }
	_want() {
		grep -qxF "$1" < <(awk -F'\t' '$2 == "mod" || $2 == "dep" {print $2, $3 "@" $4} $2 == "build" {print "build", $3}' <<<"$info") || {
			echo "$gt_name: the built binary's build information (go version -m) lacks '$1'" >&2
			return 1
		}
	}
	# Called where `set -e` does not apply: every check says || return.
	_want "mod $gt_module@$gt_version" || return
	for d in "${gt_deps[@]}"; do _want "dep $d" || return; done
	_want "build CGO_ENABLED=0" || return
	_want "build -trimpath=true" || return
	out=$(timeout 60 "$bin" "${gt_check[@]}" 2>&1 </dev/null) || true
	grep -qF -- "$gt_expect" <<<"$out" || {
		echo "$gt_name: the built binary does not report its pinned version: \`$gt_name ${gt_check[*]}\` printed" >&2
		head -n 5 <<<"$out" | sed 's/^/    /' >&2
		echo "  which lacks '$gt_expect'. Nothing was installed. Check the recipe's --ldflags (where this version" >&2
		echo "  of $gt_module keeps its version string), --check and --expect." >&2
		return 1
	}
}

gotool_build() (
	set -euo pipefail
	_gotool_parse "$@" || exit
	local gt_key gt_parent gt_dir gt_bin gt_tmp
	gt_key=$(_gotool_key)
	gt_parent=$(tiled_cache_root)/tools/$gt_name
	gt_dir=$gt_parent/$gt_key
	gt_bin=$gt_dir/$gt_name
	[[ -x $gt_bin ]] && { echo "$gt_bin"; exit 0; }
	command -v go >/dev/null 2>&1 || {
		echo "$gt_name: the go command is not on PATH; install Go 1.26 or newer and retry" >&2
		exit 1
	}
	mkdir -p "$gt_parent"
	exec 8>"$gt_parent/.$gt_key.lock"
	if ! flock -n 8; then
		echo "$gt_name: another build of $gt_name $gt_key is running; waiting for it" >&2
		flock 8
	fi
	[[ -x $gt_bin ]] && { echo "$gt_bin"; exit 0; }
	# What a killed caller left behind (the lock is ours: none is running).
	rm -rf "$gt_parent/.build-$gt_key."* "$gt_dir"
	gt_tmp=$(mktemp -d "$gt_parent/.build-$gt_key.XXXXXX")
	trap 'rm -rf "$gt_tmp"' EXIT
	echo "$gt_name: building $gt_pkg ($gt_modver${gt_deps[*]:+, raising ${gt_deps[*]}}) from the Go module proxy${gt_about:+ ($gt_about)}, once, into $gt_dir" >&2
	(_gotool_compile "$gt_tmp") 8>&- >&2 || {
		echo "$gt_name: building failed (see the go output above). Check that the Go module proxy is reachable" >&2
		echo "  (GOPROXY=$(go env GOPROXY)) and still serves $gt_modver${gt_deps[*]:+ and ${gt_deps[*]}}, then run it again." >&2
		exit 1
	}
	_gotool_verify "$gt_tmp/out/$gt_name" || exit 1
	mv -T "$gt_tmp/out" "$gt_dir"
	echo "$gt_bin"
)
