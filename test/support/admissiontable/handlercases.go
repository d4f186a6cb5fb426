package admissiontable

// HandlerCase is an object the webhooks refuse, tried beside the objects of LoadBase in Namespace.
// Handler is the handler that refuses it when called directly ("mutate", "validate-instance",
// "validate-profile", "validate-cluster"); Want are substrings of the refusal (object, field, why).
// Through the API server, the CRD's own validation or strict field validation refuses some first:
// APIWant replaces Want then.
type HandlerCase struct {
	Name    string
	Handler string
	Object  string
	Want    []string
	APIWant []string
}

// ProfileHead, ClusterHead and InstanceHead begin a bad object of each kind, named bad, without a
// namespace; a case adds the lines of its spec.
const (
	ProfileHead = `apiVersion: tiled.blueskyproject.io/v1alpha1
kind: TiledProfile
metadata:
  name: bad
  labels: {facility: nsls2}
spec:
`

	ClusterHead = `apiVersion: tiled.blueskyproject.io/v1alpha1
kind: TiledCluster
metadata:
  name: bad
spec:
`

	InstanceHead = `apiVersion: tiled.blueskyproject.io/v1alpha1
kind: TiledInstance
metadata:
  name: bad
spec:
`
)

// HandlerCases are the bad objects the handler tests call the handlers with, and the API-server
// tests create.
func HandlerCases() []HandlerCase { return handlerCases }

