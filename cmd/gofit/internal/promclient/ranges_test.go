package promclient

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
)

// rangeProm answers /api/v1/query_range as Prometheus does for two
// series evaluated at start, start+step, … up to end: {pod="a"} whose
// value is the evaluation time, and {pod="h"}, a native histogram. It
// records each request.
type rangeProm struct {
	mu   sync.Mutex
	seen []rangeReq
	// noPOST refuses POST (405), as a proxy that takes GET only;
	// failFrom fails the requests that start at or after it (422);
	// hold keeps each request open until the client goes; warn is sent
	// with every answer.
	noPOST   bool
	failFrom float64
	hold     bool
	warn     string
}

type rangeReq struct {
	method           string
	query            string
	start, end, step float64
}

func (p *rangeProm) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/api/v1/query_range" {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	num := func(k string) float64 { v, _ := strconv.ParseFloat(r.Form.Get(k), 64); return v }
	req := rangeReq{r.Method, r.Form.Get("query"), num("start"), num("end"), num("step")}
	p.mu.Lock()
	p.seen = append(p.seen, req)
	p.mu.Unlock()
	if p.noPOST && r.Method == http.MethodPost {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if p.hold {
		// Until the client goes; a client that stays gets an answer.
		select {
		case <-r.Context().Done():
			return
		case <-time.After(3 * time.Second):
		}
	}
	w.Header().Set("Content-Type", "application/json")
	if p.failFrom != 0 && req.start >= p.failFrom {
		w.WriteHeader(http.StatusUnprocessableEntity)
		fmt.Fprint(w, `{"status":"error","errorType":"execution","error":"query processing would load too many samples into memory"}`)
		return
	}
	var vs, hs []string
	for t := req.start; t <= req.end+1e-9; t += req.step {
		ts := strconv.FormatFloat(t, 'f', -1, 64)
		vs = append(vs, fmt.Sprintf(`[%s,"%s"]`, ts, ts))
		hs = append(hs, fmt.Sprintf(`[%s,{"count":"10","sum":"1.5","buckets":[[0,"0","0.01","9"],[0,"0.01","0.1","1"]]}]`, ts))
	}
	warns := ""
	if p.warn != "" {
		warns = fmt.Sprintf(`,"warnings":[%q]`, p.warn)
	}
	fmt.Fprintf(w, `{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"pod":"a"},"values":[%s]},{"metric":{"pod":"h"},"histograms":[%s]}]}%s}`,
		strings.Join(vs, ","), strings.Join(hs, ","), warns)
}

func (p *rangeProm) requests() []rangeReq {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]rangeReq(nil), p.seen...)
}

