package expansion

import (
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/names"
)

// Names of the objects of different instances must never meet: beamlines chx and chx-postgres of
// one cluster would both own the StatefulSet <cluster>-chx-postgres (chx's PostgreSQL, and
// chx-postgres's Tiled), and two clusters can name one TiledInstance (cluster a-b's instance c and
// cluster a's instance b-c). ObjectNames lists what an instance's objects are called, and Collisions
// finds two instances that would share one.

// ObjectName is the kind and name of an object the operator makes for an instance.
type ObjectName struct {
	// Kind is TiledInstance, StatefulSet, Service, ConfigMap, Secret, PersistentVolumeClaim or
	// PersistentVolume (cluster-scoped: its name includes the namespace).
	Kind string
	Name string
}

// ObjectNames returns the names of the objects the operator makes, or may make, for an instance:
// the TiledInstance itself and its children, as names.For names them (the StatefulSets'
// names also name the Ingress, PodDisruptionBudget and ServiceMonitor). Names of the managed
// database's objects are included whatever the database, so that switching it on later cannot
// collide either.
func ObjectNames(ti *v1alpha1.TiledInstance) []ObjectName {
	n := names.For(ti.Namespace, ti.Name)
	out := []ObjectName{
		{"TiledInstance", ti.Name},
		{"StatefulSet", n.Tiled}, {"StatefulSet", n.Postgres},
		{"Service", n.Tiled}, {"Service", n.HeadlessService}, {"Service", n.Postgres},
		{"ConfigMap", n.ConfigMap}, {"ConfigMap", n.PostgresInit},
		{"Secret", n.Secret},
		{"PersistentVolumeClaim", n.DataClaim}, {"PersistentVolumeClaim", n.DatabaseClaim},
		{"PersistentVolume", n.DataVolume},
	}
	if s := ti.Spec.Storage; s != nil {
		for _, m := range s.ReadOnlyMounts {
			if m.ExistingClaimName != "" {
				continue
			}
			out = append(out, ObjectName{"PersistentVolumeClaim", n.ReadOnlyClaimName(m.Name)},
				ObjectName{"PersistentVolume", n.ReadOnlyVolumeName(ti.Namespace, m.Name)})
		}
	}
	return out
}

// Collision is two instances whose objects would share a name.
type Collision struct {
	// A and B are the two instances, as given to Collisions (B the later one).
	A, B *v1alpha1.TiledInstance
	// Object is the name they would share.
	Object ObjectName
}

func (c *Collision) String() string {
	return fmt.Sprintf("%s %s would belong to both TiledInstance %s and TiledInstance %s", c.Object.Kind, c.Object.Name, c.A.Name, c.B.Name)
}

// Collisions returns the first pairs of instances (by the order given; at most one per pair) whose
// objects would share a name: namespaced objects within one namespace, PersistentVolumes anywhere.
func Collisions(instances []*v1alpha1.TiledInstance) []Collision {
	type key struct{ ns, kind, name string }
	owner := map[key]int{}
	seen := map[[2]int]bool{}
	var out []Collision
	for i, ti := range instances {
		for _, o := range ObjectNames(ti) {
			k := key{ti.Namespace, o.Kind, o.Name}
			if o.Kind == "PersistentVolume" {
				k.ns = ""
			}
			j, ok := owner[k]
			if !ok {
				owner[k] = i
				continue
			}
			if j == i || seen[[2]int{j, i}] {
				continue
			}
			seen[[2]int{j, i}] = true
			out = append(out, Collision{A: instances[j], B: ti, Object: o})
		}
	}
	return out
}

// clusterCollision checks the instances of one expanded cluster: two of its beamlines whose
// objects would share a name are an *InvalidFieldError naming both.
func clusterCollision(cluster *v1alpha1.TiledCluster, res *Result) error {
	objs := res.Objects()
	short := map[*v1alpha1.TiledInstance]string{}
	for _, in := range res.Instances {
		short[in.Object] = in.Name
	}
	cs := Collisions(objs)
	if len(cs) == 0 {
		return nil
	}
	c := cs[0]
	a, b := short[c.A], short[c.B]
	names := []string{a, b}
	slices.Sort(names)
	return &InvalidFieldError{Layer: "cluster/" + cluster.Name, Field: "spec.instances[name=" + names[1] + "]",
		Reason: fmt.Sprintf("instances %s and %s collide: %s %s would belong to both (TiledInstances %s and %s); rename one of them",
			names[0], names[1], c.Object.Kind, c.Object.Name, c.A.Name, c.B.Name)}
}

// NameCollision returns an *InvalidFieldError when an object of one of mine (the instances of the
// object under admission, or read from files) would take a name that an object of one of others
// (the other instances there are) has: refused at admission, naming both, rather than one
// instance's objects quietly taking over the other's. field says where in the object an instance
// of mine comes from, e.g. spec.instances[name=chx] or metadata.name.
func NameCollision(others, mine []*v1alpha1.TiledInstance, field func(*v1alpha1.TiledInstance) string) error {
	for _, col := range Collisions(append(slices.Clip(others), mine...)) {
		if !slices.Contains(mine, col.B) || slices.Contains(mine, col.A) {
			continue
		}
		what := "the " + col.Object.Kind
		if col.Object.Kind == "TiledInstance" {
			what = "the name"
		}
		return &InvalidFieldError{Field: field(col.B), Reason: fmt.Sprintf("%s %s of %s would also be %s of %s; rename one of them",
			what, col.Object.Name, DescribeInstance(col.B), what, DescribeInstance(col.A))}
	}
	return nil
}

// DescribeInstance names a TiledInstance and, for a member of a TiledCluster, its beamline and
// cluster.
func DescribeInstance(ti *v1alpha1.TiledInstance) string {
	name := ti.Name
	if ti.Namespace != "" {
		name = ti.Namespace + "/" + ti.Name
	}
	cluster := ti.Labels[v1alpha1.LabelCluster]
	if ref := metav1.GetControllerOf(ti); ref != nil && ref.Kind == "TiledCluster" {
		cluster = ref.Name
	}
	if cluster == "" {
		return "TiledInstance " + name
	}
	return fmt.Sprintf("TiledInstance %s (instance %s of TiledCluster %s)", name, ti.Labels[v1alpha1.LabelInstance], cluster)
}
