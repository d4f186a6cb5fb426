package webhooks

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/expansion"
	"github.com/bluesky/tiled-operator/tiledversion"
)

// MinUsefulWindow is the shortest maintenance window admission does not warn about: about what a
// Tiled upgrade takes with its backup, migration and start on a beamline's database.
const MinUsefulWindow = 30 * time.Minute

// templateWarnings returns warnings for settings that are allowed but probably not meant: they
// never change what is stored. complete says the template is a whole instance (expanded), so that
// missing settings are worth a warning too; a profile or a cluster template sets only some fields.
func templateWarnings(t *v1alpha1.InstanceTemplate, complete bool) []string {
	var out []string
	if t.Tiled != nil {
		if w := imageWarning("spec.tiled.image", t.Tiled.Image, "ghcr.io/bluesky/tiled:0.2.20"); w != "" {
			out = append(out, w)
		}
		out = append(out, versionWarnings(t.Tiled)...)
		if complete && (t.Tiled.Resources == nil || len(t.Tiled.Resources.Limits) == 0) {
			out = append(out, "spec.tiled.resources: no limits: one busy Tiled pod can take a node's memory; set at least a memory limit")
		}
	}
	if s := t.Streaming; s != nil && s.Managed != nil {
		if w := imageWarning("spec.streaming.managed.image", s.Managed.Image, expansion.CacheImage); w != "" {
			out = append(out, w)
		}
	}
	if a := autoscalingOn(t); a && complete && (t.Tiled.Resources == nil || t.Tiled.Resources.Requests.Cpu().IsZero()) {
		out = append(out, "spec.tiled.autoscaling: the Tiled container has no CPU request: the autoscaler scales on CPU use relative to it and does nothing without one; set spec.tiled.resources.requests.cpu")
	}
	if autoscalingOn(t) && t.Tiled.Replicas != nil && !complete {
		out = append(out, fmt.Sprintf("spec.tiled.replicas: %d is ignored while spec.tiled.autoscaling is enabled: the autoscaler sets the number of Tiled pods", *t.Tiled.Replicas))
	}
	if t.Database != nil && t.Database.Managed != nil {
		if w := imageWarning("spec.database.managed.image", t.Database.Managed.Image, "postgres:16"); w != "" {
			out = append(out, w)
		}
	}
	// In an expanded instance this is an error (the engine refuses it); in a profile or a cluster's
	// template it depends on the other layers.
	if !complete && t.Tiled != nil && t.Tiled.Replicas != nil && *t.Tiled.Replicas > 1 && t.Storage != nil && t.Storage.Data != nil {
		d := t.Storage.Data
		if d.NFS == nil && d.ExistingClaimName == "" && len(d.AccessModes) > 0 &&
			!slices.Contains(d.AccessModes, corev1.ReadWriteMany) {
			out = append(out, fmt.Sprintf("spec.tiled.replicas: %d replicas share one data volume with access modes %v: pods scheduled on different nodes cannot all mount it; use ReadWriteMany or NFS, or one replica",
				*t.Tiled.Replicas, d.AccessModes))
		}
	}
	if t.Storage != nil && t.Storage.Retention == v1alpha1.RetentionDelete {
		out = append(out, "spec.storage.retention: Delete: the data volume and the database volume are deleted with the instance")
	}
	if t.Expose != nil && t.Expose.Ingress != nil && t.Expose.Ingress.Enabled != nil && *t.Expose.Ingress.Enabled &&
		t.Expose.Ingress.TLSSecretName == "" {
		out = append(out, "spec.expose.ingress.tlsSecretName: empty: Tiled is served over plain HTTP and API keys cross the network in clear text")
	}
	if complete && expansion.IngressHostWithoutEnabled(t) {
		out = append(out, "spec.expose.ingress.enabled: not set, but the ingress has a host: no Ingress is created; set enabled: true to expose Tiled at that host, or false to say it is meant")
	}
	if complete && t.Database != nil && t.Database.Managed != nil && (t.Backup == nil || (t.Backup.Claim == nil && t.Backup.S3 == nil)) {
		out = append(out, "spec.backup: no target: nothing backs up the managed database (the catalog, tabular data and auth sessions); set spec.backup.claim or spec.backup.s3, best in a profile (docs/backups.md)")
	}
	if b := t.Backup; b != nil && (b.Claim != nil || b.S3 != nil) && b.Schedule == "" && complete {
		out = append(out, "spec.backup.schedule: empty: backups are taken only on demand (kubectl tiled backup)")
	}
	if b := t.Backup; b != nil && b.OnCatalogLost == v1alpha1.CatalogLostRestoreLatest && b.Claim == nil && b.S3 == nil && complete {
		out = append(out, "spec.backup.onCatalogLost: RestoreLatest, but spec.backup has no target: there is no backup to restore a lost catalog from, and the instance stalls as under Stall")
	}
	if b := t.Backup; b != nil && b.Retention != nil && b.Retention.Count != nil && *b.Retention.Count == 1 {
		out = append(out, "spec.backup.retention.count: 1: each backup deletes the one before it once it is whole; a backup of damage already done leaves nothing older to restore")
	}
	if e := networkEgress(t); e != nil && e.Restricted != nil && *e.Restricted && e.DNSPorts == nil && !complete {
		out = append(out, "spec.networkPolicy.egress.restricted: DNS stays open on port 53 only (the built-in dnsPorts): where the cluster's DNS pods answer on another port (the DNS Service's targetPort; OpenShift's: 5353), the instance's pods cannot resolve names and never start; set spec.networkPolicy.egress.dnsPorts (docs/network-policies.md)")
	}
	if e := networkEgress(t); e != nil && len(e.Allow) > 0 && complete && (e.Restricted == nil || !*e.Restricted) {
		out = append(out, "spec.networkPolicy.egress.allow: unused while egress is open (restricted is not true)")
	}
	if m := t.Maintenance; m != nil {
		for i, w := range m.Windows {
			if w.Duration.Duration > 0 && w.Duration.Duration < MinUsefulWindow {
				out = append(out, fmt.Sprintf("spec.maintenance.windows[%d].duration: %s is shorter than a Tiled upgrade with its backup and migration usually takes (%s or more): "+
					"a change that starts inside the window finishes after it closes (docs/maintenance.md)", i, w.Duration.Duration, MinUsefulWindow))
			}
		}
	}
	if t.Auth != nil && t.Auth.AllowAnonymousAccess != nil && *t.Auth.AllowAnonymousAccess {
		out = append(out, "spec.auth.allowAnonymousAccess: true: anyone who reaches the service reads public data without credentials")
	}
	return out
}

