package applier

import (
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/bluesky/tiled-operator/controllers/intern"
)

// systemManagers are field managers of Kubernetes itself, whose fields are not edits by people.
var systemManagers = map[string]bool{
	"kube-controller-manager": true, "kube-scheduler": true, "kubelet": true, "kube-apiserver": true,
}

// Trust adds field managers whose fields on an object are the operator's own doing (e.g. a second
// field owner the operator labels objects with), so they never count as edits by someone else.
func (a *Applier) Trust(managers ...string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, m := range managers {
		a.trusted[m] = true
	}
}

// ForeignManagers returns, sorted, the field managers of o's spec and metadata other than the
// applier's own, the trusted ones and Kubernetes' own controllers: the writers whose edits the
// operator did not make.
func (a *Applier) ForeignManagers(o client.Object) []string {
	a.mu.Lock()
	out := a.foreignManagersLocked(o)
	a.mu.Unlock()
	sort.Strings(out)
	return out
}

// token is an object's version as far as the operator's intent is concerned: the fingerprint of
// the field set the applier's field owner manages on it, and the other writers of its spec and
// metadata. Anyone who changes or removes a field the operator set takes it over (or shares it),
// which changes one or the other; Kubernetes' own controllers writing status, binding annotations
// or finalizers change neither, so they cause no re-apply.
func (a *Applier) token(managed []metav1.ManagedFieldsEntry) string {
	var b strings.Builder
	var foreign []string
	for _, mf := range managed {
		switch {
		case mf.Subresource != "":
		case mf.Manager == a.owner:
			if mf.FieldsV1 != nil {
				b.Write(Fingerprint(mf.FieldsV1.GetRawBytes()))
			}
			b.WriteString("@" + mf.APIVersion)
		case !a.trusted[mf.Manager] && !systemManagers[mf.Manager]:
			foreign = append(foreign, mf.Manager+"/"+string(mf.Operation))
		}
	}
	sort.Strings(foreign)
	b.WriteString("|" + strings.Join(foreign, ","))
	// The objects of one kind in a fleet mostly share a token (the same field set, no other
	// manager): the records hold one copy of it.
	return intern.String(b.String())
}

func (a *Applier) foreignManagersLocked(o client.Object) []string {
	var out []string
	for _, mf := range o.GetManagedFields() {
		if mf.Subresource != "" || a.trusted[mf.Manager] || systemManagers[mf.Manager] {
			continue
		}
		out = append(out, mf.Manager)
	}
	return out
}
