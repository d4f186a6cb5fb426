#!/usr/bin/env bash
# refresh.sh writes hack/crdcompat/testdata/previous/: the CRDs of the previous release (the commit
# on the first line of hack/previous-release, config/crd/bases/*.yaml at that commit, byte for byte)
# and a COMMIT file naming the commit. Run it after moving hack/previous-release forward, then commit
# both. It needs the commit in the local git history (a shallow clone may lack it: git fetch
# --unshallow, or fetch that commit).
set -euo pipefail

root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
cd "$root"
out=hack/crdcompat/testdata/previous

commit=$(sed -n '1p' hack/previous-release | tr -d '[:space:]')
if ! [[ $commit =~ ^[0-9a-f]{40}$ ]]; then
	echo "refresh.sh: the first line of hack/previous-release is not a 40-hex commit: '$commit'" >&2
	exit 1
fi
if ! git cat-file -e "${commit}^{commit}" 2>/dev/null; then
	echo "refresh.sh: commit $commit is not in this clone's history (shallow clone? try: git fetch --unshallow)" >&2
	exit 1
fi

mapfile -t files < <(git ls-tree --name-only "$commit" config/crd/bases/ | grep '\.yaml$')
if [[ ${#files[@]} -eq 0 ]]; then
	echo "refresh.sh: no config/crd/bases/*.yaml at $commit" >&2
	exit 1
fi

mkdir -p "$out"
rm -f "$out"/*.yaml
for f in "${files[@]}"; do
	git show "$commit:$f" >"$out/$(basename "$f")"
done
printf '%s\n' "$commit" >"$out/COMMIT"
echo "refresh.sh: wrote ${#files[@]} CRDs of $commit to $out" >&2
