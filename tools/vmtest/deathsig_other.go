//go:build !linux

package vmtest

import "os/exec"

// dieWithParent is Linux-only; elsewhere the VM cannot run anyway.
func dieWithParent(*exec.Cmd) {}
