package expansion

import (
	"fmt"
	"regexp"
	"strings"
)

// The grammar of container image references, as github.com/distribution/reference (v0.6.0) defines
// it and container runtimes parse it: [host[:port]/]path[:tag][@digest]. The module is not a
// dependency of the operator, so its expressions are repeated here; TestImageReference checks
// examples of each rule.
const (
	refAlphanumeric        = `[a-z0-9]+`
	refSeparator           = `(?:[._]|__|[-]+)`
	refDomainNameComponent = `(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])`
	refOptionalPort        = `(?::[0-9]+)?`
	refTag                 = `[\w][\w.-]{0,127}`
	refDigest              = `[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*[:][[:xdigit:]]{32,}`
	refIPv6                = `\[(?:[a-fA-F0-9:]+)\]`
)

var (
	refDomainName    = refDomainNameComponent + `(?:\.` + refDomainNameComponent + `)*`
	refHost          = `(?:` + refDomainName + `|` + refIPv6 + `)`
	refDomainAndPort = refHost + refOptionalPort
	refPathComponent = refAlphanumeric + `(?:` + refSeparator + refAlphanumeric + `)*`
	refRemoteName    = refPathComponent + `(?:/` + refPathComponent + `)*`
	refName          = `(?:` + refDomainAndPort + `/)?` + refRemoteName
	referenceRegexp  = regexp.MustCompile(`^(` + refName + `)(?::(` + refTag + `))?(?:@(` + refDigest + `))?$`)
)

// maxImageNameLength is the longest repository name (without tag and digest) registries accept.
const maxImageNameLength = 255

// imageReferenceError says why image is not a valid container image reference, or "" when it is.
func imageReferenceError(image string) string {
	switch {
	case image == "":
		return "must not be empty"
	case strings.TrimSpace(image) != image || strings.ContainsAny(image, " \t\r\n"):
		return "must not contain whitespace"
	case strings.Contains(image, "://"):
		return "must not hold a URL scheme: write the registry host, e.g. ghcr.io/bluesky/tiled:0.2.20, not https://ghcr.io/..."
	}
	m := referenceRegexp.FindStringSubmatch(image)
	if m == nil {
		// Name the usual mistake when there is one.
		name := image
		if i := strings.Index(name, "@"); i >= 0 {
			name = name[:i]
		}
		if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
			name = name[:i]
		}
		path := name
		if i := strings.Index(path, "/"); i >= 0 && strings.ContainsAny(path[:i], ".:") {
			path = path[i+1:]
		}
		if strings.ToLower(path) != path {
			return "is not a valid image reference: the repository path must be lower case"
		}
		return "is not a valid image reference ([registry[:port]/]repository[:tag][@digest], e.g. ghcr.io/bluesky/tiled:0.2.20)"
	}
	if len(m[1]) > maxImageNameLength {
		return fmt.Sprintf("is not a valid image reference: the repository name is longer than %d characters", maxImageNameLength)
	}
	return ""
}
