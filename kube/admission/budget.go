package admission

import (
	"context"
	"sync"
)

// budget counts the bytes of request bodies held in memory at once.
//
// It is not a FIFO semaphore on purpose: a request takes room for the
// bytes it has actually received, when it receives them, and whoever fits
// goes. With a FIFO queue (golang.org/x/sync/semaphore), one large waiter
// at the head stopped every small review behind it, and TryAcquire failed
// while anyone waited: ten clients announcing 7 MiB bodies and sending
// them slowly kept every real review queued until it failed open.
type budget struct {
	mu    sync.Mutex
	used  int64
	limit int64
	freed chan struct{} // closed, and replaced, on each release
}

func newBudget(limit int64) *budget {
	return &budget{limit: limit, freed: make(chan struct{})}
}

// tryTake takes n bytes if they fit now.
func (b *budget) tryTake(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.limit {
		return false
	}
	b.used += n
	return true
}

// take waits for n bytes to fit until ctx ends. A waiter holds nothing
// and blocks no one: any request that fits takes its room first.
func (b *budget) take(ctx context.Context, n int64) error {
	for {
		b.mu.Lock()
		if b.used+n <= b.limit {
			b.used += n
			b.mu.Unlock()
			return nil
		}
		freed := b.freed
		b.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-freed:
		}
	}
}

// release gives back n bytes and wakes the waiters.
func (b *budget) release(n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
	close(b.freed)
	b.freed = make(chan struct{})
}

// inUse is the bytes held now.
func (b *budget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}
