package expansion

import (
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/validate/content"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/calendar"
	"github.com/bluesky/tiled-operator/render"
	"github.com/bluesky/tiled-operator/tiledversion"
)

// Values the API server accepts in a TiledInstance but refuses on the objects the operator makes
// from it (a toleration's operator, a label of the pods, a claim's name), or that can never run (an
// image reference with a space, a memory limit below its request, two mounts at one path), are
// refused here, with the path of the field in the TiledInstance. The checks repeat, for our fields,
// those of the API server's validation of pods, claims, Services and Ingresses (k8s.io/kubernetes'
// pkg/apis/core/validation, which the operator does not import), built on the helpers of
// k8s.io/apimachinery: label keys and values, DNS names, label selectors, quantities.
//
// validateTemplate runs them on one layer (partial: only what the layer sets) or on an expanded
// instance (complete: also what the whole needs, e.g. an NFS volume needs a server and a path).

// MaxConfigBytes is the largest config.yml a ConfigMap holds: the API server refuses a ConfigMap
// whose data exceeds 1 MiB.
const MaxConfigBytes = 1024*1024 - len(render.ConfigKey)

// reserved paths of the Tiled container that read-only mounts must stay clear of.
var reservedMounts = []struct{ path, what string }{
	{render.ConfigDir, "the configuration directory"},
	{render.DataPath, "the data volume"},
	{"/tmp", "the scratch directory"},
}

type validator struct {
	complete bool
	errs     field.ErrorList
	// related are further fields that take part in an error (a limit beside the request it is
	// below), so that the error is laid at the door of the highest layer that set any of them.
	related map[*field.Error][]string
}

func (v *validator) add(errs ...*field.Error) { v.errs = append(v.errs, errs...) }

// addRelated adds an error that also involves the fields at paths.
func (v *validator) addRelated(err *field.Error, paths ...string) {
	v.add(err)
	if v.related == nil {
		v.related = map[*field.Error][]string{}
	}
	v.related[err] = paths
}

// keyPath renders a list item keyed by its name as the provenance does: env[name=FOO].
func keyPath(p *field.Path, name string) *field.Path {
	if strings.ContainsAny(name, "[],=\"") {
		name = strconv.Quote(name)
	}
	return p.Key("name=" + name)
}

// mapPath renders a map entry as the provenance does: nodeSelector.zone, or
// nodeSelector["kubernetes.io/hostname"].
func mapPath(p *field.Path, key string) *field.Path {
	if plainName.MatchString(key) {
		return p.Child(key)
	}
	return p.Key(strconv.Quote(key))
}

// validateTemplate checks the values of a layer or of an expanded spec, whose fields are at
// root (spec).
func validateTemplate(root *field.Path, t *v1alpha1.InstanceTemplate, complete bool) *validator {
	v := &validator{complete: complete}
	if t.Tiled != nil {
		v.tiled(root.Child("tiled"), t.Tiled)
	}
	if t.Storage != nil {
		v.storage(root.Child("storage"), t.Storage)
	}
	if t.Database != nil {
		v.database(root.Child("database"), t.Database)
	}
	if t.Auth != nil {
		v.auth(root.Child("auth"), t.Auth)
	}
	if t.Expose != nil {
		v.expose(root.Child("expose"), t.Expose)
	}
	v.config(root.Child("config"), t)
	v.tiledVersion(root.Child("tiled", "version"), t.Tiled)
	if t.Backup != nil {
		v.backupSchedule(root.Child("backup", "schedule"), t.Backup.Schedule)
	}
	if t.Maintenance != nil {
		v.maintenance(root.Child("maintenance"), t.Maintenance)
	}
	if t.Notifications != nil && t.Notifications.Webhook != nil {
		v.notifications(root.Child("notifications", "webhook"), t.Notifications.Webhook, complete)
	}
	if t.Streaming != nil {
		v.streaming(root.Child("streaming"), t)
	}
	if t.NetworkPolicy != nil {
		v.networkPolicy(root.Child("networkPolicy"), t.NetworkPolicy)
	}
	if complete {
		v.replicas(root, t)
	}
	return v
}

func (v *validator) tiled(p *field.Path, t *v1alpha1.TiledServerSpec) {
	if t.Image != "" {
		v.image(p.Child("image"), t.Image)
	}
	v.resources(p.Child("resources"), t.Resources)
	for _, e := range t.Env {
		if e.ValueFrom != nil {
			v.envSource(keyPath(p.Child("env"), e.Name).Child("valueFrom"), e.ValueFrom)
		}
	}
	v.labels(p.Child("nodeSelector"), t.NodeSelector)
	v.tolerations(p.Child("tolerations"), t.Tolerations)
	v.annotations(p.Child("podAnnotations"), t.PodAnnotations)
	v.labels(p.Child("podLabels"), t.PodLabels)
	v.dnsSubdomain(p.Child("priorityClassName"), t.PriorityClassName)
	v.dnsSubdomain(p.Child("serviceAccountName"), t.ServiceAccountName)
	if t.RunAsUser != nil && *t.RunAsUser == 0 {
		v.add(field.Invalid(p.Child("runAsUser"), 0, "must not be 0: the pods run as non-root (restricted Pod Security Standard)"))
	}
	for i, gid := range t.SupplementalGroups {
		for _, msg := range validationIsValidGroupID(gid) {
			v.add(field.Invalid(p.Child("supplementalGroups").Index(i), gid, msg))
		}
	}
	v.affinity(p.Child("affinity"), t.Affinity)
	v.topologySpread(p.Child("topologySpreadConstraints"), t.TopologySpreadConstraints)
}

func validationIsValidGroupID(gid int64) []string {
	if gid < 0 || gid > 2147483647 {
		return []string{"must be between 0 and 2147483647, inclusive"}
	}
	return nil
}

