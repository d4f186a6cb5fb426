// Command kubectl-tiled is a kubectl plugin for auditing tiled-operator fleets, with the same
// expansion engine the operator runs (package expansion) and the same admission checks (the API
// server's checks of object metadata, the CRDs' schemas and CEL rules, and the handlers of package
// webhooks), so what it prints is what the
// operator would write and what it refuses is what the cluster would refuse.
//
// Installed on the PATH as kubectl-tiled, it runs as `kubectl tiled`:
//
//	kubectl tiled expand -f cluster.yaml -f profiles/
//	    Prints the TiledInstance objects the operator would create for every TiledCluster in the
//	    input (and the expansion of every standalone TiledInstance): metadata, the complete spec
//	    and the provenance of every field. -o yaml (the default) gives the bytes of
//	    expansion.Marshal; -o json one List; -o name the names. Offline.
//
//	kubectl tiled why -f cluster.yaml -f profiles/ chx spec.storage.data.size
//	    Prints the value and the source (default, profile/<name>@<generation>, cluster/template,
//	    instance/<name>/overrides, instance, with " (expression)" when computed) of a field of one
//	    instance, or of every field beneath it. Offline.
//
//	kubectl tiled diff -f profiles/facility.yaml
//	    Shows what changed profiles and clusters would do to every TiledInstance of the current
//	    kubeconfig's cluster, with server-side dry runs; exit status as kubectl diff's (0 no
//	    differences, 1 differences, 2 an error).
//
//	kubectl tiled import-helm values.yaml
//	    Turns the Tiled Helm chart's values (or an umbrella chart's, --subchart) into a TiledProfile
//	    and a TiledCluster, accounting for every key. Offline.
//
//	kubectl tiled backup nsls2-chx -n nsls2 [--wait [--timeout 30m]]
//	    Takes a backup of a live instance's databases now: creates a Job from the instance's backup
//	    CronJob (names.Objects.BackupCronJob) as `kubectl create job --from=cronjob/...` does, and
//	    prints its name; with --wait, watches it and prints the backup's name, size and duration
//	    from the manifest its pod leaves as termination message (a failure's message, exit 1).
//
//	kubectl tiled backups nsls2-chx -n nsls2 [-o table|json|yaml]
//	    Lists a live instance's whole backups from its status.backup, newest first (NAME, AGE,
//	    SIZE), under its target, schedule, last backup and restore; -o json or yaml prints
//	    status.backup.
//
//	kubectl tiled restore nsls2-chx -n nsls2 --from NAME|latest [--dry-run] [--wait [--timeout 30m]]
//	    Restores a serving instance's databases from one of its whole backups, in place: sets the
//	    annotations tiled.blueskyproject.io/restore, restore-request (a new id) and
//	    restore-requested-by (the user, from a SelfSubjectReview), which the operator acts on once
//	    (status.inPlaceRestore); checks first what the operator refuses (an upgrade, no target, no
//	    such backup). --dry-run prints what would be replaced and writes nothing; --wait prints the
//	    outcome (a refused or failed restore, exit 1).
//
//	kubectl tiled approve nsls2-chx|CLUSTER -n nsls2 [--all-pending] [--through-window] [--hash HASH]
//	    Approves the change that waits for a person (spec.maintenance.approval Manual): reads
//	    status.pendingRollout, refuses when nothing waits for approval or --hash names another
//	    change (stale), and sets the label tiled.blueskyproject.io/approve to its changeHash (and
//	    tiled.blueskyproject.io/approve-through-window with --through-window). The approval webhook
//	    stamps tiled.blueskyproject.io/approved-by with the authenticated user. A CLUSTER approves
//	    each of its instances' pending changes, only with --all-pending.
//
//	kubectl tiled status [CLUSTER | INSTANCE | tiledcluster/NAME | tiledinstance/NAME] -n nsls2
//	    One screen of a live cluster's state: its Ready, Stalled and Reconciling conditions, the
//	    rollout (updated of total, pending, held, maxUnavailable, paused), a table of its
//	    instances (ready replicas, version, database, revision, last backup, upgrade, pending
//	    rollout, Ready reason) and its recent Warning events; of an instance, its versions,
//	    database, backups, migration, upgrade, pending rollout, conditions, pods and events;
//	    without an argument, one line per cluster and standalone instance of the namespace. A bare
//	    NAME is a TiledCluster first, then a TiledInstance. Pods and events the user may not list
//	    are left out with a note. -o json|yaml prints a StatusDocument; --color=auto|always|never
//	    (NO_COLOR turns it off).
//
//	kubectl tiled completion bash|zsh|fish|powershell, kubectl tiled version
//
// Input is read as kubectl reads it (k8s.io/cli-runtime's resource.Builder): -f takes files,
// directories (their .yaml, .yml and .json files; -R descends into subdirectories) or "-" for
// standard input, -k a kustomization directory (built as kubectl kustomize builds it). Documents of
// other kinds and kustomization files in directories are skipped with a note on standard error; a
// directory holding only a kustomization is an error that points at -k. Objects without a namespace are put in
// the one of -n/--namespace, else the kubeconfig context's, else "default", in every command; with
// -n, an object of another namespace is refused, as kubectl apply refuses it.
//
// Errors follow kubectl's habits: "error: ..." on standard error and exit status 1 (2 for diff);
// a usage error adds a hint to run the command with -h; the webhooks' warnings are printed as
// "Warning: ...".
package main
