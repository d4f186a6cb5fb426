// Package layers holds no code: its tests check the module's import graph against the layers of
// docs/design.md's package map, so that a package never imports one on a layer above it (the
// engine never reaches a controller, the controllers and the webhooks never import each other, the
// child-set engine and the desired state stand apart), and that the pure core (the engine, the
// renderers, the controllers' deciders) depends on no client, nor the desired state imports one.
package layers
