// Package fleet builds NSLS-II-like fleets of beamlines (profiles with expressions and a TiledCluster)
// and the waits and reads that the benchmark harness (hack/bench) and the test suites (through
// test/support/fixture) share. It talks to a real API server; nothing here is a fake.
package fleet

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/names"
	"github.com/bluesky/tiled-operator/operator/traffic"
	"github.com/bluesky/tiled-operator/render"
	"github.com/bluesky/tiled-operator/test/support/testenv"
)

// Beamlines returns n NSLS-II-like beamline names, deterministically: the 30 public three-letter
// names of controllers/testdata/nsls2-beamlines.txt, then the same names with a branch number
// (amx2, bmm2, …, amx3, …), as a facility with several end stations per sector would name them.
func Beamlines(n int) ([]string, error) {
	f, err := os.Open(filepath.Join(testenv.RepoRoot(), "controllers", "testdata", "nsls2-beamlines.txt"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var base []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := strings.TrimSpace(s.Text())
		if line != "" && !strings.HasPrefix(line, "#") {
			base = append(base, line)
		}
	}
	if err := s.Err(); err != nil {
		return nil, err
	}
	if len(base) == 0 {
		return nil, fmt.Errorf("no beamline names in nsls2-beamlines.txt")
	}
	out := make([]string, 0, n)
	for i := 0; i < n; i++ {
		name := base[i%len(base)]
		if branch := i / len(base); branch > 0 {
			name = fmt.Sprintf("%s%d", name, branch+1)
		}
		out = append(out, name)
	}
	return out, nil
}

// Facility is the label value the fleet's cluster selects its profiles by.
const Facility = "nsls2"

// Profiles are the facility's five profiles, three of them with CEL expressions: defaults for every
// beamline (NFS proposals path and ingress host per beamline), operations (pod annotations, changed by
// the benchmarks' "profile change" phase), network (an environment variable per beamline), detectors
// (a second NFS mount per beamline), and the MX family (larger data volume, selected per instance).
func Profiles(ns string) []*tiledv1alpha1.TiledProfile {
	facility := map[string]string{"facility": Facility}
	return []*tiledv1alpha1.TiledProfile{
		{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nsls2-defaults", Labels: facility},
			Spec: tiledv1alpha1.TiledProfileSpec{InstanceTemplate: tiledv1alpha1.InstanceTemplate{
				Tiled: &tiledv1alpha1.TiledServerSpec{Image: "ghcr.io/bluesky/tiled:0.2.20"},
				Storage: &tiledv1alpha1.StorageSpec{
					Data: &tiledv1alpha1.DataVolume{StorageClassName: ptr.To("ceph-rbd"), Size: "50Gi"},
					ReadOnlyMounts: []tiledv1alpha1.ReadOnlyMount{{
						Name: "proposals", MountPath: "/nsls2/proposals",
						NFS: &tiledv1alpha1.NFSVolumeSource{Server: "nfs.nsls2.bnl.gov", PathExpression: "'/nsls2/data/' + instance.name + '/proposals'"},
					}},
				},
				Database: &tiledv1alpha1.DatabaseSpec{Managed: &tiledv1alpha1.ManagedDatabase{Image: "postgres:16", Size: "20Gi"}},
				Auth:     &tiledv1alpha1.AuthSpec{SingleUserAPIKey: &tiledv1alpha1.SingleUserAPIKey{}},
				Expose: &tiledv1alpha1.ExposeSpec{Ingress: &tiledv1alpha1.IngressSpec{
					Enabled: ptr.To(true), ClassName: "nginx", HostExpression: "instance.name + '.tiled.nsls2.bnl.gov'",
				}},
			}},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nsls2-ops", Labels: facility},
			Spec: tiledv1alpha1.TiledProfileSpec{Priority: 5, InstanceTemplate: tiledv1alpha1.InstanceTemplate{
				Tiled: &tiledv1alpha1.TiledServerSpec{PodAnnotations: map[string]string{"nsls2.bnl.gov/team": "data-science"}},
			}},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nsls2-network", Labels: facility},
			Spec: tiledv1alpha1.TiledProfileSpec{Priority: 3, InstanceTemplate: tiledv1alpha1.InstanceTemplate{
				Tiled: &tiledv1alpha1.TiledServerSpec{
					Env: []tiledv1alpha1.EnvVar{{Name: "TILED_PUBLIC_URL", ValueExpression: ptr.To("'https://' + instance.name + '.tiled.nsls2.bnl.gov/api'")}},
				},
			}},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nsls2-detectors", Labels: facility},
			Spec: tiledv1alpha1.TiledProfileSpec{Priority: 7, InstanceTemplate: tiledv1alpha1.InstanceTemplate{
				Storage: &tiledv1alpha1.StorageSpec{ReadOnlyMounts: []tiledv1alpha1.ReadOnlyMount{{
					Name: "detectors", MountPath: "/nsls2/detectors",
					NFS: &tiledv1alpha1.NFSVolumeSource{Server: "nfs-det.nsls2.bnl.gov", PathExpression: "'/nsls2/detectors/' + instance.name"},
				}}},
			}},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nsls2-mx", Labels: map[string]string{"family": "mx"}},
			Spec: tiledv1alpha1.TiledProfileSpec{Priority: 10, InstanceTemplate: tiledv1alpha1.InstanceTemplate{
				Storage: &tiledv1alpha1.StorageSpec{Data: &tiledv1alpha1.DataVolume{Size: "500Gi"}},
			}},
		},
	}
}

// ProfilesNamed returns those of Profiles(ns) with the given names, in the order given: a facility
// of fewer profiles (the controllers' integration tests stamp out with three of the five).
func ProfilesNamed(ns string, names ...string) []*tiledv1alpha1.TiledProfile {
	all := Profiles(ns)
	out := make([]*tiledv1alpha1.TiledProfile, 0, len(names))
	for _, n := range names {
		for _, p := range all {
			if p.Name == n {
				out = append(out, p)
			}
		}
	}
	return out
}

// IsMX reports whether a beamline belongs to the MX family (selects the nsls2-mx profile).
func IsMX(name string) bool {
	for _, p := range []string{"amx", "fmx", "nyx"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// Cluster lists the beamlines: MX beamlines select the MX profile, chx has one override.
func Cluster(ns, name string, beamlines []string) *tiledv1alpha1.TiledCluster {
	c := &tiledv1alpha1.TiledCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: tiledv1alpha1.TiledClusterSpec{
			ProfileSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"facility": Facility}},
			Rollout:         &tiledv1alpha1.RolloutSpec{MaxUnavailable: ptr.To(intstr.FromString("10%"))},
		},
	}
	for _, n := range beamlines {
		ci := tiledv1alpha1.ClusterInstance{Name: n}
		switch {
		case IsMX(n):
			ci.ProfileSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"family": "mx"}}
		case n == "chx":
			ci.Overrides = &tiledv1alpha1.InstanceTemplate{Storage: &tiledv1alpha1.StorageSpec{Data: &tiledv1alpha1.DataVolume{Size: "2Ti"}}}
		}
		c.Spec.Instances = append(c.Spec.Instances, ci)
	}
	return c
}

