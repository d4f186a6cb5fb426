// Package crdupgrade holds no code: its external tests (package crdupgrade_test) upgrade the
// operator's CRDs on a real kube-apiserver and etcd, from the previous release's
// (hack/crdcompat/testdata/previous, the commit of hack/previous-release) to the checkout's
// (config/crd/bases), the way a facility upgrades the operator with kubectl apply --server-side.
//
// The control plane starts with no CRD. The test installs the previous release's CRDs, stores a
// realistic TiledProfile, a TiledCluster of two beamlines and a standalone TiledInstance through them
// (with status, as the operator writes it), installs the checkout's CRDs over them with the same
// field manager, and then checks that nothing stored was disturbed: every object reads through the
// project's typed API, its spec, status, labels and generation are unchanged (compared as
// unstructured content, so that a field the new schema prunes shows up as a difference), a
// server-side apply of the same content is accepted and changes nothing, a one-field change is
// accepted, and the status subresource takes writes.
//
// hack/crdcompat is the static half of the same check: it compares the two sets of schemas, path by
// path, without a control plane. No webhook and no controller run here: the objects are valid under
// the CRD schemas alone.
package crdupgrade