// networkEgress is the template's spec.networkPolicy.egress, nil when it sets none.
func networkEgress(t *v1alpha1.InstanceTemplate) *v1alpha1.NetworkEgressSpec {
	if t.NetworkPolicy == nil {
		return nil
	}
	return t.NetworkPolicy.Egress
}

// versionWarnings warns about the Tiled release a layer's image runs (tiledversion.Of of
// spec.tiled.image and spec.tiled.version), which the configuration is checked and rendered for and
// the upgrade procedure goes by: an image that does not say it (a digest, latest, a facility's own
// tag) is taken for the newest supported release; a release outside the supported range is not
// known to work; a stated version that differs from the image's tag is probably a mistake.
func versionWarnings(t *v1alpha1.TiledServerSpec) []string {
	if t.Image == "" && t.Version == "" {
		return nil
	}
	version, known := tiledversion.Of(t.Image, t.Version)
	if !known {
		return []string{fmt.Sprintf("spec.tiled.image: %q does not say its Tiled version; assuming %s, the newest supported, for its configuration and upgrades; set spec.tiled.version",
			t.Image, tiledversion.Newest)}
	}
	var out []string
	fieldName, what := "spec.tiled.image", fmt.Sprintf("%q runs Tiled %s", t.Image, version)
	if t.Version != "" {
		fieldName, what = "spec.tiled.version", "Tiled "+version
	}
	if _, err := tiledversion.Parse(version); err == nil && !tiledversion.Supported(version) {
		out = append(out, fmt.Sprintf("%s: %s, outside the supported range %s to %s: its configuration is checked as the nearest release's and its database upgrades are not known to work",
			fieldName, what, tiledversion.Oldest, tiledversion.Newest))
	}
	if t.Version != "" && t.Image != "" {
		if tagged, ok := tiledversion.Of(t.Image, ""); ok && tagged != t.Version {
			out = append(out, fmt.Sprintf("spec.tiled.version: %s, but the image %q is tagged %s: the configuration is checked for %s; make them agree",
				t.Version, t.Image, tagged, t.Version))
		}
	}
	return out
}

// imageWarning warns about an image that names no version: the tag latest, or no tag nor digest.
func imageWarning(field, image, example string) string {
	if image == "" || strings.Contains(image, "@") {
		return ""
	}
	tag := ""
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		tag = image[i+1:]
	}
	switch tag {
	case "latest":
		return fmt.Sprintf("%s: %q uses the tag latest: each pod restart may run another version; pin a version, e.g. %s", field, image, example)
	case "":
		return fmt.Sprintf("%s: %q has no tag (so latest): each pod restart may run another version; pin a version, e.g. %s", field, image, example)
	}
	return ""
}

func prefixed(prefix string, ws []string) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = prefix + w
	}
	return out
}

// autoscalingOn reports whether the template turns the Tiled autoscaler on.
func autoscalingOn(t *v1alpha1.InstanceTemplate) bool {
	return t.Tiled != nil && t.Tiled.Autoscaling != nil && t.Tiled.Autoscaling.Enabled != nil && *t.Tiled.Autoscaling.Enabled
}
