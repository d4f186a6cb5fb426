package render

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
)

// Every container keeps its log's tail as its termination message, so that a crash loop's last log
// line reaches the instance's conditions; no container's command holds a secret.
func TestContainersReportTheirLastLogLine(t *testing.T) {
	for _, f := range fixtures() {
		t.Run(f.name, func(t *testing.T) {
			g := NewWithT(t)
			o, err := Render(f.ti(), f.in)
			g.Expect(err).NotTo(HaveOccurred())
			for name, p := range podTemplates(g, o) {
				for _, c := range append(p.Spec.InitContainers, p.Spec.Containers...) {
					g.Expect(c.TerminationMessagePolicy).To(Equal(corev1.TerminationMessageFallbackToLogsOnError), "%s/%s", name, c.Name)
					g.Expect(strings.Join(append(c.Command, c.Args...), " ")).NotTo(ContainSubstring("golden0"), "%s/%s", name, c.Name)
				}
			}
		})
	}
}

func TestPostgresProbes(t *testing.T) {
	g := NewWithT(t)
	o, err := Render(singleUserManaged(), Inputs{})
	g.Expect(err).NotTo(HaveOccurred())
	c := podTemplates(g, o)["postgres"].Spec.Containers[0]
	g.Expect(c.StartupProbe).NotTo(BeNil())
	g.Expect(c.StartupProbe.PeriodSeconds).To(BeNumerically("==", 1))
	g.Expect(c.StartupProbe.PeriodSeconds * c.StartupProbe.FailureThreshold).To(BeNumerically(">=", 300))
	g.Expect(c.ReadinessProbe.InitialDelaySeconds).To(BeZero())
	g.Expect(c.LivenessProbe.InitialDelaySeconds).To(BeZero(), "the startup probe holds liveness back")
	g.Expect(c.ReadinessProbe.Exec.Command).To(Equal([]string{"pg_isready", "-h", "127.0.0.1", "-U", DatabaseUser, "-d", CatalogDatabase}))
}
