package load

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestParseTargets(t *testing.T) {
	in := `# a mix
GET http://127.0.0.1:{port}/get
X-Trace: {port}
accept: text/plain

POST http://127.0.0.1:{port}/post weight=3
Content-Type: application/octet-stream
@body4k.bin

get http://127.0.0.1:{port}/gzip
`
	ts, err := ParseTargets(strings.NewReader(in), "mix.txt", "testdata")
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 3 {
		t.Fatalf("%d targets, want 3: %+v", len(ts), ts)
	}
	if ts[0].Method != "GET" || ts[0].Header.Get("X-Trace") != "{port}" || ts[0].Header.Get("Accept") != "text/plain" || ts[0].Weight != 1 {
		t.Errorf("first target %+v", ts[0])
	}
	if ts[1].Method != "POST" || len(ts[1].Body) != 4096 || ts[1].Weight != 3 || ts[1].Header.Get("Content-Type") != "application/octet-stream" {
		t.Errorf("second target: %s weight %d, %d body bytes, header %v", ts[1].Method, ts[1].Weight, len(ts[1].Body), ts[1].Header)
	}
	if ts[2].Method != "GET" || ts[2].URL != "http://127.0.0.1:{port}/gzip" {
		t.Errorf("third target %+v", ts[2])
	}
	p := WithPort(ts, "8080")
	if p[0].URL != "http://127.0.0.1:8080/get" || p[0].Header.Get("X-Trace") != "8080" || ts[0].Header.Get("X-Trace") != "{port}" {
		t.Errorf("WithPort: %s %v (original now %v)", p[0].URL, p[0].Header, ts[0].Header)
	}
}

// Bad input is an error naming the file and the line.
func TestParseTargetsErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "mix.txt: no targets"},
		{"GET", "mix.txt:1:"},
		{"GET ftp://x/", "mix.txt:1:"},
		{"G3T http://x/", "mix.txt:1:"},
		{"GET http://x/ weight=0", "mix.txt:1:"},
		{"GET http://x/ weight=abc", "mix.txt:1:"},
		{"GET http://x/\nnot a header", "mix.txt:2:"},
		{"POST http://x/\n@missing.bin", "mix.txt:2:"},
		{"POST http://x/\n@", "mix.txt:2:"},
		{"POST http://x/\n@body4k.bin\n@body4k.bin", "mix.txt:3:"},
		{"POST http://x/\n@body4k.bin\nX-A: 1", "mix.txt:3:"},
	} {
		_, err := ParseTargets(strings.NewReader(tc.in), "mix.txt", "testdata")
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one starting %q", tc.in, err, tc.want)
		}
	}
	if _, _, err := ParseHeader("no colon"); err == nil || !strings.Contains(err.Error(), "--header") {
		t.Errorf("--header without a colon: %v", err)
	}
	if k, v, err := ParseHeader("x-api-key:  abc "); err != nil || k != "X-Api-Key" || v != "abc" {
		t.Errorf("ParseHeader = %q %q %v", k, v, err)
	}
}

// A seeded schedule gives each target its weight's share, and the same
// seed the same order.
func TestSchedule(t *testing.T) {
	ts := []Target{{Weight: 1}, {Weight: 3}, {Weight: 2}}
	a, b, c := Schedule(ts, 7), Schedule(ts, 7), Schedule(ts, 8)
	n := map[int]int{}
	for _, i := range a {
		n[i]++
	}
	if len(a) != 6 || n[0] != 1 || n[1] != 3 || n[2] != 2 {
		t.Errorf("schedule %v: want 1, 3 and 2 of targets 0, 1, 2", a)
	}
	if !slices.Equal(a, b) {
		t.Errorf("seed 7 twice: %v then %v", a, b)
	}
	if slices.Equal(a, c) {
		t.Errorf("seeds 7 and 8 gave the same order %v", a)
	}
}

// Both loops rotate the mix per request, send each target's method,
// headers and body, and count status codes and latencies per target.
func TestMixRotatesAndCountsPerTarget(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen[r.Method+" "+r.URL.Path+" "+r.Header.Get("X-Key")]++
		mu.Unlock()
		switch r.URL.Path {
		case "/post":
			if len(b) != 4096 {
				http.Error(w, "short body", http.StatusBadRequest)
			}
		case "/missing":
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	ts := []Target{
		{Method: "GET", URL: srv.URL + "/get", Header: http.Header{"X-Key": {"k"}}, Weight: 2},
		{Method: "POST", URL: srv.URL + "/post", Body: make([]byte, 4096), Weight: 1},
		{Method: "GET", URL: srv.URL + "/missing", Weight: 1},
	}
	ld := NewLoader(4, nil)
	defer ld.Close()
	for _, loop := range []string{"closed", "open"} {
		clear(seen)
		var r Result
		if loop == "closed" {
			r = ld.Closed(context.Background(), NewMix(ts, 1), 400, 0, 4)
		} else {
			r = ld.Open(context.Background(), NewMix(ts, 1), 400, time.Second)
		}
		if len(r.Targets) != 3 {
			t.Fatalf("%s: %d target results", loop, len(r.Targets))
		}
		get, post, miss := r.Targets[0], r.Targets[1], r.Targets[2]
		// 400 requests in the schedule's order: exactly 200, 100, 100.
		if get.Requests != 200 || post.Requests != 100 || miss.Requests != 100 {
			t.Errorf("%s: requests per target %d/%d/%d, want 200/100/100", loop, get.Requests, post.Requests, miss.Requests)
		}
		if get.Status["200"] != 200 || post.Status["200"] != 100 || miss.Status["404"] != 100 {
			t.Errorf("%s: status counts %v %v %v", loop, get.Status, post.Status, miss.Status)
		}
		if seen["GET /get k"] != 200 || seen["POST /post "] != 100 {
			t.Errorf("%s: the server saw %v", loop, seen)
		}
		if get.Method != "GET" || post.URL != srv.URL+"/post" || get.P99 <= 0 || get.P50 > get.P99 {
			t.Errorf("%s: target results %+v", loop, get)
		}
		if r.Errors != 100 || r.ErrorKinds["HTTP 404 Not Found"] != 100 {
			t.Errorf("%s: errors %d %v, want the 100 404s", loop, r.Errors, r.ErrorKinds)
		}
	}
}

// A service answering 503 while it warms up is waited for, not failed;
// one answering 404 is failed after a few seconds, naming the status.
func TestWaitReadyWarmingUp(t *testing.T) {
	start := time.Now()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if time.Since(start) < 4*time.Second {
			http.Error(w, "warming up", http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	if err := WaitReady(context.Background(), Readiness{URL: srv.URL, Timeout: time.Minute}); err != nil {
		t.Errorf("503 for 4s, then 200: %v", err)
	}
	bad := httptest.NewServer(http.NotFoundHandler())
	defer bad.Close()
	err := WaitReady(context.Background(), Readiness{URL: bad.URL, Timeout: time.Minute})
	if nr, ok := err.(*NotReadyError); !ok || !nr.Refused || !strings.Contains(err.Error(), "404") {
		t.Errorf("404: %v, want a refusal naming the status", err)
	}
	exited := make(chan struct{})
	close(exited)
	if err := WaitReady(context.Background(), Readiness{URL: "http://127.0.0.1:1/", Exited: exited}); err != ErrExited {
		t.Errorf("exited service: %v", err)
	}
}
