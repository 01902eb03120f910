// Command pause is the sandbox ("pause") container's process for a node
// that cannot pull registry.k8s.io/pause: it holds the pod's namespaces
// open and exits on SIGTERM or SIGINT, as the upstream pause does (which
// is C; this is Go so that the image builds with the rest of the module).
// As PID 1 of the pod when process namespaces are shared, it also reaps
// orphaned children.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sig {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
