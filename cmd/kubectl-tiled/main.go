package main

import (
	"log"
	"os"

	"k8s.io/cli-runtime/pkg/genericiooptions"
)

func main() {
	// kustomize (-k) logs its warnings with the standard logger: no timestamps, as kubectl prints them.
	log.SetFlags(0)
	os.Exit(run(os.Args[1:], genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}))
}
