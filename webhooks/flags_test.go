package webhooks

import (
	"flag"
	"testing"

	. "github.com/onsi/gomega"
)

// The flags: --cert-management defaults to self once completed, and only knows the three modes.
func TestBindFlags(t *testing.T) {
	g := NewWithT(t)
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	o, enabled := BindFlags(fs)
	g.Expect(fs.Parse([]string{"--webhooks"})).To(Succeed())
	o.Complete()
	g.Expect(*enabled).To(BeTrue())
	g.Expect(o.mode()).To(Equal(CertSelf))
	g.Expect(o.Certs.SecretName).To(Equal("tiled-operator-webhook-ca"))

	fs = flag.NewFlagSet("t", flag.ContinueOnError)
	o, _ = BindFlags(fs)
	g.Expect(fs.Parse([]string{"--cert-management=olm"})).To(Succeed())
	o.Complete()
	o.setDefaults()
	g.Expect(o.mode()).To(Equal(CertOLM))
	g.Expect(o.CertDir).To(Equal(OLMCertDir))

	fs = flag.NewFlagSet("t", flag.ContinueOnError)
	BindFlags(fs)
	g.Expect(fs.Parse([]string{"--cert-management=vault"})).To(MatchError(ContainSubstring(`unknown certificate management "vault"`)))
}
