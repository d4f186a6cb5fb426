package webhooks_test

// badCase is an object the webhooks refuse. handler is the handler that refuses it when called
// directly; want are substrings of the refusal (object, field, why). Through the API server, the
// CRD's own validation or strict field validation refuses some first: apiWant replaces want then,
// and handlerOnly marks objects the API server cannot even carry to a webhook.
type badCase struct {
	name    string
	handler string
	object  string
	want    []string
	apiWant []string
}

const profileHead = `apiVersion: tiled.blueskyproject.io/v1alpha1
kind: TiledProfile
metadata:
  name: bad
  labels: {facility: nsls2}
spec:
`

const clusterHead = `apiVersion: tiled.blueskyproject.io/v1alpha1
kind: TiledCluster
metadata:
  name: bad
spec:
`

const instanceHead = `apiVersion: tiled.blueskyproject.io/v1alpha1
kind: TiledInstance
metadata:
  name: bad
spec:
`

var badCases = []badCase{
	// TiledProfile
	{name: "profile expression refers to an unknown field", handler: "validate-profile",
		object: profileHead + `  storage: {data: {nfs: {server: nfs, pathExpression: "'/data/' + instance.nme"}}}`,
		want:   []string{"TiledProfile beamlines/bad refused", "spec.storage.data.nfs.pathExpression", "compile", "nme"}},
	{name: "profile expression of the wrong type", handler: "validate-profile",
		object: profileHead + `  expose: {ingress: {enabled: true, hostExpression: "1 + 2"}}`,
		want:   []string{"TiledProfile beamlines/bad refused", "spec.expose.ingress.hostExpression", "type", "needs string"}},
	{name: "profile env expression returns a bool", handler: "validate-profile",
		object: profileHead + `  tiled: {env: [{name: FLAG, valueExpression: "instance.name == 'chx'"}]}`,
		want:   []string{"spec.tiled.env[name=FLAG].valueExpression", "type", "bool"}},
	{name: "profile mount expression does not parse", handler: "validate-profile",
		object: profileHead + `  storage: {readOnlyMounts: [{name: raw, nfs: {server: nfs, pathExpression: "'/a' +"}}]}`,
		want:   []string{"spec.storage.readOnlyMounts[name=raw].nfs.pathExpression", "compile"}},
	{name: "profile expression uses an undeclared variable", handler: "validate-profile",
		object: profileHead + `  expose: {ingress: {hostExpression: "beamline.name + '.example.org'"}}`,
		want:   []string{"spec.expose.ingress.hostExpression", "compile", "beamline"}},
	{name: "profile expression calls an unknown function", handler: "validate-profile",
		object: profileHead + `  tiled: {env: [{name: X, valueExpression: "instance.name.shout()"}]}`,
		want:   []string{"spec.tiled.env[name=X].valueExpression", "compile", "shout"}},
	{name: "profile field not in the schema", handler: "validate-profile",
		object:  profileHead + `  storage: {data: {sise: 5Gi}}`,
		want:    []string{"TiledProfile beamlines/bad refused", "spec.storage.data.sise", "not declared"},
		apiWant: []string{"sise"}},
	{name: "profile edit puts the cluster into conflict", handler: "validate-profile",
		object: profileHead + `  priority: 0
  tiled: {image: "ghcr.io/bluesky/tiled:0.2.19"}`,
		want: []string{"TiledProfile beamlines/bad refused", "TiledCluster beamlines/nsls2 would be left in conflict",
			"profile/bad@", "profile/facility@", "spec.tiled.image"}},
	{name: "profile gives the cluster's instances replicas on a ReadWriteOnce claim", handler: "validate-profile",
		object: profileHead + `  priority: 20
  tiled: {replicas: 2}`,
		want: []string{"TiledProfile beamlines/bad refused", "TiledCluster beamlines/nsls2 would fail to expand", "profile/bad@", "spec.tiled.replicas", "ReadWriteMany"}},
	{name: "profile expression fails for an instance of the cluster", handler: "validate-profile",
		object: profileHead + `  priority: 3
  tiled: {env: [{name: BL, valueExpression: "instance.labels['beamline']"}]}`,
		want: []string{"TiledCluster beamlines/nsls2 would fail to expand", "spec.tiled.env[name=BL].valueExpression", "eval"}},

	// TiledCluster
	{name: "cluster selector with an unknown operator", handler: "validate-cluster",
		object: clusterHead + `  profileSelector: {matchExpressions: [{key: facility, operator: Near, values: [nsls2]}]}`,
		want:   []string{"TiledCluster beamlines/bad refused", "spec.profileSelector", "Near"}},
	{name: "cluster instance selector with an invalid key", handler: "validate-cluster",
		object: clusterHead + `  profileSelector: {}
  instances: [{name: chx, profileSelector: {matchLabels: {"not a key": x}}}]`,
		want: []string{"TiledCluster beamlines/bad refused", "spec.instances[name=chx].profileSelector"}},
	{name: "cluster without a profile selector", handler: "validate-cluster",
		object:  clusterHead + `  instances: [{name: chx}]`,
		want:    []string{"TiledCluster beamlines/bad refused", "spec.profileSelector", "required"},
		apiWant: []string{"spec.profileSelector", "Required"}},
	{name: "cluster template expression does not compile", handler: "validate-cluster",
		object: clusterHead + `  profileSelector: {matchLabels: {facility: nsls2}}
  template: {expose: {ingress: {hostExpression: "instance.name +"}}}
  instances: [{name: chx}]`,
		want: []string{"TiledCluster beamlines/bad refused", "spec.template", "cluster/template", "spec.expose.ingress.hostExpression", "compile"}},
	{name: "cluster override expression of the wrong type", handler: "validate-cluster",
		object: clusterHead + `  profileSelector: {matchLabels: {facility: nsls2}}
  instances: [{name: chx, overrides: {storage: {data: {nfs: {server: nfs, pathExpression: "size(instance.name)"}}}}}]`,
		want: []string{"spec.instances[name=chx].overrides", "instance/chx/overrides", "spec.storage.data.nfs.pathExpression", "type"}},
	{name: "cluster override field not in the schema", handler: "validate-cluster",
		object: clusterHead + `  profileSelector: {matchLabels: {facility: nsls2}}
  instances: [{name: chx, overrides: {storage: {data: {sise: 5Gi}}}}]`,
		want:    []string{"TiledCluster beamlines/bad refused", "instance/chx/overrides", "spec.storage.data.sise", "not declared"},
		apiWant: []string{"sise"}},
	{name: "cluster template expression fails for an instance", handler: "validate-cluster",
		object: clusterHead + `  profileSelector: {matchLabels: {facility: nsls2}}
  template: {expose: {ingress: {hostExpression: "instance.labels['bl'] + '.example.org'"}}}
  instances: [{name: chx}]`,
		want: []string{"TiledCluster beamlines/bad refused", "cluster/template", "instance chx", "spec.expose.ingress.hostExpression", "eval"}},
	{name: "cluster override env expression does not compile", handler: "validate-cluster",
		object: clusterHead + `  profileSelector: {matchLabels: {facility: nsls2}}
  instances: [{name: csx, overrides: {tiled: {env: [{name: A, valueExpression: "instance."}]}}}]`,
		want: []string{"instance/csx/overrides", "spec.tiled.env[name=A].valueExpression", "compile"}},
	{name: "cluster override with two database kinds", handler: "validate-cluster",
		object: clusterHead + `  profileSelector: {matchLabels: {facility: nsls2}}
  instances: [{name: csx, overrides: {database: {managed: {size: 1Gi}, external: {uriSecretRef: {name: db}}}}}]`,
		want:    []string{"instance/csx/overrides", "spec.database", "mutually exclusive"},
		apiWant: []string{"spec.instances[0].overrides.database", "managed and external are mutually exclusive"}},

	// TiledInstance
	{name: "instance selector with an unknown operator", handler: "validate-instance",
		object: instanceHead + `  profileSelector: {matchExpressions: [{key: facility, operator: Near}]}`,
		want:   []string{"TiledInstance beamlines/bad refused", "spec.profileSelector", "Near"}},
	{name: "instance expression does not compile", handler: "mutate",
		object: instanceHead + `  expose: {ingress: {hostExpression: "instance.name + "}}`,
		want:   []string{"TiledInstance beamlines/bad refused", "spec.expose.ingress.hostExpression", "compile"}},
	{name: "instance expression does not compile (validating)", handler: "validate-instance",
		object: instanceHead + `  expose: {ingress: {hostExpression: "instance.name + "}}`,
		want:   []string{"TiledInstance beamlines/bad refused", "spec.expose.ingress.hostExpression", "compile"}},
	{name: "instance selector matches no profile", handler: "mutate",
		object: instanceHead + `  profileSelector: {matchLabels: {facility: diamond}}`,
		want:   []string{"TiledInstance beamlines/bad refused", "spec.profileSelector", "matches no TiledProfile", "facility=diamond"}},
	{name: "instance field not in the schema", handler: "validate-instance",
		object:  instanceHead + `  storage: {data: {sise: 5Gi}}`,
		want:    []string{"TiledInstance beamlines/bad refused", "spec.storage.data.sise", "not declared"},
		apiWant: []string{"sise"}},
	{name: "instance selects two profiles in conflict", handler: "mutate",
		object: instanceHead + `  profileSelector: {matchLabels: {family: clash}}`,
		want:   []string{"TiledInstance beamlines/bad refused", "profile/clash-a@", "profile/clash-b@", "spec.monitoring.interval", "equal priority 7"}},
	{name: "instance with two database kinds", handler: "validate-instance",
		object: instanceHead + `  database: {managed: {size: 1Gi}, external: {uriSecretRef: {name: db}}}`,
		want:   []string{"TiledInstance beamlines/bad refused", "spec.database", "mutually exclusive"}},
	{name: "instance env expression returns an int", handler: "mutate",
		object: instanceHead + `  tiled: {env: [{name: COUNT, valueExpression: "size(instance.name)"}]}`,
		want:   []string{"TiledInstance beamlines/bad refused", "spec.tiled.env[name=COUNT].valueExpression", "type"}},
	{name: "instance expression fails to evaluate", handler: "mutate",
		object: instanceHead + `  tiled: {env: [{name: BL, valueExpression: "instance.labels['bl']"}]}`,
		want:   []string{"TiledInstance beamlines/bad refused", "spec.tiled.env[name=BL].valueExpression", "eval"}},
}
