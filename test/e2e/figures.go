package e2e

// Figures are the measured values the suite writes to bench/e2e.json; hack/e2e/report turns them
// into docs/e2e-figures.md. They are outside the e2e build tag so that the report can import them.
type Figures struct {
	Cluster                       string             `json:"cluster"`
	Beamlines                     int                `json:"beamlines"`
	FleetReadySeconds             float64            `json:"fleetReadySeconds"`
	InstanceReadySeconds          map[string]float64 `json:"instanceReadySeconds"`
	FloorReadySeconds             float64            `json:"floorReadySeconds"`
	OperatorOverFloor             float64            `json:"operatorOverFloor"`
	OperatorDispatchSeconds       float64            `json:"operatorDispatchSeconds"`
	OperatorReportSeconds         float64            `json:"operatorReportSeconds"`
	OperatorOverFloorSameStart    float64            `json:"operatorOverFloorSameStart"`
	RestartCount                  int                `json:"restartCount"`
	RestartsByContainer           map[string]int32   `json:"restartsByContainer,omitempty"`
	RolloutBudget                 int                `json:"rolloutBudget"`
	RolloutMaxUnready             int                `json:"rolloutMaxUnready"`
	RolloutSeconds                float64            `json:"rolloutSeconds"`
	RolloutUnreadySamples         []int              `json:"rolloutUnreadySamples,omitempty"`
	HeldKeptTemplate              bool               `json:"heldKeptTemplate"`
	KillRolloutMaxUnready         int                `json:"killRolloutMaxUnready"`
	KillRolloutSeconds            float64            `json:"killRolloutSeconds"`
	KillRolloutRequests           map[string]int     `json:"killRolloutRequestsByVerb"`
	KillRolloutWritesByKind       map[string]int     `json:"killRolloutWritesByResource"`
	FailoverSeconds               float64            `json:"failoverSeconds"`
	WebhookCallsDuringFailover    int                `json:"webhookCallsDuringFailover"`
	WebhookFailuresDuringFailover int                `json:"webhookFailuresDuringFailover"`
	PodRecreateSeconds            float64            `json:"podRecreateSeconds"`
	OperatorPeakMemoryMiB         float64            `json:"operatorPeakMemoryMiB"`
	Cases                         []CaseResult       `json:"cases"`
	Passed                        int                `json:"passed"`
	Failed                        int                `json:"failed"`
	// SuiteSeconds is the suite's wall time (the cases, not the node's start or teardown) and
	// Parallel the most cases it let run at once (E2E_PARALLEL).
	SuiteSeconds float64 `json:"suite_seconds"`
	Parallel     int     `json:"parallel"`
	// CPU is where the suite's CPU went, measured while it ran.
	CPU *CPUUse `json:"cpu,omitempty"`

	// The Tiled upgrade (case 9): the most seconds an upgraded instance had no Ready Tiled pod (the
	// last old pod unready -> the first new pod Ready, seen by a watch), the same for the upgrade done
	// by hand on a paused cluster (the floor) and their ratio; the longest migration Job
	// (status.lastMigration.migrationSeconds), the longest backup Job (from the Job's status, seen by
	// the watch before the operator deletes it; omitted when none was seen), and the containers'
	// restarts in the upgrade's namespace (goal 0).
	UpgradeDowntimeSeconds float64 `json:"upgrade_downtime_seconds"`
	UpgradeFloorSeconds    float64 `json:"upgrade_floor_seconds"`
	UpgradeDowntimeRatio   float64 `json:"upgrade_downtime_ratio"`
	MigrationSeconds       float64 `json:"migration_seconds"`
	UpgradeBackupSeconds   float64 `json:"upgrade_backup_seconds,omitempty"`
	UpgradeRestarts        int     `json:"upgrade_restarts"`

	// Backups (case 10): `kubectl tiled backup --wait` of one instance while Tiled serves writes,
	// and the same three pg_dumps by hand in the database's container (the floor); the restore of a
	// new instance from it (its bootstrap Job, created -> ended, seen by polling) and pg_restore by
	// hand of the same dumps into new databases; the restore from the S3 target.
	BackupSeconds       float64 `json:"backup_seconds"`
	BackupFloorSeconds  float64 `json:"backup_floor_seconds"`
	BackupRatio         float64 `json:"backup_ratio"`
	BackupBytes         int64   `json:"backup_bytes"`
	RestoreSeconds      float64 `json:"restore_seconds"`
	RestoreFloorSeconds float64 `json:"restore_floor_seconds"`
	RestoreRatio        float64 `json:"restore_ratio"`
	S3RestoreSeconds    float64 `json:"s3_restore_seconds,omitempty"`

	// Streaming (case 11): write-to-subscriber latency of an array update, one write at a time, the
	// writer and the subscriber on different Tiled replicas (through the shared cache) and on the
	// same replica (the floor), in milliseconds, over StreamUpdates writes each.
	StreamCrossReplicaP50  float64 `json:"stream_cross_replica_ms_p50"`
	StreamCrossReplicaP99  float64 `json:"stream_cross_replica_ms_p99"`
	StreamSingleReplicaP50 float64 `json:"stream_single_replica_ms_p50"`
	StreamSingleReplicaP99 float64 `json:"stream_single_replica_ms_p99"`
	StreamRatio            float64 `json:"stream_cross_over_single_p50"`
	StreamUpdates          int     `json:"stream_updates"`

	// Autoscaling (case 12): load start -> 2 Ready Tiled pods, and load removed -> 1 pod, with a
	// 30 s scale-down window.
	AutoscaleUpSeconds   float64 `json:"autoscale_up_seconds,omitempty"`
	AutoscaleDownSeconds float64 `json:"autoscale_down_seconds,omitempty"`

	// Operator upgrades (previous release -> this build -> prime -> this build through a leader
	// failover), over all three: pods of the upgrade fleet replaced, their container restarts, and
	// the operator's writes to the fleet's objects other than status and Events that are not on the
	// reviewed list of the upgrade from the previous release (0 each; the other two upgrades have no
	// list); the writes of the upgrade from the previous release that are on the list
	// (test/e2e/testdata/operator-upgrade-writes.yaml); and the shortest window over which every
	// object the operator owns kept its resourceVersion from when the first new manager led until at
	// least 120 s after the last one led (the window the three upgrades share).
	OperatorUpgradePodsReplaced    int     `json:"operator_upgrade_pods_replaced"`
	OperatorUpgradeRestarts        int     `json:"operator_upgrade_restarts"`
	OperatorUpgradeChildWrites     int     `json:"operator_upgrade_child_writes"`
	OperatorUpgradeReviewedWrites  int     `json:"operator_upgrade_reviewed_writes"`
	OperatorUpgradeRVStableSeconds float64 `json:"operator_upgrade_rv_stable_seconds"`
	// The rollout the reviewed list declares for the upgrade from the previous release (a pod
	// template this release renders differently): the pods it replaced, and the most of those
	// StatefulSets' pods unready at once (the upgrade fleet's cluster has maxUnavailable 1).
	OperatorUpgradeReviewedPodsReplaced      int `json:"operator_upgrade_reviewed_pods_replaced,omitempty"`
	OperatorUpgradeReviewedRolloutMaxUnready int `json:"operator_upgrade_reviewed_rollout_max_unready,omitempty"`
	// A build that renders one more Tiled pod annotation: from its apply to every Tiled pod of the
	// upgrade fleet Ready with it, and the most Tiled pods unready at once (maxUnavailable 1).
	OperatorRenderRolloutSeconds    float64 `json:"operator_render_rollout_seconds,omitempty"`
	OperatorRenderRolloutMaxUnready int     `json:"operator_render_rollout_max_unready"`

	// Network policies (case 15): TCP connections from pods that the instances' NetworkPolicies
	// must refuse (to the databases, the caches, the metrics sidecars, and Tiled from a namespace no
	// policy admits; refused or timed out) and those that connected anyway (0); the positive
	// controls of the same runs that connected as they must (Tiled from its own namespace and from
	// the ingress controller's, an unpolicied pod) and those that did not (0); and, on a
	// one-beamline fleet with egress restricted, a profile's networkPolicy.enabled false -> every
	// NetworkPolicy of the instance deleted, and true again -> every one back.
	NetworkPolicyDenied            int     `json:"network_policy_denied"`
	NetworkPolicyAllowedUnexpected int     `json:"network_policy_allowed_unexpected"`
	NetworkPolicyControlsReached   int     `json:"network_policy_controls_reached"`
	NetworkPolicyControlsFailed    int     `json:"network_policy_controls_failed"`
	NetworkPolicyOffSeconds        float64 `json:"network_policy_off_seconds,omitempty"`
	NetworkPolicyOnSeconds         float64 `json:"network_policy_on_seconds,omitempty"`

	// Stuck pods (stuckpod_test.go), each on a one-beamline fleet of its own: from the fixed spec
	// applied to the instance Ready again, its pod stuck on the broken template replaced once. The
	// Tiled pod (a container that cannot be created: an environment variable from a Secret key that
	// does not exist), and who deleted it (the audit log's user: the Tiled StatefulSet's Parallel pod
	// management lets the StatefulSet controller replace it); the PostgreSQL pod (an image that
	// cannot start under its memory limit; OrderedReady: only the operator replaces it), and the
	// deletions of it the operator made (1).
	StuckPodReplacedSeconds         float64 `json:"stuck_pod_replaced_seconds,omitempty"`
	StuckPodDeletedBy               string  `json:"stuck_pod_deleted_by,omitempty"`
	StuckPostgresPodReplacedSeconds float64 `json:"stuck_postgres_pod_replaced_seconds,omitempty"`
	StuckPostgresPodOperatorDeletes int     `json:"stuck_postgres_pod_operator_deletes,omitempty"`
	// The same case's image typo first (database.managed.image on a registry that refuses): the
	// beamline's Tiled and PostgreSQL pods replaced between the typo and its removal (0: its image
	// check held the StatefulSet; nil: the case did not run).
	ImageTypoPodsReplaced *int `json:"image_typo_pods_replaced,omitempty"`

	// A lost catalog (lostcatalog_test.go): the polls that found the lost catalog served (the
	// instance Ready or a Tiled pod ready; nil: the case did not run), the claim's deletion ->
	// status.catalogLost, and RestoreLatest applied -> the instance Ready with the record gone.
	ClaimLossServedEmpty       *int    `json:"claim_loss_served_empty,omitempty"`
	CatalogLostDetectedSeconds float64 `json:"catalog_lost_detected_seconds,omitempty"`
	CatalogLostRestoredSeconds float64 `json:"catalog_lost_restored_seconds,omitempty"`

	// A restore in place (restoreinplace_test.go): `kubectl tiled restore --wait` of a serving
	// beamline to an earlier backup, from the command to its end (the backup first, Tiled stopped,
	// the restore, Tiled ready again), and how long Tiled was stopped
	// (status.inPlaceRestore.downtimeSeconds).
	RestoreInPlaceSeconds         float64 `json:"restore_in_place_seconds,omitempty"`
	RestoreInPlaceDowntimeSeconds float64 `json:"restore_in_place_downtime_seconds,omitempty"`

	// A stranded rollout (stranded_test.go): a fleet serving without the streaming cache has it
	// turned on with an image the node cannot pull, then fixed. The writes (written and read back by
	// Tiled's client, to every beamline before, while the cache cannot start and after the fix) that
	// failed (nil: the case did not run), the pods not Ready once the fleet converged, and the fixed
	// profile applied -> every instance Ready with its cache and Tiled on the new template.
	StrandedWritesFailed *int    `json:"stranded_writes_failed,omitempty"`
	StuckPodsLeft        *int    `json:"stuck_pods_left,omitempty"`
	FixConvergeSeconds   float64 `json:"fix_converge_seconds,omitempty"`

	// The facility's calendar (calendar_test.go, cases 22 and 23): a maintenance window's opening
	// -> the first Tiled pod of the change that waited for it replaced (terminating, seen by a
	// watch); the notifications a receiver pod got more than once by their key, and those expected
	// (a change pending approval) or recorded as delivered in status.notifications that it never
	// got, across a leader kill too; and the gated changes applied before their window or approval
	// (nil: neither case ran; 0 each).
	WindowStartDelaySeconds float64 `json:"window_start_delay_seconds,omitempty"`
	NotificationsDuplicated *int    `json:"notifications_duplicated,omitempty"`
	NotificationsMissed     *int    `json:"notifications_missed,omitempty"`
	GatedChangesLeaked      *int    `json:"gated_changes_leaked,omitempty"`
}

// CPUUse is the CPU the suite used while it ran, in seconds: the machine's busy time (all its
// cores), the node's pods summed by namespace (their cgroups), and the node's processes (and the
// suite's own) by name.
type CPUUse struct {
	WallSeconds        float64            `json:"wall_seconds"`
	MachineBusySeconds float64            `json:"machine_busy_seconds"`
	PodSeconds         float64            `json:"pod_seconds"`
	Namespaces         map[string]float64 `json:"namespaces"`
	Processes          map[string]float64 `json:"processes"`
	// TopPods are the pods ("namespace/name") that used the most.
	TopPods map[string]float64 `json:"top_pods,omitempty"`
}

// CaseResult is one case's verdict and duration, what it shares with the others (Needs, see
// schedule.go), when it started from the suite's start, and the most other cases that ran beside
// it (0: its timings were taken alone).
type CaseResult struct {
	Name    string  `json:"name"`
	Passed  bool    `json:"passed"`
	Seconds float64 `json:"seconds"`
	Needs   string  `json:"needs,omitempty"`
	Start   float64 `json:"start"`
	Beside  int     `json:"beside"`
	// NotRun: a required case before it failed.
	NotRun bool `json:"notRun,omitempty"`
}
