package tiledversion

import (
	"fmt"
	"strconv"
	"strings"
)

// Oldest is the oldest Tiled release the operator supports (Tiled's tags have no "v").
// hack/images/build.sh reads this line to build the second Tiled image of the upgrade tests.
const Oldest = "0.2.14"

// Newest is the newest Tiled release the operator supports and deploys by default; it equals
// expansion.TiledVersion (a test pins that).
const Newest = "0.2.20"

// Of returns the Tiled version the image runs: stated (spec.tiled.version) when set, else the
// image's tag when it is a version (x.y.z, an optional "v" and any "-suffix" dropped). known is
// false when neither tells (a digest, latest): callers then assume Newest and warn.
func Of(image, stated string) (version string, known bool) {
	if stated != "" {
		return stated, true
	}
	if tag := tagOf(image); tag != "" {
		t := strings.TrimPrefix(tag, "v")
		if i := strings.IndexAny(t, "-+_"); i > 0 {
			t = t[:i]
		}
		if _, err := Parse(t); err == nil {
			return t, true
		}
	}
	return Newest, false
}

// tagOf is the tag of an image reference ("" for none, or a digest only).
func tagOf(image string) string {
	if i := strings.Index(image, "@"); i >= 0 {
		image = image[:i]
	}
	slash := strings.LastIndex(image, "/")
	colon := strings.LastIndex(image, ":")
	if colon <= slash {
		return ""
	}
	return image[colon+1:]
}

// Version is a parsed x.y.z.
type Version [3]int

// Parse parses x.y.z.
func Parse(s string) (Version, error) {
	var v Version
	parts := strings.Split(s, ".")
	if len(parts) != 3 {
		return v, fmt.Errorf("%q is not a version x.y.z", s)
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return v, fmt.Errorf("%q is not a version x.y.z", s)
		}
		v[i] = n
	}
	return v, nil
}

// Compare returns -1, 0 or 1 as a is older than, the same as, or newer than b.
func Compare(a, b Version) int {
	for i := range a {
		if a[i] != b[i] {
			if a[i] < b[i] {
				return -1
			}
			return 1
		}
	}
	return 0
}

// Supported says whether the operator supports version v (Oldest through Newest).
func Supported(v string) bool {
	p, err := Parse(v)
	if err != nil {
		return false
	}
	return Compare(p, MustParse(Oldest)) >= 0 && Compare(p, MustParse(Newest)) <= 0
}

// MustParse is Parse for constants.
func MustParse(s string) Version {
	v, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return v
}
