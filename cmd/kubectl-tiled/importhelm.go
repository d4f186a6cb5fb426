package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/expansion"
	"github.com/bluesky/tiled-operator/expansion/schemacheck"
	"github.com/bluesky/tiled-operator/render"
)

// Dispositions of a key of the chart's values.
const (
	carried    = "carried"     // set in the profile or cluster
	handled    = "handled"     // the operator does the same thing itself
	chartValue = "default"     // left at the chart's default, which has no effect the operator lacks
	notCarried = "not carried" // no equivalent: the user must decide
)

// disposition says what became of one key (a leaf path) of the values.
type disposition struct {
	kind, note string
	// group is the key the disposition was given to, when it covers several leaves.
	group string
}

// helmImport turns the values of the Tiled Helm chart (helm/tiled in bluesky/tiled) into a
// TiledProfile and a TiledCluster with one instance, and accounts for every key of the values.
type helmImport struct {
	values map[string]any
	leaves []string // every leaf path of values, in document order
	got    map[string]disposition

	tpl     v1alpha1.InstanceTemplate
	env     map[string]map[string]any // extraEnvVars by name
	envUsed map[string]string         // extraEnvVars consumed by a mapping: where their value went
	envWhy  map[string]disposition    // what became of an extraEnvVars entry consumed by a mapping

	prefix string     // the subchart's key and a dot, for the values of an umbrella chart
	others []otherKey // the leaves of the other top-level keys of an umbrella chart's values
}

// otherKey is a leaf of an umbrella chart's values outside the Tiled subchart's: another chart's
// (a sibling subchart, global), listed and counted, not read.
type otherKey struct {
	path  string // e.g. postgresql.auth.database
	chart string // the top-level key, e.g. postgresql
	note  string
}

// leafPaths lists the leaf paths of a YAML value: a.b, a.list[0].c; empty maps and lists are leaves.
func leafPaths(prefix string, v any, out *[]string) {
	switch v := v.(type) {
	case map[string]any:
		if len(v) == 0 && prefix != "" {
			*out = append(*out, prefix)
		}
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			leafPaths(p, v[k], out)
		}
	case []any:
		if len(v) == 0 {
			*out = append(*out, prefix)
		}
		for i, x := range v {
			leafPaths(fmt.Sprintf("%s[%d]", prefix, i), x, out)
		}
	default:
		*out = append(*out, prefix)
	}
}

var pathPart = regexp.MustCompile(`([^.\[\]]+)|\[(\d+)\]`)

