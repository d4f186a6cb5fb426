// Package names decides the name of every object the operator makes: the TiledInstances a
// TiledCluster stamps out (<cluster>-<instance>), the label values derived from names, and the
// children of an instance (its StatefulSets, Services, ConfigMaps, Secret, claims and NFS
// PersistentVolumes). It is the only place that shortens a name.
//
// WARNING — FROZEN OUTPUT. The names of live objects depend on what this package returns, byte for
// byte. The operator finds its children, the claims that hold beamline data and the Secret whose
// password opens a retained database by these names; a different output for the same input would
// orphan them and create new, empty ones beside them. Do not change any function here, its hash, its
// limits, or the order of its parts. testdata/names.golden records today's output for thousands of
// inputs (many near the 52-, 63- and 253-character limits) and TestGolden fails on any difference;
// never regenerate it to make a change pass. A new kind of object gets a new function.
//
// Two shortening rules are in use, both kept as they were when objects were first named with them:
// Join (instance names and label values: a prefix of the joined name, "-", an 8-character hash) and
// Object (children: a prefix of the instance's name, then "-<suffix>-<hash>", so that the suffix
// always shows which object it is). Both hash the full, unshortened name with SHA-256.
package names
