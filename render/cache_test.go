package render

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// TestStreamingCacheConfig: Tiled's streaming_cache for each kind of cache, secrets only as ${VAR}
// references fed from Secrets, and nothing at all when streaming is off.
func TestStreamingCacheConfig(t *testing.T) {
	cases := []struct {
		name    string
		edit    func(*v1alpha1.TiledInstance)
		in      Inputs
		want    map[string]any
		env     map[string]string // variable -> "secret/key"
		secrets []string          // keys of the instance's Secret
	}{
		{
			name:    "managed",
			want:    map[string]any{"uri": "redis://:${STREAMING_CACHE_PASSWORD}@nsls2-csx-cache.beamlines.svc:6379/0", "data_ttl": 3600, "seq_ttl": 2592000},
			env:     map[string]string{EnvStreamingCachePassword: "nsls2-csx-secret/" + SecretKeyStreamingCachePassword},
			secrets: []string{SecretKeyDatabasePassword, SecretKeyStreamingCachePassword},
		},
		{
			name:    "managed, address given (the conformance suite)",
			in:      Inputs{CacheAddress: "127.0.0.1:7000"},
			want:    map[string]any{"uri": "redis://:${STREAMING_CACHE_PASSWORD}@127.0.0.1:7000/0", "data_ttl": 3600, "seq_ttl": 2592000},
			env:     map[string]string{EnvStreamingCachePassword: "nsls2-csx-secret/" + SecretKeyStreamingCachePassword},
			secrets: []string{SecretKeyDatabasePassword, SecretKeyStreamingCachePassword},
		},
		{
			name: "external by URI, default key",
			edit: func(ti *v1alpha1.TiledInstance) {
				ti.Spec.Streaming.Managed = nil
				ti.Spec.Streaming.External = &v1alpha1.ExternalCache{URISecretRef: &v1alpha1.SecretKeyRef{Name: "facility-redis"}}
				ti.Spec.Streaming.SequenceTTLSeconds = nil
			},
			want:    map[string]any{"uri": "${STREAMING_CACHE_URI}", "data_ttl": 3600},
			env:     map[string]string{EnvStreamingCacheURI: "facility-redis/uri"},
			secrets: []string{SecretKeyDatabasePassword},
		},
		{
			name: "external Sentinel without a password",
			edit: func(ti *v1alpha1.TiledInstance) {
				ti.Spec.Streaming.Managed = nil
				ti.Spec.Streaming.External = &v1alpha1.ExternalCache{Sentinel: &v1alpha1.CacheSentinel{Addresses: []string{"s0:26379"}, ServiceName: "tiled"}}
			},
			want:    map[string]any{"sentinels": []any{"s0:26379"}, "service_name": "tiled", "data_ttl": 3600, "seq_ttl": 2592000},
			env:     map[string]string{},
			secrets: []string{SecretKeyDatabasePassword},
		},
		{
			name:    "off",
			edit:    func(ti *v1alpha1.TiledInstance) { ti.Spec.Streaming.Enabled = ptr.To(false) },
			env:     map[string]string{},
			secrets: []string{SecretKeyDatabasePassword},
		},
		{
			name:    "absent",
			edit:    func(ti *v1alpha1.TiledInstance) { ti.Spec.Streaming = nil },
			env:     map[string]string{},
			secrets: []string{SecretKeyDatabasePassword},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			ti := singleUserManaged()
			if tc.edit != nil {
				tc.edit(ti)
			}
			cfg, err := Config(ti, tc.in)
			g.Expect(err).NotTo(HaveOccurred())
			if tc.want == nil {
				g.Expect(cfg).NotTo(HaveKey("streaming_cache"))
			} else {
				g.Expect(cfg).To(HaveKeyWithValue("streaming_cache", tc.want))
			}
			got := map[string]string{}
			for _, e := range tiledEnv(ti, tc.in.names(ti), tc.in) {
				if strings.HasPrefix(*e.Name, "STREAMING_CACHE") {
					g.Expect(e.Value).To(BeNil(), "%s holds a secret: it must come from a Secret", *e.Name)
					got[*e.Name] = *e.ValueFrom.SecretKeyRef.Name + "/" + *e.ValueFrom.SecretKeyRef.Key
				}
			}
			g.Expect(got).To(Equal(tc.env))
			keys := SecretKeys(ti)
			for _, k := range []string{SecretKeyDatabasePassword, SecretKeyStreamingCachePassword} {
				if contains(tc.secrets, k) {
					g.Expect(keys).To(ContainElement(k))
				} else {
					g.Expect(keys).NotTo(ContainElement(k))
				}
			}
			svc, sts := StreamingCache(ti, tc.in)
			g.Expect(svc == nil).To(Equal(sts == nil))
			g.Expect(sts != nil).To(Equal(contains(tc.secrets, SecretKeyStreamingCachePassword)), "a cache pod exactly when the operator runs the cache")
		})
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestStreamingCachePod: the password reaches the cache through its Secret and a file only it can
// read (never its command line), maxmemory follows the memory limit, and the pod is restricted.
func TestStreamingCachePod(t *testing.T) {
	g := NewWithT(t)
	ti := singleUserManaged()
	_, sts := StreamingCache(ti, Inputs{})
	p := podTemplates(g, &Objects{StatefulSet: mustStatefulSet(g, ti), Cache: sts})["cache"]
	g.Expect(p.Spec.Containers).To(HaveLen(1))
	c := p.Spec.Containers[0]
	g.Expect(c.Command).To(Equal([]string{"/bin/sh", "-c", CacheScript}))
	g.Expect(CacheScript).To(ContainSubstring("umask 077"))
	g.Expect(CacheScript).To(ContainSubstring(`requirepass "%s"`))
	g.Expect(CacheScript).To(ContainSubstring("exec redis-server " + cacheConfigPath))
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	g.Expect(env[EnvStreamingCachePassword].ValueFrom.SecretKeyRef.Key).To(Equal(SecretKeyStreamingCachePassword))
	g.Expect(env["REDISCLI_AUTH"].ValueFrom.SecretKeyRef.Key).To(Equal(SecretKeyStreamingCachePassword))
	// 256Mi limit: maxmemory nine tenths of it.
	g.Expect(env[EnvCacheMaxMemory].Value).To(Equal("241591905"))
	g.Expect(*p.Spec.SecurityContext.RunAsNonRoot).To(BeTrue())
	g.Expect(*c.SecurityContext.AllowPrivilegeEscalation).To(BeFalse())
	g.Expect(c.ReadinessProbe.Exec.Command).To(ContainElement(ContainSubstring("redis-cli")))

	ti.Spec.Streaming.Managed.Resources = nil
	_, sts = StreamingCache(ti, Inputs{})
	for _, e := range sts.Spec.Template.Spec.Containers[0].Env {
		if *e.Name == EnvCacheMaxMemory {
			g.Expect(*e.Value).To(Equal("0"), "no memory limit: no maxmemory")
		}
	}
}

func mustStatefulSet(g Gomega, ti *v1alpha1.TiledInstance) *appsv1ac.StatefulSetApplyConfiguration {
	sts, err := StatefulSet(ti, Inputs{SecretData: secretData}, "hash")
	g.Expect(err).NotTo(HaveOccurred())
	return sts
}

// TestAutoscaling: an enabled autoscaler leaves replicas to itself (none rendered), scales the Tiled
// StatefulSet between its bounds on the Tiled container's CPU, and keeps Tiled stopped when the
// upgrade procedure stops it; off, replicas are rendered and there is no autoscaler.
func TestAutoscaling(t *testing.T) {
	g := NewWithT(t)
	ti := nfsScaled()
	o, err := Render(ti, Inputs{SecretData: secretData})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(o.StatefulSet.Spec.Replicas).To(BeNil())
	g.Expect(o.HPA).NotTo(BeNil())
	g.Expect(*o.HPA.Name).To(Equal(*o.StatefulSet.Name))
	g.Expect(*o.HPA.Spec.ScaleTargetRef.Kind).To(Equal("StatefulSet"))
	g.Expect(*o.HPA.Spec.ScaleTargetRef.Name).To(Equal(*o.StatefulSet.Name))
	g.Expect(*o.HPA.Spec.MinReplicas).To(Equal(int32(2)))
	g.Expect(o.HPA.Spec.MaxReplicas).To(Equal(ptr.To[int32](6)))
	g.Expect(*o.HPA.Spec.Metrics[0].ContainerResource.Container).To(Equal("tiled"))
	g.Expect(*o.HPA.Spec.Metrics[0].ContainerResource.Target.AverageUtilization).To(Equal(int32(60)))
	g.Expect(*o.HPA.Spec.Behavior.ScaleDown.StabilizationWindowSeconds).To(Equal(int32(120)))
	g.Expect(o.PDB).NotTo(BeNil(), "up to six pods: a disruption budget")

	o, err = Render(ti, Inputs{SecretData: secretData, Lifecycle: &Lifecycle{Stopped: true}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(o.StatefulSet.Spec.Replicas).To(Equal(ptr.To[int32](0)), "stopped: no pods, and the autoscaler does not scale from 0")

	ti.Spec.Tiled.Autoscaling.Enabled = ptr.To(false)
	o, err = Render(ti, Inputs{SecretData: secretData})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(o.HPA).To(BeNil())
	g.Expect(o.StatefulSet.Spec.Replicas).To(Equal(ptr.To[int32](3)))
}
