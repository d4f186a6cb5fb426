package controllers

// The well-known label and annotation keys the controllers read or write, each defined once:
//
//   - apis/v1alpha1: LabelManagedBy, LabelCluster and LabelInstance (the API's own), and
//     LabelAppInstance and LabelAppComponent (Kubernetes' recommended labels, which render puts on
//     every object of an instance: the controllers find an instance's pods, its retained claims and
//     Secret, its NFS PersistentVolumes and its ServiceMonitors by LabelAppInstance, the
//     TiledInstance's own name — not LabelInstance, its name in its cluster's spec.instances);
//   - applier.AnnotationIntent: the hash of the intent the applier last applied to an object;
//   - desired.AnnotationExpansionHash: the hash of an instance's expansion, which tells up-to-date
//     instances from those still to roll out;
//   - LabelReleased and AnnotationReleasedFrom, below.

// LabelReleased marks a data or database claim, or the Secret, kept by the Retain policy after its
// instance was removed: `kubectl get pvc,secret -l tiled.blueskyproject.io/released=true` lists them.
const LabelReleased = "tiled.blueskyproject.io/released"

// AnnotationReleasedFrom, beside LabelReleased, is the UID of the instance whose removal released
// the claim or Secret. Only another instance (the beamline added again, a new object) takes the
// label back: the removed instance's own last reconciles, which can run after the release and
// before its deletion, leave it.
const AnnotationReleasedFrom = "tiled.blueskyproject.io/released-from"