func rangeClient(t *testing.T, p *rangeProm) api.Client {
	t.Helper()
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	c, err := Config{URL: srv.URL}.Client()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var t0 = time.Unix(1_700_000_000, 0)

func unix(t time.Time) float64 { return float64(t.UnixMilli()) / 1e3 }

// TestReadRangeChunks: a range goes in chunks of ChunkSteps evaluation
// times, in order, the last one partial, each step asked for once and
// handed on once: none overlapped, none skipped.
func TestReadRangeChunks(t *testing.T) {
	for _, tc := range []struct {
		name       string
		start, end time.Time
		step       time.Duration
		chunk      int
		want       [][2]int // each chunk's first and last step
	}{
		{"a last partial chunk", t0, t0.Add(9 * time.Minute), time.Minute, 4, [][2]int{{0, 3}, {4, 7}, {8, 9}}},
		{"an end between steps", t0, t0.Add(9*time.Minute + 30*time.Second), time.Minute, 4, [][2]int{{0, 3}, {4, 7}, {8, 9}}},
		{"whole chunks only", t0, t0.Add(7 * time.Minute), time.Minute, 4, [][2]int{{0, 3}, {4, 7}}},
		{"one step", t0, t0, time.Minute, 4, [][2]int{{0, 0}}},
		{"one step a chunk", t0, t0.Add(2 * time.Minute), time.Minute, 1, [][2]int{{0, 0}, {1, 1}, {2, 2}}},
		{"the default: a day a chunk", t0.Add(10 * time.Minute), t0.Add(72 * time.Hour), 10 * time.Minute, 0, [][2]int{{0, 143}, {144, 287}, {288, 431}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &rangeProm{}
			var chunks [][2]int
			points := map[float64]int{}
			err := ReadRange(context.Background(), rangeClient(t, p), Range{Query: "up", Start: tc.start, End: tc.end, Step: tc.step, ChunkSteps: tc.chunk}, func(c *Chunk) error {
				at := func(i int) time.Time { return tc.start.Add(time.Duration(i) * tc.step) }
				if !c.Start.Equal(at(c.From)) || !c.End.Equal(at(c.To-1)) {
					t.Errorf("chunk steps %d to %d: from %v to %v", c.From, c.To, c.Start, c.End)
				}
				chunks = append(chunks, [2]int{c.From, c.To - 1})
				return c.Points(func(m model.Metric, ts, v float64) {
					if m["pod"] != "a" || ts != v {
						t.Errorf("point %s %v %v", m, ts, v)
					}
					points[ts]++
				})
			})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(chunks, tc.want) {
				t.Errorf("chunks (first, last step) %v, want %v", chunks, tc.want)
			}
			reqs := p.requests()
			if len(reqs) != len(tc.want) {
				t.Fatalf("%d requests, want %d", len(reqs), len(tc.want))
			}
			for k, w := range tc.want {
				r := reqs[k]
				if r.start != unix(tc.start.Add(time.Duration(w[0])*tc.step)) || r.end != unix(tc.start.Add(time.Duration(w[1])*tc.step)) ||
					r.step != tc.step.Seconds() || r.method != http.MethodPost || r.query != "up" {
					t.Errorf("request %d: %+v, want steps %d to %d", k, r, w[0], w[1])
				}
			}
			steps := tc.want[len(tc.want)-1][1] + 1
			for i := range steps {
				ts := unix(tc.start.Add(time.Duration(i) * tc.step))
				if points[ts] != 1 {
					t.Errorf("step %d (%v) handed on %d times, want once", i, ts, points[ts])
				}
				delete(points, ts)
			}
			if len(points) > 0 {
				t.Errorf("points off the range's steps: %v", points)
			}
		})
	}
}

// TestReadRangeMatrix: a chunk's Matrix is what client_golang's API
// reads from the same answer, native histograms included; Points hands
// on the float points only; the server's warnings come with the chunk.
func TestReadRangeMatrix(t *testing.T) {
	p := &rangeProm{warn: "results truncated"}
	c := rangeClient(t, p)
	r := Range{Query: "up", Start: t0, End: t0.Add(5 * time.Minute), Step: time.Minute}
	want, _, err := v1.NewAPI(c).QueryRange(context.Background(), r.Query, v1.Range{Start: r.Start, End: r.End, Step: r.Step})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	err = ReadRange(context.Background(), c, r, func(ch *Chunk) error {
		n++
		m, err := ch.Matrix()
		if err != nil {
			return err
		}
		if !reflect.DeepEqual(m, want) || len(m) != 2 || len(m[1].Histograms) != 6 {
			t.Errorf("Matrix:\n%v\nclient_golang's:\n%v", m, want)
		}
		if !reflect.DeepEqual(ch.Warnings, []string{"results truncated"}) {
			t.Errorf("warnings %q", ch.Warnings)
		}
		pods := map[model.LabelValue]int{}
		err = ch.Points(func(m model.Metric, _, _ float64) { pods[m["pod"]]++ })
		if pods["a"] != 6 || len(pods) != 1 {
			t.Errorf("Points handed on %v, want the 6 float points of pod a", pods)
		}
		return err
	})
	if err != nil || n != 1 {
		t.Errorf("%d chunks, error %v", n, err)
	}
}

// TestReadRangeCancel: a cancelled context stops the reading between
// chunks and in a request, with an error that says so and names the
// chunk not read.
func TestReadRangeCancel(t *testing.T) {
	p := &rangeProm{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := Range{Query: "up", Start: t0, End: t0.Add(9 * time.Minute), Step: time.Minute, ChunkSteps: 4}
	n := 0
	err := ReadRange(ctx, rangeClient(t, p), r, func(*Chunk) error {
		n++
		cancel()
		return nil
	})
	if !errors.Is(err, context.Canceled) || n != 1 || len(p.requests()) != 1 {
		t.Errorf("cancelled in the first chunk: error %v, %d chunks, %d requests; want context.Canceled after 1", err, n, len(p.requests()))
	}
	// Not a request made to fail: none is made.
	if want := fmt.Sprintf("prometheus query up (%s to %s, step 1m): context canceled", stamp(t0.Add(4*time.Minute)), stamp(t0.Add(7*time.Minute))); err == nil || err.Error() != want {
		t.Errorf("error %v, want %q", err, want)
	}

	held := &rangeProm{hold: true}
	ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	began := time.Now()
	err = ReadRange(ctx, rangeClient(t, held), r, func(*Chunk) error {
		t.Error("a chunk from a server that never answered")
		return nil
	})
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(began) > 10*time.Second {
		t.Errorf("a request held open: error %v after %v, want the deadline's", err, time.Since(began))
	}
}

// TestReadRangeErrors: the server's error, the callback's and a bad
// answer stop the reading; each names the query and the chunk's range.
func TestReadRangeErrors(t *testing.T) {
	p := &rangeProm{failFrom: unix(t0.Add(4 * time.Minute))}
	c := rangeClient(t, p)
	r := Range{Query: `sum(rate(x[5m]))`, Start: t0, End: t0.Add(9 * time.Minute), Step: time.Minute, ChunkSteps: 4}
	n := 0
	err := ReadRange(context.Background(), c, r, func(*Chunk) error { n++; return nil })
	want := fmt.Sprintf("prometheus query sum(rate(x[5m])) (%s to %s, step 1m): execution: query processing would load too many samples into memory (HTTP 422)",
		stamp(t0.Add(4*time.Minute)), stamp(t0.Add(7*time.Minute)))
	if err == nil || err.Error() != want || n != 1 || len(p.requests()) != 2 {
		t.Errorf("second chunk failed: %d chunks, %d requests, error\n%v\nwant\n%s", n, len(p.requests()), err, want)
	}

	stop := errors.New("enough")
	err = ReadRange(context.Background(), c, r, func(*Chunk) error { return stop })
	if !errors.Is(err, stop) || !strings.Contains(err.Error(), "sum(rate(x[5m])) ("+stamp(t0)+" to "+stamp(t0.Add(3*time.Minute))) {
		t.Errorf("the callback's error: %v", err)
	}

	if err := ReadRange(context.Background(), c, Range{Query: "up", Start: t0, End: t0.Add(-time.Minute), Step: time.Minute}, func(*Chunk) error { return nil }); err == nil || !strings.Contains(err.Error(), "prometheus query up") {
		t.Errorf("an end before the start: %v", err)
	}
}

// TestReadRangeGET: a server that refuses POST is asked again by GET, as
// client_golang's API does.
func TestReadRangeGET(t *testing.T) {
	p := &rangeProm{noPOST: true}
	n := 0
	err := ReadRange(context.Background(), rangeClient(t, p), Range{Query: "up", Start: t0, End: t0.Add(time.Minute), Step: time.Minute}, func(c *Chunk) error {
		return c.Points(func(model.Metric, float64, float64) { n++ })
	})
	reqs := p.requests()
	if err != nil || n != 2 || len(reqs) != 2 || reqs[0].method != http.MethodPost || reqs[1].method != http.MethodGet || reqs[1].query != "up" {
		t.Errorf("error %v, %d points, requests %+v", err, n, reqs)
	}
}

// TestDecodeMatrix: the answer's envelope and points, read in place.
func TestDecodeMatrix(t *testing.T) {
	var got []string
	put := func(m model.Metric, ts, v float64) { got = append(got, fmt.Sprintf("%s %g %g", m["pod"], ts, v)) }
	body := `{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"pod":"a"},"values":[[1.5,"2"],[3,"NaN"]]},{"metric":{"pod":"b"},"values":[]}]},"warnings":["w"]}`
	warns, result, err := decodeMatrix(200, []byte(body))
	if err == nil {
		err = (&Chunk{result: result}).Points(put)
	}
	if err != nil || strings.Join(got, ";") != "a 1.5 2;a 3 NaN" || len(warns) != 1 {
		t.Errorf("got %q warnings %q err %v", got, warns, err)
	}
	for _, tc := range []struct{ body, want string }{
		{`{"status":"error","errorType":"bad_data","error":"parse error"}`, "bad_data: parse error (HTTP 400)"},
		{`{"status":"success","data":{"resultType":"vector","result":[]}}`, "want a matrix"},
		{`{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1,2]]}]}}`, `want '"'`},
		{`<html>`, "HTTP 400: invalid character"},
	} {
		_, result, err := decodeMatrix(400, []byte(tc.body))
		if err == nil {
			err = (&Chunk{result: result}).Points(put)
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.body, err, tc.want)
		}
	}
}