func (v *validator) image(p *field.Path, image string) {
	if msg := imageReferenceError(image); msg != "" {
		v.add(field.Invalid(p, image, msg))
	}
}

func (v *validator) dnsSubdomain(p *field.Path, name string) {
	if name == "" {
		return
	}
	for _, msg := range content.IsDNS1123Subdomain(name) {
		v.add(field.Invalid(p, name, msg))
	}
}

// labels checks a map that becomes labels (or a node selector): keys qualified names, values label
// values.
func (v *validator) labels(p *field.Path, m map[string]string) {
	for _, k := range sortedKeys(m) {
		for _, msg := range content.IsLabelKey(k) {
			v.add(field.Invalid(mapPath(p, k), k, "key "+msg))
		}
		for _, msg := range content.IsLabelValue(m[k]) {
			v.add(field.Invalid(mapPath(p, k), m[k], msg))
		}
	}
}

// annotations checks a map that becomes annotations: keys qualified names, 256 KiB in all.
func (v *validator) annotations(p *field.Path, m map[string]string) {
	total := 0
	for _, k := range sortedKeys(m) {
		for _, msg := range content.IsLabelKey(strings.ToLower(k)) {
			v.add(field.Invalid(mapPath(p, k), k, "key "+msg))
		}
		total += len(k) + len(m[k])
	}
	if total > 256*1024 {
		v.add(field.TooLong(p, "", 256*1024))
	}
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// standardContainerResources are the resources a container may request without a domain prefix.
var standardContainerResources = []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage}

func (v *validator) resourceName(p *field.Path, name corev1.ResourceName) (extended bool) {
	n := string(name)
	if strings.HasPrefix(n, corev1.ResourceHugePagesPrefix) || slices.Contains(standardContainerResources, name) {
		return false
	}
	if !strings.Contains(n, "/") {
		v.add(field.Invalid(p, n, "must be a standard resource for containers (cpu, memory, ephemeral-storage, hugepages-<size>) or a domain-prefixed extended resource"))
		return false
	}
	for _, msg := range content.IsLabelKey(n) {
		v.add(field.Invalid(p, n, msg))
	}
	return !strings.Contains(n, "kubernetes.io/")
}

// resources checks requests and limits as the API server checks a container's: valid names,
// quantities not negative, requests not above limits, extended resources whole and requested as
// much as limited.
func (v *validator) resources(p *field.Path, r *corev1.ResourceRequirements) {
	if r == nil {
		return
	}
	check := func(list corev1.ResourceList, lp *field.Path) {
		for _, name := range sortedResourceNames(list) {
			q := list[name]
			np := mapPath(lp, string(name))
			extended := v.resourceName(np, name)
			if q.Sign() < 0 {
				v.add(field.Invalid(np, q.String(), "must be greater than or equal to 0"))
			}
			if extended && q.MilliValue()%1000 != 0 {
				v.add(field.Invalid(np, q.String(), "must be a whole number for an extended resource"))
			}
		}
	}
	check(r.Limits, p.Child("limits"))
	check(r.Requests, p.Child("requests"))
	for _, name := range sortedResourceNames(r.Requests) {
		req := r.Requests[name]
		lim, ok := r.Limits[name]
		if !ok {
			continue
		}
		np := mapPath(p.Child("requests"), string(name))
		lp := mapPath(p.Child("limits"), string(name)).String()
		if req.Cmp(lim) > 0 {
			v.addRelated(field.Invalid(np, req.String(), fmt.Sprintf("must be less than or equal to the %s limit of %s", name, lim.String())), lp)
		} else if strings.Contains(string(name), "/") && !strings.Contains(string(name), "kubernetes.io/") && req.Cmp(lim) != 0 {
			v.addRelated(field.Invalid(np, req.String(), fmt.Sprintf("must equal the %s limit of %s: extended resources cannot be overcommitted", name, lim.String())), lp)
		}
	}
}

