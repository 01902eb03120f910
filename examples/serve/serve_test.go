package serve

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestWork: ?n= rounds of SHA-256 over 1 KiB, chained; n out of range or
// not a number is a 400 that names n.
func TestWork(t *testing.T) {
	buf := make([]byte, 1024)
	var sum [32]byte
	for range 3 {
		sum = sha256.Sum256(buf)
		copy(buf, sum[:])
	}
	for q, want := range map[string]string{
		"?n=3":              fmt.Sprintf("%x\n", sum[:4]),
		"?n=0":              "00000000\n",
		"?n=-1":             "n: want an integer from 0 to 1000000\n",
		"?n=1000001":        "n: want an integer from 0 to 1000000\n",
		"?n=x":              "n: want an integer from 0 to 1000000\n",
		"?n=3&garbage=64":   fmt.Sprintf("%x\n", sum[:4]),
		"?n=3&garbage=-1":   "garbage: want an integer from 0 to 4096\n",
		"?n=3&garbage=4097": "garbage: want an integer from 0 to 4096\n",
	} {
		rec := httptest.NewRecorder()
		Work(rec, httptest.NewRequest("GET", "/work"+q, nil))
		if got := rec.Body.String(); got != want {
			t.Errorf("%s: %q, want %q", q, got, want)
		}
		if bad := strings.Contains(want, "want an integer"); bad != (rec.Code == http.StatusBadRequest) {
			t.Errorf("%s: status %d", q, rec.Code)
		}
	}
}

// TestServeStops: Serve answers until its context is done, then returns
// nil, whether it closes at once or shuts down with a grace period; a
// listener that fails is an error.
func TestServeStops(t *testing.T) {
	for _, grace := range []time.Duration{0, time.Second} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- Serve(ctx, ln, http.HandlerFunc(Work), grace) }()
		resp, err := http.Get("http://" + ln.Addr().String() + "/work?n=0")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "00000000\n" {
			t.Errorf("grace %v: answered %q", grace, b)
		}
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("grace %v: stopped with %v, want nil", grace, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("grace %v: did not stop", grace)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	if err := Serve(context.Background(), ln, http.HandlerFunc(Work), 0); err == nil {
		t.Error("a closed listener: nil, want an error")
	}
}

// TestUntilSignalListenError: an address that cannot be listened on is
// an error naming it.
func TestUntilSignalListenError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	err = UntilSignal(ln.Addr().String(), http.HandlerFunc(Work), 0)
	if err == nil || !strings.Contains(err.Error(), ln.Addr().String()) {
		t.Errorf("a taken address: %v, want an error naming %s", err, ln.Addr())
	}
}

// TestWorkGarbage: ?garbage=K puts K KiB on the heap per request.
func TestWorkGarbage(t *testing.T) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 10 {
		Work(httptest.NewRecorder(), httptest.NewRequest("GET", "/work?n=0&garbage=512", nil))
	}
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got < 10*512<<10 {
		t.Errorf("10 requests of ?garbage=512 allocated %d bytes on the heap, want at least %d", got, 10*512<<10)
	}
}
