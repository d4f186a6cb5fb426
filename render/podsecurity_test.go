package render

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"k8s.io/utils/ptr"
)

func restrictedViolations(g Gomega, meta *metav1.ObjectMeta, spec *corev1.PodSpec) []string {
	ev, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	g.Expect(err).NotTo(HaveOccurred())
	lv := api.LevelVersion{Level: api.LevelRestricted, Version: api.LatestVersion()}
	var out []string
	for _, r := range ev.EvaluatePod(lv, meta, spec) {
		if !r.Allowed {
			out = append(out, r.ForbiddenReason+": "+r.ForbiddenDetail)
		}
	}
	return out
}

func TestRestrictedPodSecurityStandard(t *testing.T) {
	for _, f := range fixtures() {
		t.Run(f.name, func(t *testing.T) {
			g := NewWithT(t)
			o, err := Render(f.ti(), f.in)
			g.Expect(err).NotTo(HaveOccurred())
			for name, p := range podTemplates(g, o) {
				g.Expect(restrictedViolations(g, &p.ObjectMeta, &p.Spec)).To(BeEmpty(), name)
			}
		})
	}
}

// The check must be able to fail: break the rendered template in ways the standard forbids.
func TestRestrictedPodSecurityStandardCatchesViolations(t *testing.T) {
	g := NewWithT(t)
	o, err := Render(nfsScaled(), Inputs{})
	g.Expect(err).NotTo(HaveOccurred())
	breakers := map[string]func(*corev1.PodSpec){
		"inline nfs volume": func(s *corev1.PodSpec) {
			s.Volumes = append(s.Volumes, corev1.Volume{Name: "x", VolumeSource: corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{Server: "nfs", Path: "/x"}}})
		},
		"privilege escalation": func(s *corev1.PodSpec) { s.Containers[0].SecurityContext.AllowPrivilegeEscalation = ptr.To(true) },
		"root user":            func(s *corev1.PodSpec) { s.InitContainers[0].SecurityContext.RunAsUser = ptr.To[int64](0) },
		"capabilities kept": func(s *corev1.PodSpec) {
			s.Containers[0].SecurityContext.Capabilities = &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}}
		},
		"no seccomp": func(s *corev1.PodSpec) {
			s.SecurityContext.SeccompProfile = nil
			s.Containers[0].SecurityContext.SeccompProfile = nil
		},
	}
	for name, brk := range breakers {
		p := podTemplates(g, o)["tiled"]
		brk(&p.Spec)
		g.Expect(restrictedViolations(g, &p.ObjectMeta, &p.Spec)).NotTo(BeEmpty(), name)
	}
}