// Create creates the profiles and the cluster.
func Create(ctx context.Context, c client.Client, objs ...client.Object) error {
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			return fmt.Errorf("creating %T %s/%s: %w", o, o.GetNamespace(), o.GetName(), err)
		}
	}
	return nil
}

// ProfileObjects returns the profiles as client.Objects.
func ProfileObjects(ps []*tiledv1alpha1.TiledProfile) []client.Object {
	out := make([]client.Object, len(ps))
	for i, p := range ps {
		out[i] = p
	}
	return out
}

// NewNamespace creates a namespace with a generated name.
func NewNamespace(ctx context.Context, c client.Client, prefix string) (string, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	if err := c.Create(ctx, ns); err != nil {
		return "", err
	}
	return ns.Name, nil
}

var managedSel = client.MatchingLabels{tiledv1alpha1.LabelManagedBy: tiledv1alpha1.ManagedByValue}

// childLists are the namespaced kinds of objects an instance renders.
func childLists() map[string]client.ObjectList {
	return map[string]client.ObjectList{
		"ConfigMap": &corev1.ConfigMapList{}, "Secret": &corev1.SecretList{}, "Service": &corev1.ServiceList{},
		"PersistentVolumeClaim": &corev1.PersistentVolumeClaimList{}, "StatefulSet": &appsv1.StatefulSetList{},
		"Ingress": &networkingv1.IngressList{}, "NetworkPolicy": &networkingv1.NetworkPolicyList{},
	}
}

