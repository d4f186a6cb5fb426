package render

import (
	"testing"

	. "github.com/onsi/gomega"
)

func TestRenderErrors(t *testing.T) {
	g := NewWithT(t)
	ti := singleUserManaged()
	ti.Spec.Database = nil
	_, err := Render(ti, Inputs{})
	g.Expect(err).To(MatchError(ContainSubstring("spec.database")))

	_, err = Render(oidcExternal(), Inputs{ExternalSecretKeys: []string{"uri"}})
	g.Expect(err).To(MatchError(ContainSubstring(ExternalKeyAuthURI)))

	ti = oidcExternal()
	ti.Spec.Auth.OIDC.Admins = []string{"nobody"}
	_, err = Render(ti, Inputs{ExternalSecretKeys: []string{ExternalKeyAuthURI}})
	g.Expect(err).To(MatchError(ContainSubstring("provider:id")))

	ti = singleUserManaged()
	ti.Spec.Tiled.Image = ""
	_, err = Render(ti, Inputs{})
	g.Expect(err).To(MatchError(ContainSubstring("spec.tiled.image")))

	ti = singleUserManaged()
	ti.Spec.Database.Managed.Image = ""
	_, err = Render(ti, Inputs{})
	g.Expect(err).To(MatchError(ContainSubstring("spec.database.managed.image")))
}

func TestOptionalObjects(t *testing.T) {
	g := NewWithT(t)
	o, _ := Render(singleUserManaged(), Inputs{ServiceMonitorAvailable: true})
	g.Expect(o.Ingress).To(BeNil())
	g.Expect(o.PDB).To(BeNil())
	g.Expect(o.ServiceMonitor).To(BeNil()) // not asked for
	g.Expect(o.Volumes).To(BeEmpty())
	g.Expect(o.Postgres).NotTo(BeNil())
	g.Expect(o.StatefulSet.Spec.VolumeClaimTemplates).To(BeEmpty())
	g.Expect(o.Claims).To(HaveLen(2)) // data and database, the operator's own claims
	g.Expect(*o.Claims[0].Name).To(Equal(o.Names.DataClaim))
	g.Expect(*o.Claims[1].Name).To(Equal(o.Names.DatabaseClaim))
	g.Expect(o.Claims[0].Annotations).To(HaveKeyWithValue(AnnotationRetention, "Retain"))
	g.Expect(Retained(singleUserManaged())).To(BeTrue())

	o, _ = Render(nfsScaled(), Inputs{ServiceMonitorAvailable: true})
	g.Expect(o.PDB).NotTo(BeNil())
	g.Expect(o.ServiceMonitor).NotTo(BeNil())
	g.Expect(o.Volumes).To(HaveLen(2)) // NFS data + the NFS detector mount, not the existing claim
	g.Expect(o.StatefulSet.Spec.VolumeClaimTemplates).To(BeEmpty())
	for _, c := range o.Claims {
		g.Expect(*c.Name).NotTo(Equal(o.Names.DataClaim), "NFS data has no storage-class claim")
	}

	o, _ = Render(nfsScaled(), Inputs{ServiceMonitorAvailable: false})
	g.Expect(o.ServiceMonitor).To(BeNil())

	o, _ = Render(oidcExternal(), Inputs{ExternalSecretKeys: []string{ExternalKeyAuthURI}, ServiceMonitorAvailable: true})
	g.Expect(o.ServiceMonitor).To(BeNil()) // not asked for
	g.Expect(o.MetricsSecret).To(BeNil())
	g.Expect(o.Postgres).To(BeNil())
	g.Expect(o.Ingress).NotTo(BeNil())
}
