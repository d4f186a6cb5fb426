// Command kubectl-tiled is a kubectl plugin for auditing tiled-operator fleets offline, with the
// same expansion engine the operator runs (package expansion), so what it prints is what the
// operator would write.
//
// Installed on the PATH as kubectl-tiled, it runs as `kubectl tiled`:
//
//	kubectl tiled expand -f cluster.yaml -f profiles/
//	    Prints, as YAML, the TiledInstance objects the operator would create for every TiledCluster
//	    in the files (and the expansion of every standalone TiledInstance): metadata, the complete
//	    spec and the provenance of every field. The bytes are those of expansion.Marshal.
//
//	kubectl tiled why -f cluster.yaml -f profiles/ chx spec.storage.data.size
//	    Prints the value and the source (default, profile/<name>@<generation>, cluster/template,
//	    instance/<name>/overrides, instance, with " (expression)" when computed) of a field of one
//	    instance, or of every field beneath it. The instance is named by its short name (chx) or by
//	    its TiledInstance name (nsls2-chx).
//
// -f takes files, directories (their .yaml, .yml and .json files; -R descends into
// subdirectories) or "-" for standard input, each holding any number of YAML documents. Objects
// without a namespace are put in the one of -n/--namespace ("default" unless given), as kubectl
// apply would. No cluster is contacted.
//
// Errors follow kubectl's habits: "error: ..." on standard error and exit status 1; a usage error
// adds a hint to run the command with -h.
package main
