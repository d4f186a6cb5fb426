# shellcheck shell=bash
# cache.sh: the one cache root of every tool under hack/ (sourced; defines tiled_cache_root).
#
#   ${TILED_OPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tiled-operator}
#
# Every clone on the machine shares it. hack/images/images_test.go computes the same root in Go.

# tiled_cache_root prints the cache root (it may not exist yet).
tiled_cache_root() {
	echo "${TILED_OPERATOR_CACHE:-${XDG_CACHE_HOME:-${HOME:?set HOME, XDG_CACHE_HOME or TILED_OPERATOR_CACHE}/.cache}/tiled-operator}"
}