func sortedResourceNames(l corev1.ResourceList) []corev1.ResourceName {
	names := make([]corev1.ResourceName, 0, len(l))
	for n := range l {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// validFieldPaths are the pod fields an environment variable may take through fieldRef.
var validFieldPaths = []string{"metadata.name", "metadata.namespace", "metadata.uid", "spec.nodeName",
	"spec.serviceAccountName", "status.hostIP", "status.hostIPs", "status.podIP", "status.podIPs"}

var validResourceFields = []string{"limits.cpu", "limits.memory", "limits.ephemeral-storage",
	"requests.cpu", "requests.memory", "requests.ephemeral-storage"}

func (v *validator) envSource(p *field.Path, s *corev1.EnvVarSource) {
	n := 0
	if s.SecretKeyRef != nil {
		n++
		v.keySelector(p.Child("secretKeyRef"), s.SecretKeyRef.Name, s.SecretKeyRef.Key)
	}
	if s.ConfigMapKeyRef != nil {
		n++
		v.keySelector(p.Child("configMapKeyRef"), s.ConfigMapKeyRef.Name, s.ConfigMapKeyRef.Key)
	}
	if s.FieldRef != nil {
		n++
		fp := s.FieldRef.FieldPath
		ok := slices.Contains(validFieldPaths, fp) ||
			((strings.HasPrefix(fp, "metadata.labels['") || strings.HasPrefix(fp, "metadata.annotations['")) && strings.HasSuffix(fp, "']"))
		if !ok {
			v.add(field.NotSupported(p.Child("fieldRef", "fieldPath"), fp, append(slices.Clone(validFieldPaths), "metadata.labels['<key>']", "metadata.annotations['<key>']")))
		}
	}
	if s.ResourceFieldRef != nil {
		n++
		if !slices.Contains(validResourceFields, s.ResourceFieldRef.Resource) && !strings.HasPrefix(s.ResourceFieldRef.Resource, "limits.hugepages-") && !strings.HasPrefix(s.ResourceFieldRef.Resource, "requests.hugepages-") {
			v.add(field.NotSupported(p.Child("resourceFieldRef", "resource"), s.ResourceFieldRef.Resource, validResourceFields))
		}
	}
	if s.FileKeyRef != nil {
		n++
	}
	switch {
	case n == 0:
		v.add(field.Required(p, "one of secretKeyRef, configMapKeyRef, fieldRef, resourceFieldRef"))
	case n > 1:
		v.add(field.Invalid(p, "", "may not have more than one source specified at a time"))
	}
}

func (v *validator) keySelector(p *field.Path, name, key string) {
	if name == "" {
		v.add(field.Required(p.Child("name"), ""))
	} else {
		v.dnsSubdomain(p.Child("name"), name)
	}
	if key == "" {
		v.add(field.Required(p.Child("key"), ""))
		return
	}
	for _, msg := range validation.IsConfigMapKey(key) {
		v.add(field.Invalid(p.Child("key"), key, msg))
	}
}

var (
	tolerationOperators = []string{string(corev1.TolerationOpEqual), string(corev1.TolerationOpExists)}
	taintEffects        = []string{string(corev1.TaintEffectNoSchedule), string(corev1.TaintEffectPreferNoSchedule), string(corev1.TaintEffectNoExecute)}
)

// tolerations checks tolerations as the API server checks a pod's.
func (v *validator) tolerations(p *field.Path, ts []corev1.Toleration) {
	for i, t := range ts {
		ip := p.Index(i)
		if t.Key != "" {
			for _, msg := range content.IsLabelKey(t.Key) {
				v.add(field.Invalid(ip.Child("key"), t.Key, msg))
			}
		}
		if t.Key == "" && t.Operator != corev1.TolerationOpExists {
			v.add(field.Invalid(ip.Child("operator"), t.Operator, "must be Exists when key is empty (which matches every taint)"))
		}
		if t.TolerationSeconds != nil && t.Effect != corev1.TaintEffectNoExecute {
			v.add(field.Invalid(ip.Child("effect"), t.Effect, "must be NoExecute when tolerationSeconds is set"))
		}
		switch t.Operator {
		case corev1.TolerationOpEqual, "":
			for _, msg := range content.IsLabelValue(t.Value) {
				v.add(field.Invalid(ip.Child("value"), t.Value, msg))
			}
		case corev1.TolerationOpExists:
			if t.Value != "" {
				v.add(field.Invalid(ip.Child("value"), t.Value, "must be empty when operator is Exists"))
			}
		default:
			v.add(field.NotSupported(ip.Child("operator"), t.Operator, tolerationOperators))
		}
		if t.Effect != "" && !slices.Contains(taintEffects, string(t.Effect)) {
			v.add(field.NotSupported(ip.Child("effect"), t.Effect, taintEffects))
		}
	}
}

var nodeSelectorOperators = []string{"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"}

func (v *validator) nodeSelectorRequirements(p *field.Path, rs []corev1.NodeSelectorRequirement, fields bool) {
	for i, r := range rs {
		ip := p.Index(i)
		switch r.Operator {
		case corev1.NodeSelectorOpIn, corev1.NodeSelectorOpNotIn:
			if len(r.Values) == 0 {
				v.add(field.Required(ip.Child("values"), "must be specified when operator is In or NotIn"))
			}
		case corev1.NodeSelectorOpExists, corev1.NodeSelectorOpDoesNotExist:
			if len(r.Values) > 0 {
				v.add(field.Forbidden(ip.Child("values"), "may not be specified when operator is Exists or DoesNotExist"))
			}
		case corev1.NodeSelectorOpGt, corev1.NodeSelectorOpLt:
			if len(r.Values) != 1 {
				v.add(field.Required(ip.Child("values"), "must be one value when operator is Gt or Lt"))
			} else if _, err := strconv.ParseInt(r.Values[0], 10, 64); err != nil {
				v.add(field.Invalid(ip.Child("values").Index(0), r.Values[0], "must be an integer when operator is Gt or Lt"))
			}
		default:
			v.add(field.NotSupported(ip.Child("operator"), r.Operator, nodeSelectorOperators))
		}
		if fields {
			if r.Key != "metadata.name" {
				v.add(field.NotSupported(ip.Child("key"), r.Key, []string{"metadata.name"}))
			}
			if (r.Operator != corev1.NodeSelectorOpIn && r.Operator != corev1.NodeSelectorOpNotIn) || len(r.Values) != 1 {
				v.add(field.Invalid(ip, r.Operator, "matchFields takes operator In or NotIn with one value"))
			}
			continue
		}
		for _, msg := range content.IsLabelKey(r.Key) {
			v.add(field.Invalid(ip.Child("key"), r.Key, msg))
		}
	}
}

func (v *validator) nodeSelectorTerm(p *field.Path, t corev1.NodeSelectorTerm) {
	v.nodeSelectorRequirements(p.Child("matchExpressions"), t.MatchExpressions, false)
	v.nodeSelectorRequirements(p.Child("matchFields"), t.MatchFields, true)
}

func (v *validator) weight(p *field.Path, w int32) {
	if w < 1 || w > 100 {
		v.add(field.Invalid(p, w, "must be in the range 1-100"))
	}
}

func (v *validator) labelSelector(p *field.Path, s *metav1.LabelSelector) {
	v.add(metav1validation.ValidateLabelSelector(s, metav1validation.LabelSelectorValidationOptions{}, p)...)
}

func (v *validator) podAffinityTerm(p *field.Path, t corev1.PodAffinityTerm) {
	v.labelSelector(p.Child("labelSelector"), t.LabelSelector)
	v.labelSelector(p.Child("namespaceSelector"), t.NamespaceSelector)
	for i, ns := range t.Namespaces {
		for _, msg := range content.IsDNS1123Label(ns) {
			v.add(field.Invalid(p.Child("namespaces").Index(i), ns, msg))
		}
	}
	if t.TopologyKey == "" {
		v.add(field.Required(p.Child("topologyKey"), "can not be empty"))
	} else {
		for _, msg := range content.IsLabelKey(t.TopologyKey) {
			v.add(field.Invalid(p.Child("topologyKey"), t.TopologyKey, msg))
		}
	}
	for i, k := range t.MatchLabelKeys {
		for _, msg := range content.IsLabelKey(k) {
			v.add(field.Invalid(p.Child("matchLabelKeys").Index(i), k, msg))
		}
	}
	for i, k := range t.MismatchLabelKeys {
		for _, msg := range content.IsLabelKey(k) {
			v.add(field.Invalid(p.Child("mismatchLabelKeys").Index(i), k, msg))
		}
	}
	if (len(t.MatchLabelKeys) > 0 || len(t.MismatchLabelKeys) > 0) && t.LabelSelector == nil {
		v.add(field.Forbidden(p.Child("matchLabelKeys"), "matchLabelKeys and mismatchLabelKeys need a labelSelector"))
	}
}

func (v *validator) podAffinity(p *field.Path, required []corev1.PodAffinityTerm, preferred []corev1.WeightedPodAffinityTerm) {
	for i, t := range required {
		v.podAffinityTerm(p.Child("requiredDuringSchedulingIgnoredDuringExecution").Index(i), t)
	}
	for i, t := range preferred {
		ip := p.Child("preferredDuringSchedulingIgnoredDuringExecution").Index(i)
		v.weight(ip.Child("weight"), t.Weight)
		v.podAffinityTerm(ip.Child("podAffinityTerm"), t.PodAffinityTerm)
	}
}

// affinity checks an affinity as the API server checks a pod's.
func (v *validator) affinity(p *field.Path, a *corev1.Affinity) {
	if a == nil {
		return
	}
	if na := a.NodeAffinity; na != nil {
		np := p.Child("nodeAffinity")
		if r := na.RequiredDuringSchedulingIgnoredDuringExecution; r != nil {
			rp := np.Child("requiredDuringSchedulingIgnoredDuringExecution")
			if len(r.NodeSelectorTerms) == 0 {
				v.add(field.Required(rp.Child("nodeSelectorTerms"), "must have at least one node selector term"))
			}
			for i, t := range r.NodeSelectorTerms {
				v.nodeSelectorTerm(rp.Child("nodeSelectorTerms").Index(i), t)
			}
		}
		for i, t := range na.PreferredDuringSchedulingIgnoredDuringExecution {
			ip := np.Child("preferredDuringSchedulingIgnoredDuringExecution").Index(i)
			v.weight(ip.Child("weight"), t.Weight)
			v.nodeSelectorTerm(ip.Child("preference"), t.Preference)
		}
	}
	if pa := a.PodAffinity; pa != nil {
		v.podAffinity(p.Child("podAffinity"), pa.RequiredDuringSchedulingIgnoredDuringExecution, pa.PreferredDuringSchedulingIgnoredDuringExecution)
	}
	if pa := a.PodAntiAffinity; pa != nil {
		v.podAffinity(p.Child("podAntiAffinity"), pa.RequiredDuringSchedulingIgnoredDuringExecution, pa.PreferredDuringSchedulingIgnoredDuringExecution)
	}
}

// topologySpread checks topology spread constraints as the API server checks a pod's.
func (v *validator) topologySpread(p *field.Path, cs []corev1.TopologySpreadConstraint) {
	seen := map[string]bool{}
	for i, c := range cs {
		ip := p.Index(i)
		if c.MaxSkew < 1 {
			v.add(field.Invalid(ip.Child("maxSkew"), c.MaxSkew, "must be greater than zero"))
		}
		if c.TopologyKey == "" {
			v.add(field.Required(ip.Child("topologyKey"), "can not be empty"))
		} else {
			for _, msg := range content.IsLabelKey(c.TopologyKey) {
				v.add(field.Invalid(ip.Child("topologyKey"), c.TopologyKey, msg))
			}
		}
		switch c.WhenUnsatisfiable {
		case corev1.DoNotSchedule, corev1.ScheduleAnyway:
		default:
			v.add(field.NotSupported(ip.Child("whenUnsatisfiable"), c.WhenUnsatisfiable, []string{string(corev1.DoNotSchedule), string(corev1.ScheduleAnyway)}))
		}
		if c.MinDomains != nil {
			if *c.MinDomains < 1 {
				v.add(field.Invalid(ip.Child("minDomains"), *c.MinDomains, "must be greater than zero"))
			} else if c.WhenUnsatisfiable != corev1.DoNotSchedule {
				v.add(field.Invalid(ip.Child("minDomains"), *c.MinDomains, "may be set only when whenUnsatisfiable is DoNotSchedule"))
			}
		}
		for _, pol := range []struct {
			name string
			val  *corev1.NodeInclusionPolicy
		}{{"nodeAffinityPolicy", c.NodeAffinityPolicy}, {"nodeTaintsPolicy", c.NodeTaintsPolicy}} {
			if pol.val != nil && *pol.val != corev1.NodeInclusionPolicyHonor && *pol.val != corev1.NodeInclusionPolicyIgnore {
				v.add(field.NotSupported(ip.Child(pol.name), *pol.val, []string{string(corev1.NodeInclusionPolicyHonor), string(corev1.NodeInclusionPolicyIgnore)}))
			}
		}
		key := c.TopologyKey + "\x00" + string(c.WhenUnsatisfiable)
		if seen[key] {
			v.add(field.Duplicate(ip, fmt.Sprintf("{%s, %s}", c.TopologyKey, c.WhenUnsatisfiable)))
		}
		seen[key] = true
		v.labelSelector(ip.Child("labelSelector"), c.LabelSelector)
		for j, k := range c.MatchLabelKeys {
			for _, msg := range content.IsLabelKey(k) {
				v.add(field.Invalid(ip.Child("matchLabelKeys").Index(j), k, msg))
			}
			if c.LabelSelector != nil {
				if _, ok := c.LabelSelector.MatchLabels[k]; ok {
					v.add(field.Invalid(ip.Child("matchLabelKeys").Index(j), k, "exists in both matchLabelKeys and labelSelector"))
				}
			}
		}
	}
}

func (v *validator) storage(p *field.Path, s *v1alpha1.StorageSpec) {
	if d := s.Data; d != nil {
		dp := p.Child("data")
		if d.NFS != nil {
			v.nfs(dp.Child("nfs"), d.NFS)
		}
		v.dnsSubdomain(dp.Child("existingClaimName"), d.ExistingClaimName)
		if d.StorageClassName != nil {
			v.dnsSubdomain(dp.Child("storageClassName"), *d.StorageClassName)
		}
		v.accessModes(dp.Child("accessModes"), d.AccessModes, d.NFS == nil && d.ExistingClaimName == "")
	}
	mounts := map[string]string{}
	mountFields := map[string]string{}
	for _, m := range s.ReadOnlyMounts {
		mp := keyPath(p.Child("readOnlyMounts"), m.Name)
		if m.NFS != nil {
			v.nfs(mp.Child("nfs"), m.NFS)
		}
		v.dnsSubdomain(mp.Child("existingClaimName"), m.ExistingClaimName)
		if v.complete && m.NFS == nil && m.ExistingClaimName == "" {
			v.addRelated(field.Required(mp, "a read-only mount needs nfs or existingClaimName: no claim would ever exist for it"), mp.String())
		}
		at := m.MountPath
		atField := mp.Child("mountPath")
		if at == "" {
			if !v.complete {
				continue
			}
			at = "/data/" + m.Name
		}
		if !v.mountPath(atField, at) {
			continue
		}
		if other, ok := mounts[at]; ok {
			v.addRelated(field.Duplicate(atField, fmt.Sprintf("%s (also the mountPath of read-only mount %s)", at, other)), mountFields[at])
		}
		mounts[at] = m.Name
		mountFields[at] = atField.String()
	}
}

// mountPath checks where a read-only mount appears: an absolute, clean path clear of the
// directories the operator mounts itself. It reports whether the path is usable.
func (v *validator) mountPath(p *field.Path, at string) bool {
	if !cleanAbsolute(at) {
		v.add(field.Invalid(p, at, "must be an absolute path without ., .. or empty segments"))
		return false
	}
	if at == "/" {
		v.add(field.Invalid(p, at, "must not be the root directory"))
		return false
	}
	for _, r := range reservedMounts {
		if within(at, r.path) || within(r.path, at) {
			v.add(field.Invalid(p, at, fmt.Sprintf("overlaps %s at %s, which the operator mounts", r.what, r.path)))
			return false
		}
	}
	return true
}

// cleanAbsolute reports whether p is absolute and clean (path.Clean leaves it as it is).
func cleanAbsolute(p string) bool {
	return strings.HasPrefix(p, "/") && path.Clean(p) == p
}

// within reports whether p is dir or lies beneath it (both clean and absolute).
func within(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

var accessModes = []string{string(corev1.ReadWriteOnce), string(corev1.ReadOnlyMany), string(corev1.ReadWriteMany), string(corev1.ReadWriteOncePod)}

func (v *validator) accessModes(p *field.Path, modes []corev1.PersistentVolumeAccessMode, claim bool) {
	for i, m := range modes {
		if !slices.Contains(accessModes, string(m)) {
			v.add(field.NotSupported(p.Index(i), m, accessModes))
		}
	}
	if slices.Contains(modes, corev1.ReadWriteOncePod) && len(modes) > 1 {
		v.add(field.Forbidden(p, "may not use ReadWriteOncePod with other access modes"))
	}
	if claim && len(modes) > 0 && !slices.ContainsFunc(modes, func(m corev1.PersistentVolumeAccessMode) bool { return m != corev1.ReadOnlyMany }) {
		v.add(field.Invalid(p, modes, "the data volume must be writable: ReadOnlyMany alone cannot hold Tiled's data"))
	}
}

// nfs checks an NFS export: a host name or IP address without a port, an absolute clean path, and,
// in an expanded spec, both present.
func (v *validator) nfs(p *field.Path, n *v1alpha1.NFSVolumeSource) {
	if n.Server != "" {
		if msg := nfsServerError(n.Server); msg != "" {
			v.add(field.Invalid(p.Child("server"), n.Server, msg))
		}
	} else if v.complete {
		v.addRelated(field.Required(p.Child("server"), "an NFS volume needs the server's host name or address"), p.String())
	}
	if n.Path != "" {
		if !cleanAbsolute(n.Path) {
			v.add(field.Invalid(p.Child("path"), n.Path, "must be an absolute path without ., .. or empty segments"))
		}
	} else if v.complete {
		v.addRelated(field.Required(p.Child("path"), "an NFS volume needs the exported directory (path or pathExpression)"), p.String())
	}
}

// nfsServerError says why s cannot be an NFS server, or "".
func nfsServerError(s string) string {
	if net.ParseIP(s) != nil {
		return ""
	}
	if host, port, err := net.SplitHostPort(s); err == nil {
		n, perr := strconv.Atoi(port)
		if perr != nil || n < 1 || n > 65535 {
			return fmt.Sprintf("must be a host name or IP address; %q is not a port (1-65535), and NFS servers take no port here", port)
		}
		return fmt.Sprintf("must be a host name or IP address without a port (%s, not %s)", host, s)
	}
	if strings.Contains(s, "://") {
		return "must be a host name or IP address, not a URL"
	}
	if msgs := content.IsDNS1123Subdomain(s); len(msgs) > 0 {
		return "must be an IP address or a lower-case DNS name: " + strings.Join(msgs, "; ")
	}
	return ""
}

func (v *validator) database(p *field.Path, d *v1alpha1.DatabaseSpec) {
	if m := d.Managed; m != nil {
		mp := p.Child("managed")
		if m.Image != "" {
			v.image(mp.Child("image"), m.Image)
		}
		if m.StorageClassName != nil {
			v.dnsSubdomain(mp.Child("storageClassName"), *m.StorageClassName)
		}
		v.resources(mp.Child("resources"), m.Resources)
		v.labels(mp.Child("nodeSelector"), m.NodeSelector)
		v.tolerations(mp.Child("tolerations"), m.Tolerations)
	}
	if e := d.External; e != nil {
		ep := p.Child("external")
		if r := e.URISecretRef; r != nil {
			v.secretRef(ep.Child("uriSecretRef"), r)
		} else if v.complete {
			v.addRelated(field.Required(ep.Child("uriSecretRef"), "an external database needs the Secret holding its connection URI"), ep.String())
		}
	}
}

func (v *validator) secretRef(p *field.Path, r *v1alpha1.SecretKeyRef) {
	v.dnsSubdomain(p.Child("name"), r.Name)
	if r.Key != "" {
		for _, msg := range validation.IsConfigMapKey(r.Key) {
			v.add(field.Invalid(p.Child("key"), r.Key, msg))
		}
	}
}

func (v *validator) auth(p *field.Path, a *v1alpha1.AuthSpec) {
	if k := a.SingleUserAPIKey; k != nil && k.SecretRef != nil {
		v.secretRef(p.Child("singleUserAPIKey", "secretRef"), k.SecretRef)
	}
	o := a.OIDC
	if o == nil {
		return
	}
	op := p.Child("oidc")
	names := map[string]bool{}
	for _, pr := range o.Providers {
		pp := keyPath(op.Child("providers"), pr.Name)
		names[pr.Name] = true
		if pr.ClientSecretRef != nil {
			v.secretRef(pp.Child("clientSecretRef"), pr.ClientSecretRef)
		}
		if !v.complete {
			continue
		}
		if pr.ClientID == "" {
			v.addRelated(field.Required(pp.Child("clientID"), "an OIDC provider needs the client id registered with it"), pp.String())
		}
		if pr.ClientSecretRef == nil {
			v.addRelated(field.Required(pp.Child("clientSecretRef"), "an OIDC provider needs the Secret holding its client secret"), pp.String())
		}
		if pr.WellKnownURI == "" {
			v.addRelated(field.Required(pp.Child("wellKnownURI"), "an OIDC provider needs its OpenID configuration URL"), pp.String())
		}
	}
	if v.complete && len(o.Providers) == 0 {
		v.addRelated(field.Required(op.Child("providers"), "OIDC authentication needs at least one provider"), op.String())
	}
	for i, admin := range o.Admins {
		ap := op.Child("admins").Index(i)
		prov, id, ok := strings.Cut(admin, ":")
		switch {
		case !ok || prov == "" || id == "":
			v.add(field.Invalid(ap, admin, "must be provider:id, e.g. orcid:0000-0001-2345-6789"))
		case v.complete && !names[prov]:
			v.addRelated(field.Invalid(ap, admin, fmt.Sprintf("names provider %q, which is not among spec.auth.oidc.providers", prov)), op.Child("providers").String())
		}
	}
}

func (v *validator) expose(p *field.Path, e *v1alpha1.ExposeSpec) {
	if s := e.Service; s != nil {
		v.annotations(p.Child("service", "annotations"), s.Annotations)
	}
	in := e.Ingress
	if in == nil {
		return
	}
	ip := p.Child("ingress")
	v.dnsSubdomain(ip.Child("className"), in.ClassName)
	v.dnsSubdomain(ip.Child("tlsSecretName"), in.TLSSecretName)
	v.annotations(ip.Child("annotations"), in.Annotations)
	if in.Host != "" {
		h := in.Host
		var msgs []string
		if strings.HasPrefix(h, "*.") {
			msgs = content.IsDNS1123Subdomain(h[2:])
		} else {
			msgs = content.IsDNS1123Subdomain(h)
		}
		if net.ParseIP(h) != nil {
			msgs = append(msgs, "must be a DNS name, not an IP address")
		}
		for _, msg := range msgs {
			v.add(field.Invalid(ip.Child("host"), h, msg))
		}
	} else if v.complete && in.Enabled != nil && *in.Enabled {
		v.addRelated(field.Required(ip.Child("host"), "an enabled Ingress needs a host (host or hostExpression)"), ip.Child("enabled").String())
	}
}

// config checks the free-form Tiled configuration: keys Tiled's configuration model knows (in some
// supported release; configForVersion then refuses those the instance's release lacks), a port in
// range and, complete, a config.yml that fits in a ConfigMap.
func (v *validator) config(p *field.Path, t *v1alpha1.InstanceTemplate) {
	if t.Config == nil || len(t.Config.Raw) == 0 {
		return
	}
	var frag map[string]any
	if err := json.Unmarshal(t.Config.Raw, &frag); err != nil {
		v.add(field.Invalid(p, "", "must be an object: "+err.Error()))
		return
	}
	for _, k := range render.UnknownConfigKeysFor("", frag) {
		v.add(field.NotSupported(configKeyPath(p, k), "", []string{"the keys of Tiled's configuration (releases " + tiledversion.Oldest + " to " + tiledversion.Newest + ")"}))
	}
	v.configForVersion(p, t, frag)
	if u, ok := frag["uvicorn"].(map[string]any); ok {
		if port, ok := u["port"]; ok {
			n, isNum := port.(float64)
			if !isNum || n != float64(int64(n)) || n < 1 || n > 65535 {
				v.add(field.Invalid(p.Child("uvicorn", "port"), port, "must be a port number, 1-65535"))
			}
		}
	}
	// A large fragment is measured as the ConfigMap will hold it; a small one cannot be too large.
	if v.complete && len(t.Config.Raw) > MaxConfigBytes/2 {
		ti := &v1alpha1.TiledInstance{Spec: v1alpha1.TiledInstanceSpec{InstanceTemplate: *t}}
		ti.Name, ti.Namespace = "size", "size"
		cfg, err := render.Config(ti, render.Inputs{ExternalSecretKeys: []string{render.ExternalKeyStorageURI, render.ExternalKeyAuthURI}})
		size := len(t.Config.Raw)
		if err == nil {
			if b, err := yaml.Marshal(cfg); err == nil {
				size = len(b)
			}
		}
		if size > MaxConfigBytes {
			v.add(field.TooLong(p, fmt.Sprintf("<config.yml of %d bytes>", size), MaxConfigBytes))
		}
	}
}

// configKeyPath is the field path of the dotted key k of spec.config (at p).
func configKeyPath(p *field.Path, k string) *field.Path {
	parts := strings.Split(k, ".")
	return p.Child(parts[0], parts[1:]...)
}

// configForVersion refuses the keys of spec.config (at p, parsed as frag) that the configuration of
// the Tiled release the instance runs lacks (tiledversion.Lacking): keys of other releases of the
// supported range, which that release would refuse to start on. The release is
// tiledversion.Of(spec.tiled.image, spec.tiled.version). In an expanded instance (complete) the
// image is the final one (expansion's default image when no layer sets one) and an image that does
// not say its release is taken for tiledversion.Newest, as the operator takes it (admission warns).
// On one layer, the release is the one the layer itself names by its image or its version, since
// it says which Tiled its settings are for; a layer that names none is checked once expanded.
func (v *validator) configForVersion(p *field.Path, t *v1alpha1.InstanceTemplate, frag map[string]any) {
	version, source, ok := v.release(t)
	if !ok {
		return
	}
	tiled := p.Root().Child("tiled")
	unknown := render.UnknownConfigKeysFor("", frag)
	for _, k := range render.UnknownConfigKeysFor(version, frag) {
		if slices.Contains(unknown, k) {
			continue // refused as unknown to every release
		}
		why, _ := tiledversion.Lacking(version, k)
		v.addRelated(&field.Error{Type: field.ErrorTypeNotSupported, Field: configKeyPath(p, k).String(), BadValue: field.OmitValueType{},
			Detail: fmt.Sprintf("Tiled %s (%s) has no configuration key %s (%s)", version, source, k, why)},
			tiled.Child("image").String(), tiled.Child("version").String())
	}
}

// release is the Tiled release the template's settings are checked against, and where it comes
// from (see configForVersion); ok is false when there is none to check against yet.
func (v *validator) release(t *v1alpha1.InstanceTemplate) (version, source string, ok bool) {
	image, stated := "", ""
	if t.Tiled != nil {
		image, stated = t.Tiled.Image, t.Tiled.Version
	}
	if v.complete && image == "" {
		image = TiledImage
	}
	if image == "" && stated == "" {
		return "", "", false
	}
	version, known := tiledversion.Of(image, stated)
	if !known && !v.complete {
		return "", "", false
	}
	if _, err := tiledversion.Parse(version); err != nil {
		return "", "", false // spec.tiled.version is refused itself (tiledVersion)
	}
	switch {
	case !known:
		source = fmt.Sprintf("assumed: image %s does not say its release; set spec.tiled.version", image)
	case stated != "" && image != "":
		source = fmt.Sprintf("image %s, spec.tiled.version", image)
	case stated != "":
		source = "spec.tiled.version"
	default:
		source = "image " + image
	}
	return version, source, true
}

// streaming checks spec.streaming (at p): the managed cache's image, resources and placement, and
// that the Tiled release the instance runs can use a Redis Sentinel deployment (from 0.2.15).
func (v *validator) streaming(p *field.Path, t *v1alpha1.InstanceTemplate) {
	s := t.Streaming
	if m := s.Managed; m != nil {
		if m.Image != "" {
			v.image(p.Child("managed", "image"), m.Image)
		}
		v.resources(p.Child("managed", "resources"), m.Resources)
		v.labels(p.Child("managed", "nodeSelector"), m.NodeSelector)
		v.tolerations(p.Child("managed", "tolerations"), m.Tolerations)
	}
	if s.External == nil || s.External.Sentinel == nil || (s.Enabled != nil && !*s.Enabled) {
		return
	}
	version, source, ok := v.release(t)
	if !ok {
		return
	}
	if why, lacks := tiledversion.Lacking(version, "streaming_cache.sentinels"); lacks {
		tiled := p.Root().Child("tiled")
		v.addRelated(&field.Error{Type: field.ErrorTypeNotSupported, Field: p.Child("external", "sentinel").String(), BadValue: field.OmitValueType{},
			Detail: fmt.Sprintf("Tiled %s (%s) cannot use Redis Sentinel (%s): use external.uriSecretRef, or a newer Tiled", version, source, why)},
			tiled.Child("image").String(), tiled.Child("version").String())
	}
}

// tiledVersion checks spec.tiled.version (at p): a release x.y.z. (The CRD's pattern says as much
// to the API server; kubectl-tiled checks files without it.) A release outside the supported range
// is admitted with a warning.
func (v *validator) tiledVersion(p *field.Path, t *v1alpha1.TiledServerSpec) {
	if t == nil || t.Version == "" {
		return
	}
	if _, err := tiledversion.Parse(t.Version); err != nil {
		v.add(field.Invalid(p, t.Version, "must be a Tiled release x.y.z, e.g. "+tiledversion.Newest))
	}
}

// backupSchedule refuses a schedule the backup CronJob's API would refuse, here rather than when the
// operator applies the CronJob: standard cron (five fields) or a descriptor (@daily, @every 1h), as
// the CronJob controller parses it, and no time zone in it (spec.backup.timeZone says that).
func (v *validator) backupSchedule(p *field.Path, schedule string) {
	if schedule == "" {
		return
	}
	if strings.Contains(schedule, "TZ") {
		v.add(field.Invalid(p, schedule, "must not name a time zone (CRON_TZ or TZ): set spec.backup.timeZone"))
		return
	}
	if _, err := cron.ParseStandard(schedule); err != nil {
		v.add(field.Invalid(p, schedule, "must be a cron schedule, five fields (minute hour day-of-month month day-of-week, e.g. \"30 2 * * *\") or a descriptor (@daily): "+err.Error()))
	}
}

// maintenance refuses a window the calendar cannot read — a schedule that is not cron as a
// CronJob's, names its own zone or is an interval; an unknown time zone; a duration under a minute —
// and an exclusion that ends before it starts, each at its field (the CRD's rules say part of it to
// the API server; kubectl-tiled checks files without it).
func (v *validator) maintenance(p *field.Path, m *v1alpha1.MaintenanceSpec) {
	for i, w := range m.Windows {
		wp := p.Child("windows").Index(i)
		if _, err := calendar.LoadZone(w.TimeZone); err != nil {
			v.add(field.Invalid(wp.Child("timeZone"), w.TimeZone, err.Error()))
		} else if _, err := calendar.ParseSchedule(w.Schedule, w.TimeZone); err != nil {
			v.add(field.Invalid(wp.Child("schedule"), w.Schedule, err.Error()))
		}
		if w.Duration.Duration < time.Minute {
			v.add(field.Invalid(wp.Child("duration"), w.Duration.Duration.String(), "must be at least one minute, e.g. 4h or 90m"))
		}
	}
	for _, e := range m.Exclusions {
		ep := keyPath(p.Child("exclusions"), e.Name)
		if !e.End.After(e.Start.Time) {
			v.add(field.Invalid(ep.Child("end"), e.End.UTC().Format(time.RFC3339), "must be after start ("+e.Start.UTC().Format(time.RFC3339)+")"))
		}
	}
}

// notifications refuses a webhook URL that is not http(s) with a host and, once the layers are
// merged (complete), a webhook without a URL or a secretRef without a name.
func (v *validator) notifications(p *field.Path, w *v1alpha1.NotificationWebhook, complete bool) {
	if w.URL != "" {
		if u, err := url.Parse(w.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
			// The value is not echoed: a webhook URL may carry a token.
			v.add(field.Invalid(p.Child("url"), "<redacted>", "must be an http:// or https:// URL with a host (and no user)"))
		}
	} else if complete {
		v.add(field.Required(p.Child("url"), "the webhook's http:// or https:// URL"))
	}
	if complete && w.SecretRef != nil && w.SecretRef.Name == "" {
		v.add(field.Required(p.Child("secretRef", "name"), "the Secret that holds the HMAC key"))
	}
}

// replicas refuses more than one Tiled pod on one claim that only one node can mount: replicas
// above one, or an autoscaler whose maximum is.
func (v *validator) replicas(root *field.Path, t *v1alpha1.InstanceTemplate) {
	if t.Tiled == nil || t.Storage == nil || t.Storage.Data == nil {
		return
	}
	path, count := root.Child("tiled", "replicas"), int32(1)
	if t.Tiled.Replicas != nil {
		count = *t.Tiled.Replicas
	}
	if a := t.Tiled.Autoscaling; a != nil && a.Enabled != nil && *a.Enabled {
		path, count = root.Child("tiled", "autoscaling", "maxReplicas"), 3
		if a.MaxReplicas != nil {
			count = *a.MaxReplicas
		}
	}
	if count <= 1 {
		return
	}
	d := t.Storage.Data
	if d.NFS != nil || d.ExistingClaimName != "" {
		return
	}
	modes := d.AccessModes
	if len(modes) == 0 {
		modes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	}
	if !slices.Contains(modes, corev1.ReadWriteMany) {
		v.addRelated(field.Invalid(path, count,
			fmt.Sprintf("%d replicas share one data claim with access modes %v, which pods on different nodes cannot mount together: use storage.data.accessModes [ReadWriteMany] (on a storage class that supports it) or NFS, or one replica",
				count, modes)), root.Child("storage", "data", "accessModes").String())
	}
}

// IngressHostWithoutEnabled reports an Ingress given a host (or a host expression) but not enabled:
// nothing is created, which is easy to miss, so admission warns and the instance says so.
func IngressHostWithoutEnabled(t *v1alpha1.InstanceTemplate) bool {
	if t.Expose == nil || t.Expose.Ingress == nil {
		return false
	}
	in := t.Expose.Ingress
	return in.Enabled == nil && (in.Host != "" || in.HostExpression != "")
}
