package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// cleanupContext is the context of a command that makes cgroups,
// processes or temporary files (gofit lab, gofit node experiment): it ends
// on Ctrl-C, SIGTERM or SIGHUP (a closed terminal), and the command then
// removes what it made. A SIGPIPE no longer ends such a command either:
// under `gofit lab | tee lab.log`, Ctrl-C ends tee too, and Go kills a
// program whose write to a broken stdout or stderr raises SIGPIPE unless
// it asks for the signal, which left the lab's cgroups behind mid-clean-up.
// Asked for, the write fails with EPIPE and the command goes on. (A
// handler, not signal.Ignore: an ignored SIGPIPE would be inherited by the
// services the lab runs.)
func cleanupContext() (context.Context, context.CancelFunc) {
	pipe := make(chan os.Signal, 1)
	signal.Notify(pipe, syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	return ctx, func() {
		stop()
		signal.Stop(pipe)
	}
}