var handlerCases = []HandlerCase{
	// TiledProfile
	{Name: "profile expression refers to an unknown field", Handler: "validate-profile",
		Object: ProfileHead + `  storage: {data: {nfs: {server: nfs, pathExpression: "'/data/' + instance.nme"}}}`,
		Want:   []string{"TiledProfile beamlines/bad refused", "spec.storage.data.nfs.pathExpression", "compile", "nme"}},
	{Name: "profile expression of the wrong type", Handler: "validate-profile",
		Object: ProfileHead + `  expose: {ingress: {enabled: true, hostExpression: "1 + 2"}}`,
		Want:   []string{"TiledProfile beamlines/bad refused", "spec.expose.ingress.hostExpression", "type", "needs string"}},
	{Name: "profile env expression returns a bool", Handler: "validate-profile",
		Object: ProfileHead + `  tiled: {env: [{name: FLAG, valueExpression: "instance.name == 'chx'"}]}`,
		Want:   []string{"spec.tiled.env[name=FLAG].valueExpression", "type", "bool"}},
	{Name: "profile mount expression does not parse", Handler: "validate-profile",
		Object: ProfileHead + `  storage: {readOnlyMounts: [{name: raw, nfs: {server: nfs, pathExpression: "'/a' +"}}]}`,
		Want:   []string{"spec.storage.readOnlyMounts[name=raw].nfs.pathExpression", "compile"}},
	{Name: "profile expression uses an undeclared variable", Handler: "validate-profile",
		Object: ProfileHead + `  expose: {ingress: {hostExpression: "beamline.name + '.example.org'"}}`,
		Want:   []string{"spec.expose.ingress.hostExpression", "compile", "beamline"}},
	{Name: "profile expression calls an unknown function", Handler: "validate-profile",
		Object: ProfileHead + `  tiled: {env: [{name: X, valueExpression: "instance.name.shout()"}]}`,
		Want:   []string{"spec.tiled.env[name=X].valueExpression", "compile", "shout"}},
	{Name: "profile field not in the schema", Handler: "validate-profile",
		Object:  ProfileHead + `  storage: {data: {sise: 5Gi}}`,
		Want:    []string{"TiledProfile beamlines/bad refused", "spec.storage.data.sise", "not declared"},
		APIWant: []string{"sise"}},
	{Name: "profile edit puts the cluster into conflict", Handler: "validate-profile",
		Object: ProfileHead + `  priority: 0
  tiled: {image: "ghcr.io/bluesky/tiled:0.2.19"}`,
		Want: []string{"TiledProfile beamlines/bad refused", "TiledCluster beamlines/nsls2 would be left in conflict",
			"profile/bad@", "profile/facility@", "spec.tiled.image"}},
	{Name: "profile gives the cluster's instances replicas on a ReadWriteOnce claim", Handler: "validate-profile",
		Object: ProfileHead + `  priority: 20
  tiled: {replicas: 2}`,
		Want: []string{"TiledProfile beamlines/bad refused", "TiledCluster beamlines/nsls2 would fail to expand", "profile/bad@", "spec.tiled.replicas", "ReadWriteMany"}},
	{Name: "profile expression fails for an instance of the cluster", Handler: "validate-profile",
		Object: ProfileHead + `  priority: 3
  tiled: {env: [{name: BL, valueExpression: "instance.labels['beamline']"}]}`,
		Want: []string{"TiledCluster beamlines/nsls2 would fail to expand", "spec.tiled.env[name=BL].valueExpression", "eval"}},

	// TiledCluster
	{Name: "cluster selector with an unknown operator", Handler: "validate-cluster",
		Object: ClusterHead + `  profileSelector: {matchExpressions: [{key: facility, operator: Near, values: [nsls2]}]}`,
		Want:   []string{"TiledCluster beamlines/bad refused", "spec.profileSelector", "Near"}},
	{Name: "cluster instance selector with an invalid key", Handler: "validate-cluster",
		Object: ClusterHead + `  profileSelector: {}
  instances: [{name: chx, profileSelector: {matchLabels: {"not a key": x}}}]`,
		Want: []string{"TiledCluster beamlines/bad refused", "spec.instances[name=chx].profileSelector"}},
	{Name: "cluster without a profile selector", Handler: "validate-cluster",
		Object:  ClusterHead + `  instances: [{name: chx}]`,
		Want:    []string{"TiledCluster beamlines/bad refused", "spec.profileSelector", "required"},
		APIWant: []string{"spec.profileSelector", "Required"}},
	{Name: "cluster template expression does not compile", Handler: "validate-cluster",
		Object: ClusterHead + `  profileSelector: {matchLabels: {facility: nsls2}}
  template: {expose: {ingress: {hostExpression: "instance.name +"}}}
  instances: [{name: chx}]`,
		Want: []string{"TiledCluster beamlines/bad refused", "spec.template", "cluster/template", "spec.expose.ingress.hostExpression", "compile"}},
	{Name: "cluster override expression of the wrong type", Handler: "validate-cluster",
		Object: ClusterHead + `  profileSelector: {matchLabels: {facility: nsls2}}
  instances: [{name: chx, overrides: {storage: {data: {nfs: {server: nfs, pathExpression: "size(instance.name)"}}}}}]`,
		Want: []string{"spec.instances[name=chx].overrides", "instance/chx/overrides", "spec.storage.data.nfs.pathExpression", "type"}},
	{Name: "cluster override field not in the schema", Handler: "validate-cluster",
		Object: ClusterHead + `  profileSelector: {matchLabels: {facility: nsls2}}
  instances: [{name: chx, overrides: {storage: {data: {sise: 5Gi}}}}]`,
		Want:    []string{"TiledCluster beamlines/bad refused", "instance/chx/overrides", "spec.storage.data.sise", "not declared"},
		APIWant: []string{"sise"}},
	{Name: "cluster template expression fails for an instance", Handler: "validate-cluster",
		Object: ClusterHead + `  profileSelector: {matchLabels: {facility: nsls2}}
  template: {expose: {ingress: {hostExpression: "instance.labels['bl'] + '.example.org'"}}}
  instances: [{name: chx}]`,
		Want: []string{"TiledCluster beamlines/bad refused", "cluster/template", "instance chx", "spec.expose.ingress.hostExpression", "eval"}},
	{Name: "cluster override env expression does not compile", Handler: "validate-cluster",
		Object: ClusterHead + `  profileSelector: {matchLabels: {facility: nsls2}}
  instances: [{name: csx, overrides: {tiled: {env: [{name: A, valueExpression: "instance."}]}}}]`,
		Want: []string{"instance/csx/overrides", "spec.tiled.env[name=A].valueExpression", "compile"}},
	{Name: "cluster override with two database kinds", Handler: "validate-cluster",
		Object: ClusterHead + `  profileSelector: {matchLabels: {facility: nsls2}}
  instances: [{name: csx, overrides: {database: {managed: {size: 1Gi}, external: {uriSecretRef: {name: db}}}}}]`,
		Want:    []string{"instance/csx/overrides", "spec.database", "mutually exclusive"},
		APIWant: []string{"spec.instances[0].overrides.database", "managed and external are mutually exclusive"}},

	// TiledInstance
	{Name: "instance selector with an unknown operator", Handler: "validate-instance",
		Object: InstanceHead + `  profileSelector: {matchExpressions: [{key: facility, operator: Near}]}`,
		Want:   []string{"TiledInstance beamlines/bad refused", "spec.profileSelector", "Near"}},
	{Name: "instance expression does not compile", Handler: "mutate",
		Object: InstanceHead + `  expose: {ingress: {hostExpression: "instance.name + "}}`,
		Want:   []string{"TiledInstance beamlines/bad refused", "spec.expose.ingress.hostExpression", "compile"}},
	{Name: "instance expression does not compile (validating)", Handler: "validate-instance",
		Object: InstanceHead + `  expose: {ingress: {hostExpression: "instance.name + "}}`,
		Want:   []string{"TiledInstance beamlines/bad refused", "spec.expose.ingress.hostExpression", "compile"}},
	{Name: "instance selector matches no profile", Handler: "mutate",
		Object: InstanceHead + `  profileSelector: {matchLabels: {facility: diamond}}`,
		Want:   []string{"TiledInstance beamlines/bad refused", "spec.profileSelector", "matches no TiledProfile", "facility=diamond"}},
	{Name: "instance field not in the schema", Handler: "validate-instance",
		Object:  InstanceHead + `  storage: {data: {sise: 5Gi}}`,
		Want:    []string{"TiledInstance beamlines/bad refused", "spec.storage.data.sise", "not declared"},
		APIWant: []string{"sise"}},
	{Name: "instance selects two profiles in conflict", Handler: "mutate",
		Object: InstanceHead + `  profileSelector: {matchLabels: {family: clash}}`,
		Want:   []string{"TiledInstance beamlines/bad refused", "profile/clash-a@", "profile/clash-b@", "spec.monitoring.interval", "equal priority 7"}},
	{Name: "instance with two database kinds", Handler: "validate-instance",
		Object: InstanceHead + `  database: {managed: {size: 1Gi}, external: {uriSecretRef: {name: db}}}`,
		Want:   []string{"TiledInstance beamlines/bad refused", "spec.database", "mutually exclusive"}},
	{Name: "instance env expression returns an int", Handler: "mutate",
		Object: InstanceHead + `  tiled: {env: [{name: COUNT, valueExpression: "size(instance.name)"}]}`,
		Want:   []string{"TiledInstance beamlines/bad refused", "spec.tiled.env[name=COUNT].valueExpression", "type"}},
	{Name: "instance expression fails to evaluate", Handler: "mutate",
		Object: InstanceHead + `  tiled: {env: [{name: BL, valueExpression: "instance.labels['bl']"}]}`,
		Want:   []string{"TiledInstance beamlines/bad refused", "spec.tiled.env[name=BL].valueExpression", "eval"}},
}
