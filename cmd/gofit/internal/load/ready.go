package load

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// Readiness says how to wait for a service to start.
type Readiness struct {
	URL     string          // polled with GET until it answers below 400
	Exited  <-chan struct{} // closed when the service's process has exited
	Timeout time.Duration   // how long a start may take (default 30s)
	// Check runs between polls; an error from it ends the wait (a stall,
	// say). It may be nil.
	Check func() error
}

// ErrExited means the service exited before it was ready.
var ErrExited = errors.New("exited while starting")

// NotReadyError means the service did not become ready.
type NotReadyError struct {
	URL  string
	Last string // the last answer, or the last transport error
	// Refused is set when it kept answering an error that is not "wait"
	// (a 404 on a wrong URL, a 500 from a broken handler) for
	// badAnswerWindow; otherwise the timeout ran out.
	Refused bool
	After   time.Duration
}

func (e *NotReadyError) Error() string {
	if e.Refused {
		return fmt.Sprintf("%s answered %s for %v; check the URL", e.URL, e.Last, e.After)
	}
	return fmt.Sprintf("%s did not become ready within %v (last: %s)", e.URL, e.After, e.Last)
}

// badAnswerWindow is how long a service may answer with an error that
// does not mean "not yet" before the wait gives up on it.
const badAnswerWindow = 3 * time.Second

// warming reports whether a status means "up, but not ready yet": a
// service warming its caches or waiting for a dependency answers 503
// (Kubernetes readiness probes treat it the same), a proxy in front of it
// 502 or 504, a rate limiter 429.
func warming(code int) bool {
	switch code {
	case http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusGatewayTimeout, http.StatusTooManyRequests:
		return true
	}
	return false
}

// WaitReady polls r.URL until it answers with a status below 400. No
// answer yet and "not yet" statuses (503, 502, 504, 429) are waited out
// until the timeout; other error statuses fail after a few seconds.
func WaitReady(ctx context.Context, r Readiness) error {
	if r.Timeout <= 0 {
		r.Timeout = 30 * time.Second
	}
	client := &http.Client{Timeout: time.Second}
	start := time.Now()
	var badSince time.Time
	last := "no answer"
	for {
		select {
		case <-r.Exited:
			return ErrExited
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.URL, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err == nil {
			io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			if resp.StatusCode < 400 {
				return nil
			}
			last = "HTTP " + resp.Status
			if warming(resp.StatusCode) {
				badSince = time.Time{}
			} else {
				if badSince.IsZero() {
					badSince = time.Now()
				}
				if time.Since(badSince) > badAnswerWindow {
					return &NotReadyError{URL: r.URL, Last: last, Refused: true, After: badAnswerWindow}
				}
			}
		} else {
			badSince = time.Time{}
			last = err.Error()
		}
		if r.Check != nil {
			if err := r.Check(); err != nil {
				return err
			}
		}
		if time.Since(start) > r.Timeout {
			return &NotReadyError{URL: r.URL, Last: last, After: r.Timeout}
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		case <-r.Exited:
			return ErrExited
		}
	}
}
