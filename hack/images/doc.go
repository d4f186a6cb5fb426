// Package images holds the recipes of the container images a real node runs for the end-to-end tests
// (hack/images/build.sh, docs/images.md) and, behind the build tag "images", the checks of the
// archives it writes: each docker-archive tarball is opened, its manifest, config and layer digest
// are verified, and the files the config and the operator's pods refer to (entrypoint, commands found
// through PATH, users, writable directories) must exist in the layer with the right owners. Both
// Tiled archives, tiled.tar (expansion.TiledVersion) and tiled-<Oldest>.tar (TILED_OLDEST_VERSION,
// else the const Oldest line of tiledversion/versions.go), must also hold that Tiled version in
// tiled/_version.py and in the dist-info's METADATA. postgres.tar must hold what the backup Jobs run
// (pg_dump, pg_restore, sha256sum, curl, the CA bundle); versitygw.tar (the S3 server of the backup
// tests, at VERSITYGW_VERSION, else the line of hack/s3/versitygw.sh that pins it) its binary and a
// /data owned by 65532.
//
//	TILED_IMAGES_DIR=~/.cache/tiled-operator/images/current TILED_OLDEST_VERSION=0.2.14 \
//		go test -tags images ./hack/images/
//
// build.sh runs this after every build; without the archives the test fails rather than skips.
package images
