// Package stuckpods holds no code: its external tests run the operator against a real
// kube-apiserver and etcd with kube-controller-manager's StatefulSet and Job controllers
// (test/support/testenv): the StatefulSet controller creates, rolls and recreates the pods of the
// operator's StatefulSets and computes their revisions, the Job controller creates the pods of the
// image check Jobs and completes them. No scheduler or kubelet runs: the tests write the pods'
// statuses as the kubelet would. They check that a pod stuck on an older revision after a template
// change (a StatefulSet never replaces a pod that is not Ready) is replaced by the operator, once,
// and that a new image of the managed PostgreSQL or streaming cache waits for its image check
// before its StatefulSet changes (a typo never replaces the serving pod). The other controllers'
// integration tests (test/integration/controllers) run without the StatefulSet controller, which
// would replace the pods and statuses they write themselves.
package stuckpods