// Objects maps every object of the namespace that an instance rendered (labelled as managed by the
// operator), every TiledInstance, and the namespace's NFS PersistentVolumes, "Kind/name" to the
// object. c should be a client that reads from the API server.
func Objects(ctx context.Context, c client.Client, ns string) (map[string]client.Object, error) {
	out := map[string]client.Object{}
	add := func(kind string, l client.ObjectList) error {
		items, err := meta.ExtractList(l)
		if err != nil {
			return err
		}
		for _, it := range items {
			o := it.(client.Object)
			out[kind+"/"+o.GetName()] = o
		}
		return nil
	}
	for kind, l := range childLists() {
		if err := c.List(ctx, l, client.InNamespace(ns), managedSel); err != nil {
			return nil, err
		}
		if err := add(kind, l); err != nil {
			return nil, err
		}
	}
	var tis tiledv1alpha1.TiledInstanceList
	if err := c.List(ctx, &tis, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	if err := add("TiledInstance", &tis); err != nil {
		return nil, err
	}
	var pvs corev1.PersistentVolumeList
	if err := c.List(ctx, &pvs, managedSel); err != nil {
		return nil, err
	}
	for i := range pvs.Items {
		pv := &pvs.Items[i]
		if pv.Spec.ClaimRef != nil && pv.Spec.ClaimRef.Namespace == ns {
			out["PersistentVolume/"+pv.Name] = pv
		}
	}
	return out, nil
}

// Metadata is Objects with metadata only (kind, name, resourceVersion, labels, owners…): what
// counting and comparing resourceVersions needs, at a fraction of the memory of whole objects, so
// that a benchmark's own reads do not inflate the peak memory of the process it measures.
func Metadata(ctx context.Context, c client.Client, ns string) (map[string]client.Object, error) {
	out := map[string]client.Object{}
	list := func(gvk schema.GroupVersionKind, opts ...client.ListOption) ([]metav1.PartialObjectMetadata, error) {
		l := &metav1.PartialObjectMetadataList{}
		l.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := c.List(ctx, l, opts...); err != nil {
			return nil, err
		}
		return l.Items, nil
	}
	kinds := []schema.GroupVersionKind{
		corev1.SchemeGroupVersion.WithKind("ConfigMap"), corev1.SchemeGroupVersion.WithKind("Secret"),
		corev1.SchemeGroupVersion.WithKind("Service"), corev1.SchemeGroupVersion.WithKind("PersistentVolumeClaim"),
		appsv1.SchemeGroupVersion.WithKind("StatefulSet"), networkingv1.SchemeGroupVersion.WithKind("Ingress"),
		networkingv1.SchemeGroupVersion.WithKind("NetworkPolicy"),
	}
	for _, gvk := range kinds {
		items, err := list(gvk, client.InNamespace(ns), managedSel)
		if err != nil {
			return nil, err
		}
		for i := range items {
			out[gvk.Kind+"/"+items[i].Name] = &items[i]
		}
	}
	items, err := list(tiledv1alpha1.GroupVersion.WithKind("TiledInstance"), client.InNamespace(ns))
	if err != nil {
		return nil, err
	}
	for i := range items {
		out["TiledInstance/"+items[i].Name] = &items[i]
	}
	// PersistentVolumes are cluster-scoped: their names start with the namespace (names.For).
	pvs, err := list(corev1.SchemeGroupVersion.WithKind("PersistentVolume"), managedSel)
	if err != nil {
		return nil, err
	}
	for i := range pvs {
		if strings.HasPrefix(pvs[i].Name, ns+"-") {
			out["PersistentVolume/"+pvs[i].Name] = &pvs[i]
		}
	}
	return out, nil
}

// ResourceVersions maps "Kind/name" to resourceVersion.
func ResourceVersions(objs map[string]client.Object) map[string]string {
	out := make(map[string]string, len(objs))
	for k, o := range objs {
		out[k] = o.GetResourceVersion()
	}
	return out
}

// Changed lists the keys whose resourceVersion differs (or that appeared or disappeared), sorted.
func Changed(before, after map[string]string) []string {
	var out []string
	for k, v := range after {
		if before[k] != v {
			out = append(out, k)
		}
	}
	for k := range before {
		if _, ok := after[k]; !ok {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// StampedOut reports whether the cluster has all n instances, each reconciled at its generation,
// and each its Tiled StatefulSet. r may be the operator's cache-backed client (no API request).
func StampedOut(ctx context.Context, r client.Reader, ns, cluster string, n int) (bool, error) {
	var tis tiledv1alpha1.TiledInstanceList
	// Read only: the lists share the cache's objects (no deep copy), so that polling costs the
	// process that runs the operator little.
	if err := r.List(ctx, &tis, client.InNamespace(ns), client.MatchingLabels{tiledv1alpha1.LabelCluster: cluster}, client.UnsafeDisableDeepCopy); err != nil {
		return false, err
	}
	if len(tis.Items) != n {
		return false, nil
	}
	for _, ti := range tis.Items {
		if ti.Status.ObservedGeneration != ti.Generation {
			return false, nil
		}
	}
	var sts appsv1.StatefulSetList
	if err := r.List(ctx, &sts, client.InNamespace(ns), client.MatchingLabels{tiledv1alpha1.LabelAppComponent: render.ComponentServer, tiledv1alpha1.LabelCluster: cluster}, client.UnsafeDisableDeepCopy); err != nil {
		return false, err
	}
	return len(sts.Items) == n, nil
}

// Poll calls cond every interval until it returns true, an error, or the timeout passes.
func Poll(ctx context.Context, interval, timeout time.Duration, what string, cond func(context.Context) (bool, error)) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		ok, err := cond(ctx)
		if ok && err == nil {
			return nil
		}
		last = err
		if time.Now().After(deadline) {
			if last != nil {
				return fmt.Errorf("%s: not within %s: %w", what, timeout, last)
			}
			return fmt.Errorf("%s: not within %s", what, timeout)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", what, ctx.Err())
		case <-time.After(interval):
		}
	}
}

// WaitQuiet waits until the counter has seen no request for quiet, and returns when that quiet
// began (the moment of the last request).
func WaitQuiet(ctx context.Context, c *traffic.Counter, quiet, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	last := c.Snapshot().Total()
	since := time.Now()
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		now := c.Snapshot().Total()
		if now != last {
			last, since = now, time.Now()
			continue
		}
		if time.Since(since) >= quiet {
			return nil
		}
	}
	return fmt.Errorf("no quiet moment of %s within %s:\n%s", quiet, timeout, c.Snapshot())
}

// NamesOf is the names of the objects the operator makes for instance ti: names.For of its
// namespace and name, for the suites that hold a TiledInstance.
func NamesOf(ti *tiledv1alpha1.TiledInstance) names.Objects { return names.For(ti.Namespace, ti.Name) }
