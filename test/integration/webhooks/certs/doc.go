// Package certs holds no code: its external tests (package certs_test) are the integration tests
// of package webhooks/certs. Replicas of the certificate authority run against a real kube-apiserver
// and etcd (test/support/testenv) and agree on one CA in a Secret, publish it in the webhook
// configurations' caBundles, recover a deleted or broken Secret and rotate without a moment of
// distrust. They live apart from package webhooks/certs so that its tests of the rotation plan run
// without a control plane.
package certs
