// Package qoslab reproduces the memory-QoS scenario on one Linux box: a
// "node" cgroup with a memory limit, a latency-sensitive Go service with a
// request below its limit under open-loop load, and a best-effort memory
// hog that overcommits the node; QoS off against the agent's auto values.
package qoslab

import (
	"context"
	"fmt"
	"syscall"
	"time"
)

// HogCommand is the `gofit node` subcommand that runs the hog.
const HogCommand = "memhog"

const hogChunk = 4 << 20

// Hog keeps size bytes of anonymous memory allocated and touched, freeing
// and re-allocating a churn share of it every 100ms, so the node's memory
// stays full and keeps moving, until ctx ends. Memory comes from mmap, not
// the Go heap, so what the cgroup sees is exactly what the hog asked for.
func Hog(ctx context.Context, size int64, churn float64) error {
	if size < hogChunk {
		return fmt.Errorf("--bytes %d: want at least %d", size, hogChunk)
	}
	if !(churn >= 0 && churn <= 1) { // NaN fails here too
		return fmt.Errorf("--churn %v: want a share in [0, 1]", churn)
	}
	n := int(size / hogChunk)
	chunks := make([][]byte, 0, n)
	defer func() {
		for _, c := range chunks {
			_ = syscall.Munmap(c)
		}
	}()
	alloc := func() error {
		b, err := syscall.Mmap(-1, 0, hogChunk, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
		if err != nil {
			return fmt.Errorf("mmap: %w", err)
		}
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1 // touch: charge the page to the cgroup now
		}
		chunks = append(chunks, b)
		return nil
	}
	for len(chunks) < n {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := alloc(); err != nil {
			return err
		}
	}
	k := int(float64(n) * churn)
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		for j := 0; j < k; j++ {
			idx := (i*k + j) % len(chunks)
			if err := syscall.Munmap(chunks[idx]); err != nil {
				return fmt.Errorf("munmap: %w", err)
			}
			b, err := syscall.Mmap(-1, 0, hogChunk, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
			if err != nil {
				chunks = append(chunks[:idx], chunks[idx+1:]...)
				return fmt.Errorf("mmap: %w", err)
			}
			for p := 0; p < len(b); p += 4096 {
				b[p] = byte(i)
			}
			chunks[idx] = b
		}
	}
}
