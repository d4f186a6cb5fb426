// Package layers holds no code: its test checks the module's import graph against the layers of
// docs/design.md's package map, so that a package never imports one on a layer above it (the
// engine never reaches a controller, the controllers and the webhooks never import each other).
package layers
