package render

import "strings"

// buildPodAnnotation is a build-time switch, empty in every release: set at link time to
// "key=value" (go build -ldflags "-X github.com/bluesky/tiled-operator/render.buildPodAnnotation=key=value")
// it adds that one annotation to every Tiled pod template the manager renders. It exists so that the
// operator-upgrade tests can build a manager that renders differently from its predecessor without
// a change of code, and watch that change roll within each cluster's budget (hack/images/build.sh's
// annotated build, test/e2e, docs/upgrading.md).
var buildPodAnnotation string

// BuildPodAnnotation returns the annotation the build switch adds, ok false when it is off.
func BuildPodAnnotation() (key, value string, ok bool) {
	key, value, ok = strings.Cut(buildPodAnnotation, "=")
	if !ok || key == "" {
		return "", "", false
	}
	return key, value, true
}
