// Package webhooks holds no code: its external tests (package webhooks_test) are the webhooks'
// integration tests. A manager serves the admission webhooks over TLS with self-signed
// certificates, and a real kube-apiserver, etcd and kube-controller-manager (test/support/testenv)
// call them: dry runs print expanded instances, bad objects are refused with the field named (the
// handler cases and the table of webhooks/testdata/admission, through package
// test/support/admissiontable), certificate rotation keeps the API server calling, the failure policies
// hold with the server stopped, the NFS policy binds a namespace editor, and the operator's manager
// serves the webhooks itself. They live apart from package webhooks so that its handler tests run
// without a control plane.
package webhooks