// get returns the value at a path such as ingress.hosts[0].host.
func (h *helmImport) get(path string) (any, bool) {
	var cur any = h.values
	for _, m := range pathPart.FindAllStringSubmatch(path, -1) {
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[m[1]]
			if !ok || m[1] == "" {
				return nil, false
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(m[2])
			if err != nil || i >= len(c) {
				return nil, false
			}
			cur = c[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

func (h *helmImport) str(path string) string {
	v, _ := h.get(path)
	s, _ := v.(string)
	return s
}

func (h *helmImport) mapAt(path string) map[string]any {
	v, _ := h.get(path)
	m, _ := v.(map[string]any)
	return m
}

func (h *helmImport) listAt(path string) []any {
	v, _ := h.get(path)
	l, _ := v.([]any)
	return l
}

// nonEmpty says whether the value at path is set to something other than nothing.
func (h *helmImport) nonEmpty(path string) bool {
	v, ok := h.get(path)
	return ok && isSet(v)
}

// mark records the disposition of every leaf at or under path that has none yet.
func (h *helmImport) mark(path, kind, note string) {
	for _, l := range h.leaves {
		if l == path || strings.HasPrefix(l, path+".") || strings.HasPrefix(l, path+"[") {
			if _, done := h.got[l]; !done {
				h.got[l] = disposition{kind, note, path}
			}
		}
	}
}

// markEach is mark, reporting each leaf on its own line rather than under path.
func (h *helmImport) markEach(path, kind, note string) {
	for _, l := range h.leaves {
		if l == path || strings.HasPrefix(l, path+".") || strings.HasPrefix(l, path+"[") {
			if _, done := h.got[l]; !done {
				h.got[l] = disposition{kind, note, ""}
			}
		}
	}
}

// dropped reports whether every leaf at or under path is already not carried.
func (h *helmImport) dropped(path string) bool {
	found := false
	for _, l := range h.leaves {
		if l == path || strings.HasPrefix(l, path+".") || strings.HasPrefix(l, path+"[") {
			if h.got[l].kind != notCarried {
				return false
			}
			found = true
		}
	}
	return found
}

// decodeInto converts a YAML subtree into a typed value.
func decodeInto(v any, into any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, into)
}

func (h *helmImport) server() *v1alpha1.TiledServerSpec {
	if h.tpl.Tiled == nil {
		h.tpl.Tiled = &v1alpha1.TiledServerSpec{}
	}
	return h.tpl.Tiled
}

// chartDefaults are the values of the chart's values.yaml that behave like the operator or do
// nothing; a key left at one of these values needs no equivalent.
var chartDefaults = map[string]any{
	"nameOverride": "", "fullnameOverride": "", "command": []any{}, "args": []any{},
	"imagePullSecrets": []any{}, "volumes": []any{}, "affinity": map[string]any{},
	"podSecurityContext": map[string]any{}, "securityContext": map[string]any{},
	"serviceAccount.create": false, "serviceAccount.automount": true,
	"serviceAccount.annotations": map[string]any{}, "serviceAccount.name": "",
	"autoscaling.enabled": false, "resources": map[string]any{}, "nodeSelector": map[string]any{},
	"tolerations": []any{}, "podAnnotations": map[string]any{}, "podLabels": map[string]any{},
	"image.repository": "ghcr.io/bluesky/tiled", "image.tag": "", "service.type": "ClusterIP",
}

// importHelm maps the values. The rules follow the chart's templates: a Deployment of
// image.repository:image.tag running the image's command with config.yaml from .Values.config,
// a Service on service.port, an optional Ingress, and extraEnvVars.
func importHelm(values map[string]any) *helmImport {
	h := &helmImport{values: values, got: map[string]disposition{}, env: map[string]map[string]any{}, envUsed: map[string]string{}, envWhy: map[string]disposition{}}
	leafPaths("", values, &h.leaves)
	for i, e := range h.listAt("extraEnvVars") {
		if m, ok := e.(map[string]any); ok {
			if name, _ := m["name"].(string); name != "" {
				h.env[name] = m
				_ = i
			}
		}
	}

	h.image()
	h.autoscaling()
	h.pod()
	h.service()
	h.ingress()
	h.scratch()
	h.volumesAndTrees()
	h.authentication()
	h.envVars()
	h.restOfConfig()
	h.notEquivalent()

	// Whatever is left: the chart's defaults, or keys with no equivalent.
	for _, l := range h.leaves {
		if _, done := h.got[l]; done {
			continue
		}
		v, _ := h.get(l)
		if def, ok := chartDefaults[l]; ok && reflect.DeepEqual(normalize(def), normalize(v)) {
			h.got[l] = disposition{chartValue, "", ""}
			continue
		}
		if strings.HasPrefix(l, "autoscaling.") && !truthy(h.get("autoscaling.enabled")) {
			h.got[l] = disposition{chartValue, "autoscaling is disabled", "autoscaling"}
			continue
		}
		if strings.HasPrefix(l, "ingress.") && !truthy(h.get("ingress.enabled")) {
			h.got[l] = disposition{chartValue, "the Ingress is disabled", "ingress"}
			continue
		}
		h.got[l] = disposition{notCarried, "no equivalent in TiledProfile", ""}
	}
	return h
}

func truthy(v any, ok bool) bool { b, _ := v.(bool); return ok && b }

func normalize(v any) any {
	b, _ := json.Marshal(v)
	var out any
	_ = json.Unmarshal(b, &out)
	return out
}

func (h *helmImport) image() {
	repo, tag := h.str("image.repository"), h.str("image.tag")
	switch {
	case tag != "":
		if repo == "" {
			repo = "ghcr.io/bluesky/tiled"
		}
		h.server().Image = repo + ":" + tag
		h.mark("image.repository", carried, "spec.tiled.image")
		h.mark("image.tag", carried, "spec.tiled.image")
	case repo != "" && repo != "ghcr.io/bluesky/tiled":
		h.mark("image.repository", notCarried, "image.tag is empty, so the chart used its appVersion; set spec.tiled.image to "+repo+":<tag>")
	default:
		h.mark("image.tag", handled, "empty: the chart runs its appVersion; the profile leaves the image to the operator's default "+expansion.TiledImage)
	}
	if p := h.str("image.pullPolicy"); p != "" {
		h.server().ImagePullPolicy = corev1.PullPolicy(p)
		h.mark("image.pullPolicy", carried, "spec.tiled.imagePullPolicy")
	}
}

func (h *helmImport) pod() {
	switch v, ok := h.get("replicaCount"); {
	case ok && truthy(h.get("autoscaling.enabled")):
		// The chart's Deployment has no replicas while its autoscaler is on; so too the operator's
		// StatefulSet, and a spec.tiled.replicas beside spec.tiled.autoscaling would only draw a warning.
		h.mark("replicaCount", handled, "ignored while autoscaling is enabled, as by the chart: the autoscaler sets the number of Tiled pods")
	case ok:
		if n, ok := v.(float64); ok && n >= 1 {
			h.server().Replicas = ptr.To(int32(n))
			h.mark("replicaCount", carried, "spec.tiled.replicas")
		}
	}
	if h.nonEmpty("resources") {
		var r corev1.ResourceRequirements
		if err := decodeInto(h.mapAt("resources"), &r); err == nil {
			h.server().Resources = &r
			h.mark("resources", carried, "spec.tiled.resources")
		}
	}
	for _, k := range []struct {
		key  string
		into *map[string]string
	}{{"podAnnotations", &h.server().PodAnnotations}, {"podLabels", &h.server().PodLabels}, {"nodeSelector", &h.server().NodeSelector}} {
		if h.nonEmpty(k.key) {
			if err := decodeInto(h.mapAt(k.key), k.into); err == nil {
				h.mark(k.key, carried, "spec.tiled."+k.key)
			}
		}
	}
	if h.nonEmpty("tolerations") {
		var t []corev1.Toleration
		if err := decodeInto(h.listAt("tolerations"), &t); err == nil {
			h.server().Tolerations = t
			h.mark("tolerations", carried, "spec.tiled.tolerations")
		}
	}
	if !truthy(h.get("serviceAccount.create")) && h.str("serviceAccount.name") != "" {
		h.server().ServiceAccountName = h.str("serviceAccount.name")
		h.mark("serviceAccount.name", carried, "spec.tiled.serviceAccountName")
	}
	if h.nonEmpty("affinity") {
		var a corev1.Affinity
		if err := decodeInto(h.mapAt("affinity"), &a); err == nil {
			h.server().Affinity = &a
			h.mark("affinity", carried, "spec.tiled.affinity")
		}
	}
	if h.nonEmpty("imagePullSecrets") {
		var refs []v1alpha1.LocalObjectReference
		if err := decodeInto(h.listAt("imagePullSecrets"), &refs); err == nil {
			h.server().ImagePullSecrets = refs
			h.mark("imagePullSecrets", carried, "spec.tiled.imagePullSecrets")
		}
	}
	h.securityContexts()
	for probe, how := range map[string]string{
		"livenessProbe":  "the operator probes /healthz on the http port",
		"readinessProbe": "the operator's readiness probe asks Tiled for its catalog and pings the streaming cache (ready.py)",
	} {
		want := map[string]any{"httpGet": map[string]any{"path": "/healthz", "port": "http"}}
		if reflect.DeepEqual(normalize(h.mapAt(probe)), normalize(want)) {
			h.mark(probe, handled, how)
		}
	}
}

// restrictedSecurity are the security settings the operator gives the Tiled container, under the
// restricted Pod Security Standard: a chart value equal to one of them is handled; any other value
// of these keys is not carried.
var restrictedSecurity = map[string]any{
	"runAsNonRoot": true, "allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
	"privileged": false, "capabilities.drop": []any{"ALL"}, "seccompProfile.type": "RuntimeDefault",
}

// securityContexts maps podSecurityContext and securityContext key by key: the uid and gids into
// the pod identity fields of the profile (spec.tiled.runAsUser, runAsGroup, fsGroup,
// supplementalGroups: an administrator's decision, so the profile is the place), values the
// operator sets itself as handled, and everything else as not carried.
func (h *helmImport) securityContexts() {
	id := func(key string) (int64, bool) {
		v, ok := h.get(key)
		n, isNum := v.(float64)
		return int64(n), ok && isNum && n >= 1 && n == float64(int64(n))
	}
	// The container's uid and gid win over the pod's, as in Kubernetes.
	for _, f := range []struct {
		name string
		into **int64
	}{{"runAsUser", &h.server().RunAsUser}, {"runAsGroup", &h.server().RunAsGroup}} {
		pod, container := "podSecurityContext."+f.name, "securityContext."+f.name
		cv, cok := id(container)
		pv, pok := id(pod)
		switch {
		case cok:
			*f.into = ptr.To(cv)
			h.mark(container, carried, "spec.tiled."+f.name)
			if pok && pv == cv {
				h.mark(pod, carried, "spec.tiled."+f.name)
			} else if _, set := h.get(pod); set {
				h.mark(pod, notCarried, fmt.Sprintf("%s sets %d for the Tiled container, which the operator takes", container, cv))
			}
		case pok:
			*f.into = ptr.To(pv)
			h.mark(pod, carried, "spec.tiled."+f.name)
		}
		for _, k := range []string{pod, container} {
			if _, set := h.get(k); set {
				h.mark(k, notCarried, "not a valid uid or gid for the restricted Pod Security Standard (root, or not a number)")
			}
		}
	}
	if v, ok := id("podSecurityContext.fsGroup"); ok {
		h.server().FSGroup = ptr.To(v)
		h.mark("podSecurityContext.fsGroup", carried, "spec.tiled.fsGroup")
	}
	if v, ok := h.get("podSecurityContext.supplementalGroups"); ok {
		var gids []int64
		if err := decodeInto(v, &gids); err == nil && len(gids) > 0 && !slices.Contains(gids, 0) {
			h.server().SupplementalGroups = gids
			h.mark("podSecurityContext.supplementalGroups", carried, "spec.tiled.supplementalGroups")
		}
	}
	for _, ctx := range []string{"podSecurityContext", "securityContext"} {
		for key, want := range restrictedSecurity {
			if v, ok := h.get(ctx + "." + key); ok {
				if reflect.DeepEqual(normalize(v), normalize(want)) || key == "capabilities.drop" {
					h.mark(ctx+"."+key, handled, "the operator sets it (restricted Pod Security Standard)")
				} else {
					h.mark(ctx+"."+key, notCarried, fmt.Sprintf("the operator sets %s to %s under the restricted Pod Security Standard", key, jsonOf(want)))
				}
			}
		}
		if h.nonEmpty(ctx) {
			h.markEach(ctx, notCarried, "no equivalent: the operator sets the security context itself (restricted Pod Security Standard)")
		}
	}
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func (h *helmImport) service() {
	if t := h.str("service.type"); t != "" {
		h.tpl.Expose = &v1alpha1.ExposeSpec{Service: &v1alpha1.ServiceSpec{Type: corev1.ServiceType(t)}}
		h.mark("service.type", carried, "spec.expose.service.type")
	}
	if v, _ := h.get("service.port"); v == float64(8000) {
		h.mark("service.port", handled, "the operator serves Tiled on port 8000")
	}
}

func (h *helmImport) ingress() {
	if !truthy(h.get("ingress.enabled")) {
		return
	}
	ing := &v1alpha1.IngressSpec{Enabled: ptr.To(true)}
	h.mark("ingress.enabled", carried, "spec.expose.ingress.enabled")
	if c := h.str("ingress.className"); c != "" {
		ing.ClassName = c
		h.mark("ingress.className", carried, "spec.expose.ingress.className")
	}
	if h.nonEmpty("ingress.annotations") {
		if err := decodeInto(h.mapAt("ingress.annotations"), &ing.Annotations); err == nil {
			h.mark("ingress.annotations", carried, "spec.expose.ingress.annotations")
		}
	}
	hosts := h.listAt("ingress.hosts")
	if len(hosts) >= 1 {
		ing.Host = h.str("ingress.hosts[0].host")
		h.mark("ingress.hosts[0].host", carried, "spec.expose.ingress.host")
		paths := h.listAt("ingress.hosts[0].paths")
		if len(paths) == 1 && h.str("ingress.hosts[0].paths[0].path") == "/" {
			h.mark("ingress.hosts[0].paths", handled, "the operator routes / (Prefix) to Tiled")
		}
		for i := 1; i < len(hosts); i++ {
			h.mark(fmt.Sprintf("ingress.hosts[%d]", i), notCarried, "the operator serves one host per instance")
		}
	}
	if tls := h.listAt("ingress.tls"); len(tls) == 1 {
		tlsHosts := h.listAt("ingress.tls[0].hosts")
		if len(tlsHosts) == 1 && tlsHosts[0] == ing.Host {
			ing.TLSSecretName = h.str("ingress.tls[0].secretName")
			h.mark("ingress.tls[0]", carried, "spec.expose.ingress.tlsSecretName")
		}
	}
	if h.tpl.Expose == nil {
		h.tpl.Expose = &v1alpha1.ExposeSpec{}
	}
	h.tpl.Expose.Ingress = ing
}

// volumesAndTrees maps the chart's catalog tree: its database (SQLite, or PostgreSQL by URI) and
// its writable and readable storage, whose volumes are the chart's volumes and volumeMounts.
func (h *helmImport) volumesAndTrees() {
	// The chart's own mount of its ConfigMap.
	for i, m := range h.listAt("volumeMounts") {
		mm, _ := m.(map[string]any)
		if mm["name"] == "config" && mm["mountPath"] == "/deploy/config" {
			h.mark(fmt.Sprintf("volumeMounts[%d]", i), handled, "the chart's config mount; the operator mounts the configuration it renders")
		}
	}
	trees := h.listAt("config.trees")
	if len(trees) == 0 {
		return
	}
	if h.str("config.trees[0].path") != "/" || h.str("config.trees[0].tree") != "catalog" {
		h.mark("config.trees", notCarried, "the operator serves one catalog at /; other trees have no equivalent")
		return
	}
	h.mark("config.trees[0].path", handled, "the operator serves its catalog at /")
	h.mark("config.trees[0].tree", handled, "the operator serves a catalog")
	for i := 1; i < len(trees); i++ {
		h.mark(fmt.Sprintf("config.trees[%d]", i), notCarried, "the operator serves one catalog at /; further trees have no equivalent")
	}
	args := "config.trees[0].args"
	uri := h.str(args + ".uri")
	switch {
	case strings.HasPrefix(uri, "sqlite"):
		h.mark(args+".uri", handled, "a SQLite catalog becomes the managed PostgreSQL database (the operator's default); existing catalog entries are not migrated")
	case envRef(uri) != "":
		name := envRef(uri)
		if ref := h.secretEnv(name, "spec.database.external.uriSecretRef"); ref != nil {
			h.tpl.Database = &v1alpha1.DatabaseSpec{External: &v1alpha1.ExternalDatabase{URISecretRef: ref}}
			h.mark(args+".uri", carried, "spec.database.external.uriSecretRef (from "+name+")")
		}
	case strings.HasPrefix(uri, "postgresql"):
		h.mark(args+".uri", notCarried, "a literal PostgreSQL URI holds a password: put it in a Secret (key uri) and set spec.database.external.uriSecretRef")
	}
	h.mark(args+".init_if_not_exists", handled, "the operator initialises and migrates the catalog before Tiled starts")

	mounts := map[string]map[string]any{} // mountPath -> mount
	mountIndex := map[string]int{}
	for i, m := range h.listAt("volumeMounts") {
		if mm, ok := m.(map[string]any); ok {
			if p, _ := mm["mountPath"].(string); p != "" {
				mounts[p], mountIndex[p] = mm, i
			}
		}
	}
	volumes := map[string]int{}
	for i, v := range h.listAt("volumes") {
		if vm, ok := v.(map[string]any); ok {
			if n, _ := vm["name"].(string); n != "" {
				volumes[n] = i
			}
		}
	}
	// mountFor finds the volume mounted at or above path.
	mountFor := func(path string) (string, map[string]any) {
		best := ""
		for p := range mounts {
			if (path == p || strings.HasPrefix(path, strings.TrimSuffix(p, "/")+"/")) && len(p) > len(best) {
				best = p
			}
		}
		return best, mounts[best]
	}
	writable := h.listAt(args + ".writable_storage")
	if w, ok := h.get(args + ".writable_storage"); ok {
		if s, ok := w.(string); ok {
			writable = []any{s}
		}
	}
	for i, w := range writable {
		key := args + ".writable_storage"
		if _, isList := h.get(key + "[0]"); isList {
			key = fmt.Sprintf("%s[%d]", key, i)
		}
		path, _ := w.(string)
		mp, mount := mountFor(path)
		if mount == nil {
			h.mark(key, handled, "the operator's data volume (spec.storage.data) replaces "+path+", which the chart kept in the container (lost on restart)")
			continue
		}
		vi, ok := volumes[mount["name"].(string)]
		if !ok {
			continue
		}
		vol := fmt.Sprintf("volumes[%d]", vi)
		data := &v1alpha1.DataVolume{}
		if claim := h.str(vol + ".persistentVolumeClaim.claimName"); claim != "" {
			data.ExistingClaimName = claim
		} else if server := h.str(vol + ".nfs.server"); server != "" {
			data.NFS = &v1alpha1.NFSVolumeSource{Server: server, Path: h.str(vol + ".nfs.path")}
		} else {
			continue
		}
		if h.tpl.Storage == nil {
			h.tpl.Storage = &v1alpha1.StorageSpec{}
		}
		h.tpl.Storage.Data = data
		h.mark(vol, carried, "spec.storage.data")
		h.mark(fmt.Sprintf("volumeMounts[%d]", mountIndex[mp]), carried, "spec.storage.data (the operator chooses the mount path)")
		h.mark(key, handled, "the operator's data volume")
	}
	for i, r := range h.listAt(args + ".readable_storage") {
		key := fmt.Sprintf("%s.readable_storage[%d]", args, i)
		path, _ := r.(string)
		mp, mount := mountFor(path)
		if mount == nil || mp != path {
			continue
		}
		vi, ok := volumes[mount["name"].(string)]
		if !ok {
			continue
		}
		vol := fmt.Sprintf("volumes[%d]", vi)
		ro := v1alpha1.ReadOnlyMount{Name: dnsLabel(mount["name"].(string)), MountPath: path}
		if claim := h.str(vol + ".persistentVolumeClaim.claimName"); claim != "" {
			ro.ExistingClaimName = claim
		} else if server := h.str(vol + ".nfs.server"); server != "" {
			ro.NFS = &v1alpha1.NFSVolumeSource{Server: server, Path: h.str(vol + ".nfs.path")}
		} else {
			continue
		}
		if h.tpl.Storage == nil {
			h.tpl.Storage = &v1alpha1.StorageSpec{}
		}
		h.tpl.Storage.ReadOnlyMounts = append(h.tpl.Storage.ReadOnlyMounts, ro)
		h.mark(vol, carried, "spec.storage.readOnlyMounts["+ro.Name+"]")
		h.mark(fmt.Sprintf("volumeMounts[%d]", mountIndex[mp]), carried, "spec.storage.readOnlyMounts["+ro.Name+"].mountPath")
		h.mark(key, carried, "spec.storage.readOnlyMounts["+ro.Name+"]")
	}
}

// scratch marks an emptyDir mounted at /tmp as handled: the operator mounts one there itself, as
// the Tiled container's root filesystem is read-only. A medium or a size limit is not carried: the
// operator's emptyDir has neither.
func (h *helmImport) scratch() {
	volumes := map[string]int{}
	for i, v := range h.listAt("volumes") {
		if vm, ok := v.(map[string]any); ok {
			if n, _ := vm["name"].(string); n != "" {
				volumes[n] = i
			}
		}
	}
	const note = "the operator mounts an emptyDir at /tmp itself (the container's root filesystem is read-only)"
	for i, m := range h.listAt("volumeMounts") {
		mm, _ := m.(map[string]any)
		at, _ := mm["mountPath"].(string)
		name, _ := mm["name"].(string)
		vi, ok := volumes[name]
		if !ok || at == "" || path.Clean(at) != "/tmp" {
			continue
		}
		vol := fmt.Sprintf("volumes[%d]", vi)
		if _, isEmptyDir := h.mapAt(vol)["emptyDir"]; !isEmptyDir {
			continue
		}
		for _, k := range []string{"medium", "sizeLimit"} {
			if h.nonEmpty(vol + ".emptyDir." + k) {
				h.mark(vol+".emptyDir."+k, notCarried, "the emptyDir the operator mounts at /tmp has no "+k)
			}
		}
		h.mark(vol, handled, note)
		h.mark(fmt.Sprintf("volumeMounts[%d]", i), handled, note)
	}
}

var envRefPattern = regexp.MustCompile(`^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$`)

// envRef returns VAR when s is exactly "${VAR}".
func envRef(s string) string {
	if m := envRefPattern.FindStringSubmatch(strings.TrimSpace(s)); m != nil {
		return m[1]
	}
	return ""
}

// secretEnv returns the Secret key an extraEnvVars entry takes its value from, and accounts for it.
func (h *helmImport) secretEnv(name, target string) *v1alpha1.SecretKeyRef {
	e, ok := h.env[name]
	if !ok {
		return nil
	}
	from, _ := e["valueFrom"].(map[string]any)
	ref, _ := from["secretKeyRef"].(map[string]any)
	n, _ := ref["name"].(string)
	k, _ := ref["key"].(string)
	if n == "" {
		return nil
	}
	h.envUsed[name] = target
	return &v1alpha1.SecretKeyRef{Name: n, Key: k}
}

func (h *helmImport) authentication() {
	a := "config.authentication"
	auth := &v1alpha1.AuthSpec{}
	if v, ok := h.get(a + ".allow_anonymous_access"); ok {
		if b, ok := v.(bool); ok {
			auth.AllowAnonymousAccess = ptr.To(b)
			h.mark(a+".allow_anonymous_access", carried, "spec.auth.allowAnonymousAccess")
		}
	}
	if h.nonEmpty(a + ".secret_keys") {
		const why = "the operator generates its own secret keys (kept in the instance's Secret); sessions and tokens signed with the old keys end"
		for _, k := range h.listAt(a + ".secret_keys") {
			if v, _ := k.(string); envRef(v) != "" && h.secretEnv(envRef(v), "") != nil {
				h.envWhy[envRef(v)] = disposition{kind: notCarried, note: "it only held " + a + ".secret_keys"}
			}
		}
		h.mark(a+".secret_keys", notCarried, why)
	}
	if ref := h.secretEnv("TILED_SINGLE_USER_API_KEY", "spec.auth.singleUserAPIKey.secretRef"); ref != nil {
		auth.SingleUserAPIKey = &v1alpha1.SingleUserAPIKey{SecretRef: ref}
	}
	if key := envRef(h.str(a + ".single_user_api_key")); key != "" {
		if ref := h.secretEnv(key, "spec.auth.singleUserAPIKey.secretRef"); ref != nil {
			auth.SingleUserAPIKey = &v1alpha1.SingleUserAPIKey{SecretRef: ref}
			h.mark(a+".single_user_api_key", carried, "spec.auth.singleUserAPIKey.secretRef")
		}
	}
	providers := h.listAt(a + ".providers")
	if len(providers) > 0 {
		oidc := &v1alpha1.OIDCAuth{}
		for i := range providers {
			p := fmt.Sprintf("%s.providers[%d]", a, i)
			if !strings.HasSuffix(h.str(p+".authenticator"), ":OIDCAuthenticator") {
				h.mark(p, notCarried, "only OIDC providers have an equivalent (spec.auth.oidc)")
				continue
			}
			prov := v1alpha1.OIDCProvider{Name: h.str(p + ".provider"), ClientID: h.str(p + ".args.client_id"), WellKnownURI: h.str(p + ".args.well_known_uri")}
			for _, k := range []string{"provider", "authenticator", "args.client_id", "args.well_known_uri"} {
				h.mark(p+"."+k, carried, "spec.auth.oidc.providers["+prov.Name+"]")
			}
			if aud := h.str(p + ".args.audience"); aud == prov.ClientID {
				h.mark(p+".args.audience", handled, "the operator sets the audience to the client ID")
			}
			if v := envRef(h.str(p + ".args.client_secret")); v != "" {
				if ref := h.secretEnv(v, "spec.auth.oidc.providers["+prov.Name+"].clientSecretRef"); ref != nil {
					prov.ClientSecretRef = ref
					h.mark(p+".args.client_secret", carried, "spec.auth.oidc.providers["+prov.Name+"].clientSecretRef (from "+v+")")
				}
			}
			oidc.Providers = append(oidc.Providers, prov)
		}
		for i := range h.listAt(a + ".tiled_admins") {
			p := fmt.Sprintf("%s.tiled_admins[%d]", a, i)
			prov, id := h.str(p+".provider"), h.str(p+".id")
			if !slices.ContainsFunc(oidc.Providers, func(o v1alpha1.OIDCProvider) bool { return o.Name == prov }) || id == "" {
				h.mark(p, notCarried, fmt.Sprintf("names provider %q, which is not carried over", prov))
				continue
			}
			oidc.Admins = append(oidc.Admins, prov+":"+id)
			h.mark(p, carried, "spec.auth.oidc.admins")
		}
		if len(oidc.Providers) > 0 {
			auth.OIDC, auth.SingleUserAPIKey = oidc, nil
			delete(h.envUsed, "TILED_SINGLE_USER_API_KEY") // not used with OIDC: reported below
			h.authDatabase()
		}
	}
	h.mark(a+".tiled_admins", notCarried, "admins need an OIDC provider that is carried over")
	if auth.AllowAnonymousAccess != nil || auth.SingleUserAPIKey != nil || auth.OIDC != nil {
		h.tpl.Auth = auth
	}
	h.accessControl()
}

// accessControl keeps config.access_control (into spec.config, with the rest of the config) only
// when the provider it names is carried over: a policy naming a dropped provider would refer to
// identities the instance cannot authenticate.
func (h *helmImport) accessControl() {
	const key = "config.access_control"
	if !h.nonEmpty(key) {
		return
	}
	prov := h.str(key + ".args.provider")
	if prov == "" {
		return
	}
	var carriedProviders []string
	if h.tpl.Auth != nil && h.tpl.Auth.OIDC != nil {
		for _, p := range h.tpl.Auth.OIDC.Providers {
			carriedProviders = append(carriedProviders, p.Name)
		}
	}
	if !slices.Contains(carriedProviders, prov) {
		h.mark(key, notCarried, fmt.Sprintf("its policy names provider %q, which is not carried over", prov))
	}
}

// authDatabase maps config.database (where Tiled keeps OIDC sessions). With a managed database the
// operator creates it; with an external one the operator reads its URI from key auth-uri of the
// catalog's Secret.
func (h *helmImport) authDatabase() {
	if !h.nonEmpty("config.database.uri") {
		return
	}
	db := h.tpl.Database
	if db == nil || db.External == nil {
		h.mark("config.database", handled, "the operator keeps OIDC sessions in the managed database")
		return
	}
	name := envRef(h.str("config.database.uri"))
	ref := h.secretEnv(name, "")
	catalog := db.External.URISecretRef.Name
	if ref != nil && ref.Name == catalog && ref.Key == "auth-uri" {
		h.mark("config.database.uri", handled, "the operator reads it from key auth-uri of Secret "+catalog)
		h.envWhy[name] = disposition{kind: handled, note: "read from key auth-uri of Secret " + catalog}
		return
	}
	h.mark("config.database.uri", notCarried, "the operator reads the auth database URI from key auth-uri of Secret "+catalog+": add it there")
	if ref != nil {
		h.envWhy[name] = disposition{kind: notCarried, note: "the operator reads the auth database URI from key auth-uri of Secret " + catalog}
	}
}

func (h *helmImport) envVars() {
	for i, e := range h.listAt("extraEnvVars") {
		m, _ := e.(map[string]any)
		name, _ := m["name"].(string)
		key := fmt.Sprintf("extraEnvVars[%d]", i)
		if d, ok := h.envWhy[name]; ok {
			h.mark(key, d.kind, d.note)
			continue
		}
		if target := h.envUsed[name]; target != "" {
			h.mark(key, carried, target+" (the value of "+name+")")
			continue
		}
		ev := v1alpha1.EnvVar{Name: name}
		if v, ok := m["value"]; ok {
			s := fmt.Sprint(v)
			ev.Value = &s
		} else if from, ok := m["valueFrom"]; ok {
			ev.ValueFrom = &corev1.EnvVarSource{}
			if err := decodeInto(from, ev.ValueFrom); err != nil {
				continue
			}
		}
		if strings.HasPrefix(name, "TILED_SINGLE_USER_API_KEY") && h.tpl.Auth != nil && h.tpl.Auth.OIDC != nil {
			h.mark(key, notCarried, "a single-user API key has no use with OIDC providers")
			continue
		}
		h.server().Env = append(h.server().Env, ev)
		h.mark(key, carried, "spec.tiled.env["+name+"]")
	}
}

// restOfConfig carries the keys of Tiled's configuration the operator does not render itself into
// the free-form spec.config, which the operator merges over its own.
func (h *helmImport) restOfConfig() {
	frag := map[string]any{}
	for k, v := range h.mapAt("config") {
		switch k {
		case "trees", "authentication":
			continue
		case "database":
			if h.tpl.Auth == nil || h.tpl.Auth.OIDC == nil {
				h.mark("config.database", notCarried, "the operator configures the auth database itself (with OIDC)")
			}
			continue
		case "uvicorn":
			h.mark("config.uvicorn", notCarried, "the operator runs Tiled on 0.0.0.0:8000")
			continue
		}
		if h.dropped("config." + k) {
			continue
		}
		if unknown := render.UnknownConfigKeys(map[string]any{k: v}); len(unknown) > 0 {
			// Tiled refuses to start on a key its configuration model does not define, and so does
			// the operator's admission.
			for _, u := range unknown {
				h.mark("config."+u, notCarried, "Tiled "+expansion.TiledVersion+" does not know this key and would refuse to start")
			}
			if unknown[0] == k {
				continue
			}
		}
		frag[k] = v
		h.mark("config."+k, carried, "spec.config."+k)
	}
	if len(frag) > 0 {
		raw, _ := json.Marshal(frag)
		h.tpl.Config = &apiextensionsv1.JSON{Raw: raw}
	}
}

// autoscalingBounds are the values of the chart's autoscaling that the operator's
// spec.tiled.autoscaling has, with the most each may be there (the least is 1).
var autoscalingBounds = []struct {
	key string
	max int32
	to  func(*v1alpha1.AutoscalingSpec) **int32
}{
	{"minReplicas", 100, func(a *v1alpha1.AutoscalingSpec) **int32 { return &a.MinReplicas }},
	{"maxReplicas", 100, func(a *v1alpha1.AutoscalingSpec) **int32 { return &a.MaxReplicas }},
	{"targetCPUUtilizationPercentage", 1000, func(a *v1alpha1.AutoscalingSpec) **int32 { return &a.TargetCPUUtilizationPercentage }},
}

// autoscaling carries the chart's HorizontalPodAutoscaler (autoscaling.enabled: an autoscaling/v2
// autoscaler of the Deployment between minReplicas and maxReplicas, on CPU and optionally memory
// use) to spec.tiled.autoscaling, from which the operator renders one of the StatefulSet on the Tiled
// container's CPU use. Disabled, its keys are left at the chart's default (importHelm).
func (h *helmImport) autoscaling() {
	if !truthy(h.get("autoscaling.enabled")) {
		return
	}
	a := &v1alpha1.AutoscalingSpec{Enabled: ptr.To(true)}
	h.server().Autoscaling = a
	h.mark("autoscaling.enabled", carried, "spec.tiled.autoscaling.enabled")
	for _, b := range autoscalingBounds {
		v, ok := h.get("autoscaling." + b.key)
		if !ok {
			continue
		}
		n, isNumber := v.(float64)
		if !isNumber || n != float64(int32(n)) || n < 1 || n > float64(b.max) {
			h.mark("autoscaling."+b.key, notCarried, fmt.Sprintf("spec.tiled.autoscaling.%s takes a whole number from 1 to %d", b.key, b.max))
			continue
		}
		*b.to(a) = ptr.To(int32(n))
		h.mark("autoscaling."+b.key, carried, "spec.tiled.autoscaling."+b.key)
	}
	if a.MinReplicas != nil && a.MaxReplicas != nil && *a.MinReplicas > *a.MaxReplicas {
		a.MinReplicas, a.MaxReplicas = nil, nil
		for _, k := range []string{"autoscaling.minReplicas", "autoscaling.maxReplicas"} {
			h.got[k] = disposition{notCarried, "minReplicas exceeds maxReplicas, which the API refuses", ""}
		}
	}
	if h.nonEmpty("autoscaling.targetMemoryUtilizationPercentage") {
		h.mark("autoscaling.targetMemoryUtilizationPercentage", notCarried, "the operator's autoscaler scales on CPU use only")
	} else if _, ok := h.get("autoscaling.targetCPUUtilizationPercentage"); !ok {
		// The chart's autoscaler then has no metrics, for which Kubernetes scales on CPU at 80%.
		a.TargetCPUUtilizationPercentage = ptr.To[int32](80)
	}
}

// notEquivalent gives reasons for keys that have none in the operator, when they are set.
func (h *helmImport) notEquivalent() {
	reasons := map[string]string{
		"command":                    "the operator runs tiled serve config with its own arguments",
		"args":                       "the operator runs tiled serve config with its own arguments",
		"serviceAccount.create":      "the operator creates no service account; create one and set spec.tiled.serviceAccountName",
		"nameOverride":               "objects are named <cluster>-<instance> by the operator",
		"fullnameOverride":           "objects are named <cluster>-<instance> by the operator",
		"service.port":               "the operator serves Tiled on port 8000",
		"livenessProbe":              "the operator probes /healthz itself",
		"readinessProbe":             "the operator probes readiness itself (the catalog and the streaming cache, ready.py)",
		"serviceAccount.annotations": "the operator creates no service account",
		"serviceAccount.automount":   "the operator decides token mounting",
	}
	for key, why := range reasons {
		if v, ok := h.get(key); ok {
			if def, isDefault := chartDefaults[key]; isDefault && reflect.DeepEqual(normalize(def), normalize(v)) {
				continue
			}
			h.mark(key, notCarried, why)
		}
	}
}

var notDNS = regexp.MustCompile(`[^a-z0-9-]+`)

// instanceNamePattern is what the API requires of a TiledCluster's name and of its instances' names
// (the CRDs' pattern and CEL rule): lower-case letters, digits and '-', starting with a letter and
// ending with a letter or digit; the names of the Services begin with them.
var instanceNamePattern = regexp.MustCompile(`^[a-z]([-a-z0-9]*[a-z0-9])?$`)

// objectNameError says why the API refuses name as a TiledCluster's or an instance's, or "".
func objectNameError(name string) string {
	switch {
	case len(name) > 63:
		return "must be no more than 63 characters"
	case instanceNamePattern.MatchString(name):
		return ""
	case name != "" && (name[0] < 'a' || name[0] > 'z'):
		return "must start with a lower-case letter (it begins the names of Services, which are DNS labels)"
	}
	return "must be lower-case letters, digits and '-', starting with a letter and ending with a letter or digit"
}

// suggestName turns a name the API refuses into one it accepts: lower case, '-' for what is not a
// letter or digit, and "bl-" (beamline) before a name that starts with a digit, e.g. 8idi -> bl-8idi.
func suggestName(name string) string {
	s := strings.Trim(notDNS.ReplaceAllString(strings.ToLower(name), "-"), "-")
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		s = "bl-" + s
	}
	if len(s) > 63 {
		s = s[:63]
	}
	return strings.TrimRight(s, "-")
}

func dnsLabel(s string) string {
	s = strings.Trim(notDNS.ReplaceAllString(strings.ToLower(s), "-"), "-")
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		s = "m-" + s
	}
	if len(s) > 40 {
		s = strings.TrimRight(s[:40], "-")
	}
	return s
}

// objects returns the TiledProfile and the TiledCluster: the profile holds every setting, and the
// cluster lists one instance that selects it, so that more beamlines can be added as one line each.
func (h *helmImport) objects(name, instance, namespace string) (*v1alpha1.TiledProfile, *v1alpha1.TiledCluster) {
	labels := map[string]string{v1alpha1.LabelImportedFrom: "helm", v1alpha1.LabelProfile: name}
	profile := &v1alpha1.TiledProfile{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "TiledProfile"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels},
		Spec:       v1alpha1.TiledProfileSpec{InstanceTemplate: h.tpl},
	}
	cluster := &v1alpha1.TiledCluster{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "TiledCluster"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: v1alpha1.TiledClusterSpec{
			ProfileSelector: &metav1.LabelSelector{MatchLabels: map[string]string{v1alpha1.LabelProfile: name}},
			Instances:       []v1alpha1.ClusterInstance{{Name: instance}},
		},
	}
	return profile, cluster
}

// chartKeys are the top-level keys of the Tiled chart's values.yaml.
var chartKeys = []string{"config", "replicaCount", "image", "command", "args", "imagePullSecrets",
	"nameOverride", "fullnameOverride", "serviceAccount", "podAnnotations", "podLabels",
	"podSecurityContext", "securityContext", "service", "ingress", "resources", "livenessProbe",
	"readinessProbe", "autoscaling", "volumes", "volumeMounts", "nodeSelector", "tolerations",
	"affinity", "extraEnvVars"}

// otherChart is the disposition of the values of an umbrella chart that are not the Tiled
// subchart's: they are listed, and not read.
const otherChart = "not Tiled's"

// importValues imports the values of the Tiled chart, or those of the Tiled subchart of an umbrella
// chart: the subchart named, or else "tiled" when the values hold a tiled: map and none of the Tiled
// chart's own keys (the pattern Tiled's Helm docs recommend).
func importValues(values map[string]any, subchart string) (*helmImport, error) {
	if subchart == "" {
		if _, ok := values["tiled"].(map[string]any); ok && !slices.ContainsFunc(chartKeys, func(k string) bool { _, has := values[k]; return has }) {
			subchart = "tiled"
		}
	}
	if subchart == "" {
		return importHelm(values), nil
	}
	sub, ok := values[subchart].(map[string]any)
	if !ok {
		keys := slices.Sorted(maps.Keys(values))
		return nil, fmt.Errorf("no values for subchart %q: the top-level keys are %s", subchart, strings.Join(keys, ", "))
	}
	h := importHelm(sub)
	h.prefix = subchart + "."
	for _, k := range slices.Sorted(maps.Keys(values)) {
		if k == subchart {
			continue
		}
		note := "the values of subchart " + k + ", not read"
		if k == "global" {
			note = "global values: the Tiled chart reads none"
		}
		var leaves []string
		leafPaths(k, values[k], &leaves)
		for _, l := range leaves {
			h.others = append(h.others, otherKey{path: l, chart: k, note: note})
		}
	}
	return h, nil
}

// carriedCount is the number of leaves carried over.
func (h *helmImport) carriedCount() int {
	n := 0
	for _, d := range h.got {
		if d.kind == carried {
			n++
		}
	}
	return n
}

// verify checks that every key reported carried is where the report says, in the profile: the
// first word of its note is a path of the profile (spec.tiled.env[NAME], spec.auth.oidc.providers[NAME]
// pick a list element by name). A key whose target is absent is reported not carried instead, so
// that the report never claims more than the output holds; the paths are returned.
func (h *helmImport) verify(profile *v1alpha1.TiledProfile) ([]string, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(profile)
	if err != nil {
		return nil, err
	}
	var wrong []string
	for _, l := range h.leaves {
		d := h.got[l]
		if d.kind != carried {
			continue
		}
		target := strings.Fields(d.note)
		if len(target) == 0 || !holds(m, target[0]) {
			h.got[l] = disposition{kind: notCarried, note: "the importer meant to carry it to " + d.note + ", which the output does not hold", group: d.group}
			wrong = append(wrong, l)
		}
	}
	return wrong, nil
}

var segment = regexp.MustCompile(`^([A-Za-z0-9_]+)(?:\[([^\]]+)\])?$`)

// holds reports whether obj sets path (spec.a.b[name].c), to something other than an empty value.
func holds(obj map[string]any, path string) bool {
	var cur any = obj
	for _, part := range strings.Split(path, ".") {
		m := segment.FindStringSubmatch(part)
		if m == nil {
			return false
		}
		o, ok := cur.(map[string]any)
		if !ok {
			return false
		}
		if cur, ok = o[m[1]]; !ok {
			return false
		}
		if m[2] == "" {
			continue
		}
		list, _ := cur.([]any)
		i := slices.IndexFunc(list, func(e any) bool { em, _ := e.(map[string]any); return em["name"] == m[2] })
		if i < 0 {
			return false
		}
		cur = list[i]
	}
	return isSet(cur)
}

// report lists every key with what became of it, a key with several leaves once when they share
// their fate; notCarried keys are also returned on their own. Paths are those of the values file
// (with the subchart's prefix).
func (h *helmImport) report() (lines, missing []string) {
	seen := map[string]bool{}
	for _, l := range h.leaves {
		d := h.got[l]
		if d.group != "" {
			if seen[d.group+"\x00"+d.kind+d.note] {
				continue
			}
			seen[d.group+"\x00"+d.kind+d.note] = true
			l = d.group
		}
		line := fmt.Sprintf("%-14s %s%s", d.kind+":", h.prefix, l)
		if d.note != "" {
			line += " -> " + d.note
		}
		lines = append(lines, line)
		if d.kind == notCarried {
			missing = append(missing, h.prefix+l+": "+d.note)
		}
	}
	for _, o := range h.others {
		lines = append(lines, fmt.Sprintf("%-14s %s -> %s", otherChart+":", o.path, o.note))
	}
	return lines, missing
}

// summary counts the leaves of the values file by fate: "53 leaf keys: 25 carried, 12 handled, 0
// default, 11 not carried, 5 not Tiled's" (the last only for an umbrella chart's values).
func (h *helmImport) summary() string {
	counts := map[string]int{}
	for _, l := range h.leaves {
		counts[h.got[l].kind]++
	}
	s := fmt.Sprintf("%d leaf keys: %d %s, %d %s, %d %s, %d %s", len(h.leaves)+len(h.others),
		counts[carried], carried, counts[handled], handled, counts[chartValue], chartValue, counts[notCarried], notCarried)
	if len(h.others) > 0 {
		s += fmt.Sprintf(", %d %s", len(h.others), otherChart)
	}
	return s
}

// otherCharts names the top-level keys of the other charts, in order.
func (h *helmImport) otherCharts() []string {
	var out []string
	for _, o := range h.others {
		if !slices.Contains(out, o.chart) {
			out = append(out, o.chart)
		}
	}
	return out
}

// fates returns the fate of every leaf of the values file: its path (with the subchart's prefix)
// and its disposition's kind; the leaves of other charts are otherChart.
func (h *helmImport) fates() map[string]string {
	out := map[string]string{}
	for _, l := range h.leaves {
		out[h.prefix+l] = h.got[l].kind
	}
	for _, o := range h.others {
		out[o.path] = otherChart
	}
	return out
}

func marshalObject(obj runtime.Object) ([]byte, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	delete(m, "status")
	if meta, ok := m["metadata"].(map[string]any); ok {
		delete(meta, "creationTimestamp")
	}
	return yaml.Marshal(m)
}

func newImportHelmCommand(o *options) *cobra.Command {
	streams := o.streams
	var name, instance, subchart string
	var strict bool
	cmd := &cobra.Command{
		Use:   "import-helm VALUES.yaml",
		Short: "Turn the Tiled Helm chart's values into a TiledProfile and a TiledCluster",
		Long: `Read the values of a release of the Tiled Helm chart (helm/tiled in bluesky/tiled; "helm get values
--all RELEASE" prints them) and print a TiledProfile holding its settings and a TiledCluster with
one instance that selects it. Every key of the values is accounted for in the comment at the top
of the output, and counted: carried over (and where to), handled by the operator itself, left at
the chart's default, or not carried over. A key is reported carried only when the output holds it.

The values of an umbrella chart that has Tiled as a subchart are read from its subchart's key:
"tiled" when the values hold a tiled: map and none of the Tiled chart's own keys, or the key given
with --subchart. The keys of the other top-level keys (other subcharts, global) are listed one by
one, and counted, as not Tiled's.

Keys not carried over are also printed on standard error; with --strict they make the command
fail without writing anything. Values from which nothing at all is carried over are an error, and
so are a --name or --instance the API would refuse (a name must start with a lower-case letter:
for beamline 8-ID-I, --instance bl-8idi rather than 8idi).`,
		Example: `  helm get values --all tiled -o yaml > values.yaml
  kubectl tiled import-helm values.yaml --name chx > chx.yaml

  # The values of an umbrella chart whose Tiled subchart is called data-service
  kubectl tiled import-helm umbrella-values.yaml --subchart data-service --strict
  kubectl tiled expand -f chx.yaml     # what the operator will create`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var data []byte
			var err error
			if args[0] == "-" {
				data, err = io.ReadAll(streams.In)
			} else {
				data, err = os.ReadFile(args[0])
			}
			if err != nil {
				return err
			}
			var values map[string]any
			if err := yaml.Unmarshal(data, &values); err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			if instance == "" {
				instance = name
			}
			// Names the API would refuse fail here, before anything is written, with one it accepts.
			for _, f := range []struct{ flag, value string }{{"--name", name}, {"--instance", instance}} {
				if msg := objectNameError(f.value); msg != "" {
					return usageErrorf(cmd, "%s %q: %s; try %s %s", f.flag, f.value, msg, f.flag, suggestName(f.value))
				}
			}
			// -n names the namespace of the objects; without it they name none, so that kubectl
			// apply puts them in its current one.
			namespace := ""
			if f := cmd.Flags().Lookup("namespace"); f != nil && f.Changed {
				namespace = f.Value.String()
			}
			h, err := importValues(values, subchart)
			if err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			if h.carriedCount() == 0 && len(h.leaves) > 0 {
				return fmt.Errorf("%s: nothing was carried over: are these the values of the Tiled chart? For an umbrella chart's values, name the Tiled subchart with --subchart", args[0])
			}
			profile, cluster := h.objects(name, instance, namespace)
			if _, err := h.verify(profile); err != nil {
				return err
			}
			lines, missing := h.report()
			var out bytes.Buffer
			fmt.Fprintf(&out, "# Imported by kubectl tiled import-helm from %s.\n# %s.\n# Every key of the values, and what became of it:\n", args[0], h.summary())
			for _, l := range lines {
				fmt.Fprintf(&out, "#   %s\n", l)
			}
			for _, obj := range []runtime.Object{profile, cluster} {
				b, err := marshalObject(obj)
				if err != nil {
					return err
				}
				out.WriteString("---\n")
				out.Write(b)
			}
			// The result must be something the operator accepts.
			if _, err := schemacheck.DecodeAllChecked("import-helm", bytes.NewReader(out.Bytes())); err != nil {
				return fmt.Errorf("the imported objects are invalid: %w", err)
			}
			if len(h.others) > 0 {
				fmt.Fprintf(streams.ErrOut, "note: %d leaf keys of other charts (%s) were not read: they are listed as %s\n",
					len(h.others), strings.Join(h.otherCharts(), ", "), otherChart)
			}
			// With --strict, a key not carried over fails the command before anything is written: a
			// redirection into a file holds nothing to apply by mistake.
			if !strict || len(missing) == 0 {
				if _, err := streams.Out.Write(out.Bytes()); err != nil {
					return err
				}
			}
			if len(missing) > 0 {
				fmt.Fprintf(streams.ErrOut, "warning: %d keys of %s were not carried over:\n", len(missing), args[0])
				for _, m := range missing {
					fmt.Fprintf(streams.ErrOut, "  %s\n", m)
				}
				if strict {
					return fmt.Errorf("%d keys not carried over (--strict)", len(missing))
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&name, "name", "tiled", "Name of the TiledProfile and the TiledCluster (the Helm release name is a good choice).")
	cmd.Flags().StringVar(&instance, "instance", "", "Name of the cluster's instance, e.g. the beamline (default: --name).")
	cmd.Flags().BoolVar(&strict, "strict", false, "Fail, printing nothing on standard output, when a key of the Tiled chart's values is not carried over.")
	cmd.Flags().StringVar(&subchart, "subchart", "", "Read the values of this subchart of an umbrella chart (default: tiled, when the values hold a tiled: key and none of the chart's own).")
	return cmd
}

// isSet says whether a value is something other than nothing: not nil, not an empty string, map or
// list.
func isSet(v any) bool {
	switch v := v.(type) {
	case nil:
		return false
	case string:
		return v != ""
	case map[string]any:
		return len(v) > 0
	case []any:
		return len(v) > 0
	}
	return true
}
