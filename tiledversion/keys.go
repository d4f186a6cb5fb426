package tiledversion

import (
	"slices"
	"strings"
)

// What differs across the supported range for the operator.
//
// This file is the one place that says what differs between the Tiled releases the operator
// supports (Oldest through Newest), as far as the operator is concerned. Today that is only the
// configuration keys below: Tiled's configuration model (the pydantic tiled.config.Config and the
// models of its fields, which forbid unknown keys, so a key a release lacks stops it at start) gained
// and lost keys between releases. The table was read from tiled/config.py of the wheels of 0.2.14
// through 0.2.20 (every release of the range; the YAML schema in tiled/config_schemas is
// documentation only and is not consulted by Tiled):
//
//   - 0.2.15 added streaming_cache.sentinels, service_name, password, ssl and health_check_interval
//     (Redis Sentinel); streaming_cache.uri, required in 0.2.14, became optional;
//   - 0.2.18 added webhooks.blocked_networks and webhooks.allow_delivery_hosts;
//   - 0.2.19 replaced catalog.top_level_access_blob (a dict) by catalog.top_level_access_tags (a
//     list of tags);
//   - 0.2.16, 0.2.17 and 0.2.20 changed no key.
//
// Differences of shape rather than presence are not in the table, and the operator does not check
// them: catalog.adapters_by_mimetype is a list of entry points up to 0.2.17 and a dict of media type
// to entry point from 0.2.18; streaming_cache.uri is required in 0.2.14; 0.2.19 normalizes
// uvicorn.root_path ("tiled" and "/tiled/" become "/tiled"). Free-form arguments change too, unseen
// by the model: the catalog's trees[].args take top_level_access_blob up to 0.2.18 and
// top_level_access_tags from 0.2.19, and TagBasedAccessPolicy's access_control.args require tags_db
// in 0.2.14 and refuse it in 0.2.20.
//
// What the operator relies on of Tiled's command line is the same across the range (_admin.py is
// byte-identical in 0.2.14 and 0.2.20, _catalog.py differs by one line of downgrade-database), so it
// needs no table: `tiled catalog init [--if-not-exists] URI`, `tiled catalog upgrade-database URI
// [REVISION]`, `tiled admin initialize-database URI` (no --if-not-exists: it fails on a stamped
// database), `tiled admin upgrade-database URI [REVISION]`, and the databases' revisions read from
// alembic's default table alembic_version (column version_num) of the catalog and of the auth
// database. Only the revisions themselves (the heads) differ from release to release.

// Key is a configuration key that exists in only part of the supported range.
type Key struct {
	// Path is the key's dotted path in config.yml, e.g. catalog.top_level_access_tags.
	Path string
	// Since is the first release that has the key; "" when every release up to Until has it.
	Since string
	// Until is the last release that has the key; "" when every release from Since on has it.
	Until string
	// Note says what replaces the key or what it replaces, or is "".
	Note string
}

// keys is the table. A release outside the supported range is judged by the same bounds: a key
// added stays, a key removed stays removed.
var keys = []Key{
	{Path: "catalog.top_level_access_blob", Until: "0.2.18", Note: "catalog.top_level_access_tags replaces it"},
	{Path: "catalog.top_level_access_tags", Since: "0.2.19", Note: "it replaces catalog.top_level_access_blob"},
	{Path: "streaming_cache.health_check_interval", Since: "0.2.15"},
	{Path: "streaming_cache.password", Since: "0.2.15"},
	{Path: "streaming_cache.sentinels", Since: "0.2.15"},
	{Path: "streaming_cache.service_name", Since: "0.2.15"},
	{Path: "streaming_cache.ssl", Since: "0.2.15"},
	{Path: "webhooks.allow_delivery_hosts", Since: "0.2.18"},
	{Path: "webhooks.blocked_networks", Since: "0.2.18"},
}

// Keys returns the configuration keys that exist in only part of the supported range, sorted by
// path.
func Keys() []Key { return slices.Clone(keys) }

// keyOf returns the entry of the table for path, or for the key path lies beneath.
func keyOf(path string) (Key, bool) {
	for _, k := range keys {
		if path == k.Path || strings.HasPrefix(path, k.Path+".") {
			return k, true
		}
	}
	return Key{}, false
}

// Lacking says whether Tiled version lacks the configuration key at path (a dotted path, e.g.
// catalog.top_level_access_tags, or a path beneath such a key), and if so why: "it was added in
// 0.2.19; ..." or "0.2.18 was the last release with it; ...". Keys outside the table, and any key for a version that does not parse, are not lacking:
// this table knows only what differs across the range.
func Lacking(version, path string) (why string, lacks bool) {
	k, ok := keyOf(path)
	if !ok {
		return "", false
	}
	v, err := Parse(version)
	if err != nil {
		return "", false
	}
	note := ""
	if k.Note != "" {
		note = "; " + k.Note
	}
	if k.Since != "" && Compare(v, MustParse(k.Since)) < 0 {
		return "it was added in " + k.Since + note, true
	}
	if k.Until != "" && Compare(v, MustParse(k.Until)) > 0 {
		return k.Until + " was the last release with it" + note, true
	}
	return "", false
}

// Lacks says whether Tiled version lacks the configuration key at path (see Lacking).
func Lacks(version, path string) bool {
	_, lacks := Lacking(version, path)
	return lacks
}

// KeysLacking returns the paths among paths that Tiled version lacks, in their order.
func KeysLacking(version string, paths []string) []string {
	var out []string
	for _, p := range paths {
		if Lacks(version, p) {
			out = append(out, p)
		}
	}
	return out
}
