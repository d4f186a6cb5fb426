package main

// The release the committed bundle/ describes. A release changes these three together with the image
// tag in config/manager/kustomization.yaml (hack/bundle refuses a bundle whose Deployment image tag
// differs from Version); `make bundle` then writes the same bytes on every machine.
const (
	// Version is the operator's version, the CSV's spec.version (semver, no "v").
	Version = "0.1.0"
	// CreatedAt is the CSV's createdAt annotation: the release date, pinned so that the bundle is
	// reproducible (never the time `make bundle` runs).
	CreatedAt = "2026-11-30T00:00:00Z"
	// Replaces is the version this release upgrades from in OLM's update graph; empty for the first
	// release.
	Replaces = ""
)

const (
	// PackageName is the OLM package.
	PackageName = "tiled-operator"
	// Channel is the channel the bundle is published in, also the default channel. OLM's naming
	// convention: candidate (pre-releases, as long as the API is v1alpha1), fast, stable.
	Channel = "candidate"
)
