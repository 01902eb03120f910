package pods

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/load"
)

// TestLoadServer: the load pod's endpoint drives the window it is asked
// for at the target it names and answers what the lab's own loader
// would have measured; a bad request names its field.
func TestLoadServer(t *testing.T) {
	var hits atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.Method == http.MethodPost {
			b, _ := io.ReadAll(r.Body)
			if string(b) != `{"q":1}` {
				http.Error(w, "body "+string(b), http.StatusBadRequest)
				return
			}
		}
		io.WriteString(w, "ok\n")
	}))
	defer target.Close()
	const token = "0123456789abcdef0123456789abcdef"
	srv := httptest.NewServer(loadHandler(token))
	defer srv.Close()
	postAs := func(tok string, q loadRequest) (int, loadReply, string) {
		b, _ := json.Marshal(q)
		req, _ := http.NewRequest(http.MethodPost, srv.URL+loadPath, bytes.NewReader(b))
		req.Header.Set("Content-Type", "application/json")
		if tok != "" {
			req.Header.Set(loadTokenHeader, tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		var rep loadReply
		if resp.StatusCode == http.StatusOK {
			if err := json.Unmarshal(body, &rep); err != nil {
				t.Fatal(err)
			}
		}
		return resp.StatusCode, rep, string(body)
	}
	post := func(q loadRequest) (int, loadReply, string) { return postAs(token, q) }
	// Only the run that started the pod drives it: without its token,
	// or with another, nothing is sent.
	for _, tok := range []string{"", "fedcba9876543210fedcba9876543210"} {
		code, _, body := postAs(tok, loadRequest{Targets: wireTargets([]load.Target{{Method: http.MethodGet, URL: target.URL + "/a", Weight: 1}}), Seed: 1, Requests: 5, Window: time.Second, Concurrency: 1, InFlight: 1})
		if code != http.StatusForbidden || hits.Load() != 0 || !strings.Contains(body, loadTokenHeader) {
			t.Errorf("token %q: %d %q, %d hits: want 403 naming %s and no load", tok, code, body, hits.Load(), loadTokenHeader)
		}
	}
	mix := []load.Target{{Method: http.MethodGet, URL: target.URL + "/a", Weight: 1}, {Method: http.MethodPost, URL: target.URL + "/b", Body: []byte(`{"q":1}`), Weight: 1}}
	code, rep, body := post(loadRequest{Targets: wireTargets(mix), Seed: 1, Requests: 60, Window: 10 * time.Second, Concurrency: 4, InFlight: 4})
	if code != http.StatusOK {
		t.Fatalf("closed loop: %d %s", code, body)
	}
	if rep.Result.Requests != 60 || rep.Result.Errors != 0 || hits.Load() != 60 || len(rep.Blocks) == 0 || len(rep.Result.Targets) != 2 {
		t.Errorf("closed loop: %d ok, %d errors (%v), %d hits, %d blocks, %d targets", rep.Result.Requests, rep.Result.Errors, rep.Result.ErrorKinds, hits.Load(), len(rep.Blocks), len(rep.Result.Targets))
	}
	code, rep, body = post(loadRequest{Targets: wireTargets(mix[:1]), Seed: 1, Open: true, Rate: 200, Window: 500 * time.Millisecond, InFlight: 16})
	if code != http.StatusOK || rep.Result.Requests < 80 || rep.Result.Requests > 101 || rep.Result.P99 <= 0 {
		t.Errorf("open loop at 200/s for 0.5 s: %d %d requests, p99 %v %s", code, rep.Result.Requests, rep.Result.P99, body)
	}
	// A warm-up on the same connections, then the window with its marks
	// read at its edges: the counter a mark serves counts the requests
	// the target has seen, so the marks' difference is the window's alone.
	counter := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, `{"hits":%d}`, hits.Load())
	}))
	defer counter.Close()
	missing := httptest.NewServer(http.NotFoundHandler()) // a target without /debug/vars
	defer missing.Close()
	before := hits.Load()
	code, rep, body = post(loadRequest{Targets: wireTargets(mix), Seed: 1, Requests: 40, Window: 10 * time.Second, Warmup: 300 * time.Millisecond,
		Concurrency: 2, InFlight: 2, Marks: []string{counter.URL, missing.URL, target.URL + "/nope"}})
	if code != http.StatusOK || len(rep.Marks) != 3 {
		t.Fatalf("marks: %d %s", code, body)
	}
	var m0, m1 struct{ Hits int64 }
	if err := json.Unmarshal(rep.Marks[0].Start, &m0); err != nil || json.Unmarshal(rep.Marks[0].End, &m1) != nil {
		t.Fatalf("mark 0: %+v: %v", rep.Marks[0], err)
	}
	// (A warm-up request cut off at its end may reach the target after
	// the first mark: up to one per worker.)
	if warm, in := m0.Hits-before, m1.Hits-m0.Hits; warm <= 0 || in < 40 || in > 42 || rep.Result.Requests != 40 {
		t.Errorf("warm-up %d requests (want some, outside the window), window %d between the marks and %d measured: want 40 (+2 at most)", warm, in, rep.Result.Requests)
	}
	if rep.WindowSeconds <= 0 || rep.WindowSeconds < rep.Result.Seconds {
		t.Errorf("window %v s, the load's %v s: the window holds the load", rep.WindowSeconds, rep.Result.Seconds)
	}
	if rep.Marks[0].Error != "" || !strings.Contains(rep.Marks[1].Error, "404") || rep.Marks[1].Start != nil {
		t.Errorf("a mark that answers 404: %+v; the one that answers: %+v", rep.Marks[1], rep.Marks[0])
	}
	if rep.Marks[2].Error == "" {
		t.Errorf("a mark that is not JSON: no error (%+v)", rep.Marks[2])
	}
	for field, q := range map[string]loadRequest{
		"marks[0]":       {Targets: wireTargets(mix), Window: time.Second, Concurrency: 1, InFlight: 1, Marks: []string{"file:///etc/passwd"}},
		"warmup_ns":      {Targets: wireTargets(mix), Window: time.Second, Concurrency: 1, InFlight: 1, Warmup: -time.Second},
		"targets":        {Window: time.Second, Concurrency: 1, InFlight: 1},
		"rate":           {Targets: wireTargets(mix), Open: true, Window: time.Second, InFlight: 1},
		"concurrency":    {Targets: wireTargets(mix), Window: time.Second, InFlight: 1},
		"in_flight":      {Targets: wireTargets(mix), Window: time.Second, Concurrency: 1},
		"targets[0].url": {Targets: []wireTarget{{Target: load.Target{Method: "GET", URL: "ftp://x", Weight: 1}}}, Window: time.Second, Concurrency: 1, InFlight: 1},
	} {
		code, _, body := post(q)
		if code != http.StatusBadRequest || !strings.Contains(body, field+":") {
			t.Errorf("%s: %d %q", field, code, body)
		}
	}
}

