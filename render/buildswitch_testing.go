package render

// SetBuildPodAnnotationForTest sets the build switch (buildPodAnnotation, "key=value" or "" for off)
// as -ldflags -X would, for the tests of the packages that render (a manager started in a test), and
// returns the function that restores it. Set it only while no render runs (before a manager starts,
// after it stops): it is a plain variable, read without a lock. Never called by the operator itself.
func SetBuildPodAnnotationForTest(kv string) (restore func()) {
	old := buildPodAnnotation
	buildPodAnnotation = kv
	return func() { buildPodAnnotation = old }
}
