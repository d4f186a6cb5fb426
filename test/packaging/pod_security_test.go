package packaging

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"k8s.io/utils/ptr"
)

// violations evaluates a pod template against the latest restricted Pod Security Standard with the
// evaluator the PodSecurity admission plugin itself uses.
func violations(t *testing.T, tmpl *corev1.PodTemplateSpec) []string {
	t.Helper()
	ev, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range ev.EvaluatePod(api.LevelVersion{Level: api.LevelRestricted, Version: api.LatestVersion()}, &tmpl.ObjectMeta, &tmpl.Spec) {
		if !r.Allowed {
			out = append(out, r.ForbiddenReason+": "+r.ForbiddenDetail)
		}
	}
	return out
}

func managerDeployment(t *testing.T) *appsv1.Deployment {
	return one[appsv1.Deployment](t, renderDefault(t), "Deployment")
}

func TestManagerRestrictedPodSecurityStandard(t *testing.T) {
	dep := managerDeployment(t)
	if v := violations(t, &dep.Spec.Template); len(v) > 0 {
		t.Errorf("manager pod template violates the restricted Pod Security Standard:\n%s", strings.Join(v, "\n"))
	}
}

// Each rule of the standard, asserted on its own, so that a failure names the rule.
func TestManagerSecurityRules(t *testing.T) {
	dep := managerDeployment(t)
	pod := dep.Spec.Template.Spec
	if pod.SecurityContext == nil {
		t.Fatal("no pod securityContext")
	}
	if pod.HostNetwork || pod.HostPID || pod.HostIPC {
		t.Error("host namespaces are shared")
	}
	if !ptr.Deref(pod.SecurityContext.RunAsNonRoot, false) {
		t.Error("pod runAsNonRoot is not true")
	}
	if u := pod.SecurityContext.RunAsUser; u != nil && *u == 0 {
		t.Error("pod runs as uid 0")
	}
	if sp := pod.SecurityContext.SeccompProfile; sp == nil || sp.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Error("pod seccompProfile is not RuntimeDefault")
	}
	for _, v := range pod.Volumes {
		if v.EmptyDir == nil && v.ConfigMap == nil && v.Secret == nil && v.Projected == nil && v.DownwardAPI == nil {
			t.Errorf("volume %s is of a type the restricted standard does not allow", v.Name)
		}
	}
	all := append(slices.Clone(pod.InitContainers), pod.Containers...)
	if len(pod.Containers) != 1 {
		t.Fatalf("manager pod has %d containers, want 1", len(pod.Containers))
	}
	for _, c := range all {
		sc := c.SecurityContext
		if sc == nil {
			t.Errorf("container %s: no securityContext", c.Name)
			continue
		}
		if !ptr.Deref(sc.RunAsNonRoot, ptr.Deref(pod.SecurityContext.RunAsNonRoot, false)) {
			t.Errorf("container %s: runAsNonRoot is not true", c.Name)
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("container %s: allowPrivilegeEscalation is not false", c.Name)
		}
		if ptr.Deref(sc.Privileged, false) {
			t.Errorf("container %s: privileged", c.Name)
		}
		if !ptr.Deref(sc.ReadOnlyRootFilesystem, false) {
			t.Errorf("container %s: readOnlyRootFilesystem is not true", c.Name)
		}
		if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
			t.Errorf("container %s: capabilities are not exactly drop [ALL]", c.Name)
		}
		if sp := sc.SeccompProfile; sp != nil && sp.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("container %s: seccompProfile %s", c.Name, sp.Type)
		}
		for _, p := range c.Ports {
			if p.HostPort != 0 {
				t.Errorf("container %s: hostPort %d", c.Name, p.HostPort)
			}
		}
		if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
			t.Errorf("container %s: cpu and memory requests and a memory limit are required, got %v", c.Name, c.Resources)
		}
	}
}

// The manager's flags, probes and ports agree with cmd/manager and operator.NewManager.
func TestManagerProbesAndFlags(t *testing.T) {
	dep := managerDeployment(t)
	c := dep.Spec.Template.Spec.Containers[0]
	for _, flag := range []string{"--leader-elect", "--health-probe-bind-address=:8081", "--metrics-bind-address=:8443", "--metrics-secure=true"} {
		if !slices.Contains(c.Args, flag) {
			t.Errorf("manager args %v lack %s", c.Args, flag)
		}
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	for name, probe := range map[string]*corev1.Probe{"/healthz": c.LivenessProbe, "/readyz": c.ReadinessProbe} {
		if probe == nil || probe.HTTPGet == nil {
			t.Errorf("no HTTP probe on %s", name)
			continue
		}
		port := probe.HTTPGet.Port.IntVal
		if probe.HTTPGet.Port.StrVal != "" {
			port = ports[probe.HTTPGet.Port.StrVal]
		}
		if probe.HTTPGet.Path != name || port != 8081 {
			t.Errorf("probe %s is %s on port %d, want %s on 8081", name, probe.HTTPGet.Path, port, name)
		}
	}
	if ports["https-metrics"] != 8443 {
		t.Errorf("metrics port is %d, want 8443", ports["https-metrics"])
	}
}

// The checks above must be able to fail.
func TestPodSecurityCheckCatchesViolations(t *testing.T) {
	breakers := map[string]func(*corev1.PodSpec){
		"privilege escalation": func(s *corev1.PodSpec) { s.Containers[0].SecurityContext.AllowPrivilegeEscalation = ptr.To(true) },
		"root":                 func(s *corev1.PodSpec) { s.SecurityContext.RunAsUser = ptr.To[int64](0) },
		"no seccomp": func(s *corev1.PodSpec) {
			s.SecurityContext.SeccompProfile = nil
			s.Containers[0].SecurityContext.SeccompProfile = nil
		},
		"capability added": func(s *corev1.PodSpec) {
			s.Containers[0].SecurityContext.Capabilities.Add = []corev1.Capability{"NET_RAW"}
		},
		"host path": func(s *corev1.PodSpec) {
			s.Volumes = append(s.Volumes, corev1.Volume{Name: "h", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}})
		},
	}
	for name, brk := range breakers {
		dep := managerDeployment(t)
		brk(&dep.Spec.Template.Spec)
		if len(violations(t, &dep.Spec.Template)) == 0 {
			t.Errorf("%s: the evaluator found no violation", name)
		}
	}
}
