package expansion

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// The 30 NSLS-II beamlines with three profiles expand to 30 complete instances; the output is
// pinned by a golden file.
func TestGoldenFleet(t *testing.T) {
	g := NewWithT(t)
	cluster, profs := loadFleet(t)

	// The sample lists exactly the beamlines of nsls2-beamlines.txt.
	raw, err := os.ReadFile(filepath.Join("testdata", "nsls2-beamlines.txt"))
	g.Expect(err).NotTo(HaveOccurred())
	var beamlines, listed []string
	for _, line := range strings.Split(string(raw), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			beamlines = append(beamlines, line)
		}
	}
	for _, in := range cluster.Spec.Instances {
		listed = append(listed, in.Name)
	}
	g.Expect(listed).To(ConsistOf(beamlines))
	g.Expect(beamlines).To(HaveLen(30))

	res := mustExpand(t, cluster, profs)
	g.Expect(res.Instances).To(HaveLen(30))
	g.Expect(res.BuiltinsVersion).To(Equal(BuiltinsVersion))
	g.Expect(res.Profiles).To(Equal([]v1alpha1.SelectedProfile{
		{Name: "nsls2-defaults", Generation: 3, Priority: 0},
		{Name: "nsls2-monitoring", Generation: 2, Priority: 5},
		{Name: "nsls2-mx", Generation: 1, Priority: 10},
	}))
	for _, in := range res.Instances {
		o := in.Object
		g.Expect(o.Name).To(Equal("nsls2-" + in.Name))
		g.Expect(o.Namespace).To(Equal("nsls2"))
		g.Expect(o.Labels).To(HaveKeyWithValue(v1alpha1.LabelCluster, "nsls2"))
		g.Expect(o.Labels).To(HaveKeyWithValue(v1alpha1.LabelInstance, in.Name))
		s := o.Spec
		// Complete: every part of the spec the controller reads is populated.
		g.Expect(s.Tiled.Image).To(Equal("ghcr.io/bluesky/tiled:" + TiledVersion))
		g.Expect(*s.Tiled.Replicas).To(BeEquivalentTo(1))
		g.Expect(s.Storage.Data.StorageClassName).To(HaveValue(Equal("ceph-rbd")))
		g.Expect(s.Storage.ReadOnlyMounts[0].NFS.Path).To(Equal("/nsls2/data/" + in.Name + "/proposals"))
		g.Expect(s.Storage.ReadOnlyMounts[0].NFS.PathExpression).To(BeEmpty())
		g.Expect(s.Database.Managed.Image).To(Equal("postgres:16"))
		g.Expect(s.Database.External).To(BeNil())
		g.Expect(s.Auth.SingleUserAPIKey).NotTo(BeNil())
		g.Expect(s.Expose.Ingress.Host).To(Equal(in.Name + ".tiled.nsls2.bnl.gov"))
		g.Expect(*s.Monitoring.ServiceMonitor).To(BeTrue())
		// Every leaf has a provenance entry, and nothing else has one.
		lv := leaves(t, o)
		g.Expect(o.Provenance).To(HaveLen(len(lv)))
		for path := range lv {
			g.Expect(o.Provenance).To(HaveKey(path))
		}
		g.Expect(o.Provenance).To(HaveKeyWithValue("spec.storage.readOnlyMounts[name=proposals].nfs.path", "profile/nsls2-defaults@3 (expression)"))
		if slices.Contains([]string{"amx", "fmx", "nyx"}, in.Name) {
			g.Expect(in.Profiles).To(Equal([]string{"nsls2-defaults", "nsls2-monitoring", "nsls2-mx"}))
			g.Expect(s.Tiled.Resources.Limits.Memory().String()).To(Equal("16Gi"))
			g.Expect(o.Provenance).To(HaveKeyWithValue("spec.tiled.resources.limits.memory", "profile/nsls2-mx@1"))
		} else {
			g.Expect(in.Profiles).To(Equal([]string{"nsls2-defaults", "nsls2-monitoring"}))
			g.Expect(s.Tiled.Resources.Limits.Memory().String()).To(Equal("4Gi"))
		}
	}
	golden(t, g, "fleet.golden.yaml", mustMarshal(t, res))
}

// One override changes exactly that field of exactly that instance, and provenance says so.
func TestOverrideChangesOneField(t *testing.T) {
	g := NewWithT(t)
	cluster, profs := loadFleet(t)
	with := mustExpand(t, cluster, profs)

	plain := cluster.DeepCopy()
	for i := range plain.Spec.Instances {
		plain.Spec.Instances[i].Overrides = nil
	}
	without := mustExpand(t, plain, profs)

	g.Expect(with.Instances).To(HaveLen(len(without.Instances)))
	for i := range with.Instances {
		a, b := with.Instances[i].Object, without.Instances[i].Object
		if a.Labels[v1alpha1.LabelInstance] != "chx" {
			ba, _ := Marshal(a)
			bb, _ := Marshal(b)
			g.Expect(string(ba)).To(Equal(string(bb)), "instance %s changed", a.Name)
			continue
		}
		la, lb := leaves(t, a), leaves(t, b)
		var changed []string
		for k := range la {
			if la[k] != lb[k] {
				changed = append(changed, k)
			}
		}
		for k := range lb {
			if _, ok := la[k]; !ok {
				changed = append(changed, k)
			}
		}
		g.Expect(changed).To(Equal([]string{"spec.storage.data.size"}))
		g.Expect(la["spec.storage.data.size"]).To(Equal(`"2Ti"`))
		g.Expect(lb["spec.storage.data.size"]).To(Equal(`"50Gi"`))
		for k, v := range a.Provenance {
			if k == "spec.storage.data.size" {
				g.Expect(v).To(Equal("instance/chx/overrides"))
				g.Expect(b.Provenance[k]).To(Equal("profile/nsls2-defaults@3"))
			} else {
				g.Expect(v).To(Equal(b.Provenance[k]), k)
			}
		}
		why, err := Why(a, "spec.storage.data.size")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(why).To(Equal([]FieldSource{{Path: "spec.storage.data.size", Value: `"2Ti"`, Source: "instance/chx/overrides"}}))
	}
}
