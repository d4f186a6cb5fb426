package render

import (
	"encoding/json"
	"math/rand"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

func TestSecretGenerationNeverOverwrites(t *testing.T) {
	g := NewWithT(t)
	rng := rand.New(rand.NewSource(1))
	ti := singleUserManaged()
	existing := map[string][]byte{}
	gen, err := GenerateSecretData(ti, existing, rng)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(gen).To(HaveLen(4))
	g.Expect(string(gen[SecretKeyAPIKey])).To(MatchRegexp(`^[A-Za-z0-9]{48}$`))
	g.Expect(string(gen[SecretKeyDatabasePassword])).To(MatchRegexp(`^[A-Za-z0-9]{32}$`))
	g.Expect(string(gen[SecretKeyStreamingCachePassword])).To(MatchRegexp(`^[A-Za-z0-9]{32}$`))
	g.Expect(gen[SecretKeyStreamingCachePassword]).NotTo(Equal(gen[SecretKeyDatabasePassword]))
	var keys []string
	g.Expect(json.Unmarshal(gen[SecretKeySecretKeys], &keys)).To(Succeed())
	g.Expect(keys).To(HaveLen(1))
	g.Expect(keys[0]).To(MatchRegexp(`^[A-Za-z0-9]{64}$`))
	for k, v := range gen {
		existing[k] = v
	}
	snapshot := map[string]string{}
	for k, v := range existing {
		snapshot[k] = string(v)
	}
	for i := range 100 {
		more, err := GenerateSecretData(ti, existing, rng)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(more).To(BeEmpty(), "call %d", i)
		for k, v := range more {
			existing[k] = v
		}
	}
	for k, v := range existing {
		g.Expect(string(v)).To(Equal(snapshot[k]))
	}

	// A missing key is filled in; the others are left alone.
	delete(existing, SecretKeyDatabasePassword)
	more, err := GenerateSecretData(ti, existing, rng)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(more).To(HaveLen(1))
	g.Expect(more).To(HaveKey(SecretKeyDatabasePassword))
}

func TestSecretGenerationIsSeededAndKeyed(t *testing.T) {
	g := NewWithT(t)
	a, _ := GenerateSecretData(singleUserManaged(), nil, rand.New(rand.NewSource(7)))
	b, _ := GenerateSecretData(singleUserManaged(), nil, rand.New(rand.NewSource(7)))
	g.Expect(a).To(Equal(b))
	c, _ := GenerateSecretData(singleUserManaged(), nil, rand.New(rand.NewSource(8)))
	g.Expect(c[SecretKeyAPIKey]).NotTo(Equal(a[SecretKeyAPIKey]))

	g.Expect(SecretKeys(oidcExternal())).To(Equal([]string{SecretKeySecretKeys}))
	g.Expect(SecretKeys(existingClaim())).To(Equal([]string{SecretKeyDatabasePassword, SecretKeySecretKeys}))

	_, err := GenerateSecretData(singleUserManaged(), nil, strings.NewReader("short"))
	g.Expect(err).To(HaveOccurred())
}
