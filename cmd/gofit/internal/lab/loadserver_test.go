package lab

import (
	"bytes"
	"encoding/json"
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
	for field, q := range map[string]loadRequest{
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
