// Package modlines keeps the lines between this repository's modules (the
// library at the root, cmd/gofit, kube and tools): its test fails when a
// module imports a package under another module's internal/. Go allows it
// wherever the import paths nest, but it ties one module's release to code
// another module keeps private. A package more than one module needs is
// public, with a doc comment saying who it is for, or copied into its one
// user.
package modlines