// TestServeLoadNeedsToken: a load pod started without its run's token
// refuses to serve at all, naming the variable.
func TestServeLoadNeedsToken(t *testing.T) {
	t.Setenv(LoadTokenEnv, "short")
	err := ServeLoad("127.0.0.1:0")
	if err == nil || !strings.Contains(err.Error(), "$"+LoadTokenEnv) {
		t.Errorf("ServeLoad with a 5-character token: %v, want an error naming $%s", err, LoadTokenEnv)
	}
}

// TestMarksCarryTheAgentsToken: a mark with a token is read with it as a
// bearer, over https (the agent's self-made certificate accepted), and a
// mark without one gets none: the trial's own /debug/vars never sees the
// agent's token. A token for a plain-http mark is refused, naming it.
func TestMarksCarryTheAgentsToken(t *testing.T) {
	const tok = "agent-token"
	var agentAuth, trialAuth atomic.Value
	agentSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		agentAuth.Store(r.Header.Get("Authorization"))
		io.WriteString(w, `{"cpu":{}}`)
	}))
	defer agentSrv.Close()
	trial := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		trialAuth.Store(r.Header.Get("Authorization"))
		io.WriteString(w, `{}`)
	}))
	defer trial.Close()
	marks := make([]mark, 2)
	readMarks(context.Background(), []string{agentSrv.URL + "/v1/pods/x", trial.URL + "/debug/vars"}, []string{tok, ""}, marks, false)
	if marks[0].Error != "" || marks[1].Error != "" {
		t.Fatalf("marks: %+v", marks)
	}
	if got := agentAuth.Load(); got != "Bearer "+tok {
		t.Errorf("the agent got Authorization %q, want the token", got)
	}
	if got := trialAuth.Load(); got != "" {
		t.Errorf("the trial got Authorization %q, want none", got)
	}
	q := loadRequest{Targets: []wireTarget{{Target: load.Target{Method: "GET", URL: trial.URL}}}, Window: time.Second, Open: true, Rate: 1, InFlight: 1,
		Marks: []string{trial.URL + "/v1/pods/x"}, MarkAuth: []string{tok}}
	if err := q.check(); err == nil || !strings.Contains(err.Error(), "mark_auth[0]") {
		t.Errorf("a token for a plain-http mark: %v, want an error naming mark_auth[0]", err)
	}
}

// TestMarksSurviveOneSlowAnswer: on the e2e node a busy agent once
// answered a window's edge after the client's timeout, and the whole
// study ended on it (2026-12-07). One slow answer is read again; an
// agent that never answers is still an error, and a refusal (a 403) is
// not retried.
func TestMarksSurviveOneSlowAnswer(t *testing.T) {
	old := markClient
	markClient = &http.Client{Timeout: 200 * time.Millisecond}
	defer func() { markClient = old }()
	var calls atomic.Int32
	slowOnce := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			time.Sleep(time.Second)
		}
		io.WriteString(w, `{"cpu":{}}`)
	}))
	defer slowOnce.Close()
	never := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { time.Sleep(time.Second) }))
	defer never.Close()
	var denied atomic.Int32
	refuses := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		denied.Add(1)
		w.WriteHeader(http.StatusForbidden)
	}))
	defer refuses.Close()
	// A port nothing listens on: refused at once, not read again.
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	if _, err := markClient.Get(gone.URL); err == nil || transient(err) {
		t.Errorf("a refused connection: %v, want an error not read again", err)
	}
	if _, err := markClient.Get(never.URL); err == nil || !transient(err) {
		t.Errorf("a timeout: %v, want an error read again", err)
	}
	marks := make([]mark, 3)
	readMarks(context.Background(), []string{slowOnce.URL, never.URL, refuses.URL}, nil, marks, false)
	if marks[0].Error != "" || string(marks[0].Start) != `{"cpu":{}}` {
		t.Errorf("one slow answer: %+v, want the second read's value", marks[0])
	}
	if marks[1].Error == "" {
		t.Errorf("an agent that never answers: no error")
	}
	if marks[2].Error == "" || denied.Load() != 1 {
		t.Errorf("a 403: %+v after %d reads, want an error after one", marks[2], denied.Load())
	}
}
