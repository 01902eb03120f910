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
	srv := httptest.NewServer(loadHandler())
	defer srv.Close()
	post := func(q loadRequest) (int, loadReply, string) {
		b, _ := json.Marshal(q)
		resp, err := http.Post(srv.URL+loadPath, "application/json", bytes.NewReader(b))
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
