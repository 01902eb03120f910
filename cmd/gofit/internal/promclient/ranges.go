package promclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/api"
	"github.com/prometheus/common/model"
)

// Range is a range query read in chunks (ReadRange): it is evaluated at
// Start, Start+Step, … up to End.
type Range struct {
	Query      string
	Start, End time.Time
	Step       time.Duration
	// ChunkSteps bounds the evaluation times one request asks for
	// (0: DefaultChunkSteps), so the server's answer and ours stay
	// bounded however long the range.
	ChunkSteps int
}

// DefaultChunkSteps is a chunk of a day of step, at least one step and
// at most 10,000 (Prometheus answers at most 11,000 points a series).
func DefaultChunkSteps(step time.Duration) int {
	if step <= 0 {
		return 1
	}
	return int(max(1, min(10000, 24*time.Hour/step)))
}

// Chunk is one request's answer: the range's evaluation times From to
// To (To excluded, counted from the range's Start), Start to End (End
// included). Its series are read with Points or Matrix, while ReadRange's
// callback runs only: they are slices of the answer's body.
type Chunk struct {
	Start, End time.Time
	From, To   int
	// Warnings are the server's warnings about this chunk.
	Warnings []string
	result   []rawSeries
}

// ReadRange runs r on c one chunk of at most r.ChunkSteps evaluation
// times after another, in time order, and hands each answer to each as
// it comes: the chunks neither overlap nor skip a step, and only one
// chunk's answer is held at a time. It stops at the first error, c's,
// the answer's or each's, or when ctx is done; the error names the
// query and the chunk's range. Several may run at once on one client.
func ReadRange(ctx context.Context, c api.Client, r Range, each func(*Chunk) error) error {
	if r.Step <= 0 || r.End.Before(r.Start) {
		return fmt.Errorf("prometheus query %s: want a step and an end not before the start (step %v, %s to %s)", r.Query, r.Step, stamp(r.Start), stamp(r.End))
	}
	steps := int(r.End.Sub(r.Start)/r.Step) + 1
	size := r.ChunkSteps
	if size <= 0 {
		size = DefaultChunkSteps(r.Step)
	}
	for from := 0; from < steps; from += size {
		ch := &Chunk{From: from, To: min(from+size, steps)}
		ch.Start = r.Start.Add(time.Duration(ch.From) * r.Step)
		ch.End = r.Start.Add(time.Duration(ch.To-1) * r.Step)
		err := ctx.Err()
		if err == nil {
			err = ch.read(ctx, c, r.Query, r.Step)
		}
		if err == nil {
			err = each(ch)
		}
		if err != nil {
			return fmt.Errorf("prometheus query %s (%s to %s, step %s): %w", r.Query, stamp(ch.Start), stamp(ch.End), model.Duration(r.Step), err)
		}
	}
	return nil
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// read asks for the chunk as client_golang's API does (a form POST,
// GET where the server refuses POST) and keeps its answer's series.
func (ch *Chunk) read(ctx context.Context, c api.Client, query string, step time.Duration) error {
	form := url.Values{
		"query": {query},
		"start": {formatTime(ch.Start)},
		"end":   {formatTime(ch.End)},
		"step":  {strconv.FormatFloat(step.Seconds(), 'f', -1, 64)},
	}.Encode()
	u := c.URL("/api/v1/query_range", nil)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), strings.NewReader(form))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	// Idempotent: the transport may retry it on a connection the server
	// closed.
	req.Header["Idempotency-Key"] = nil
	resp, body, err := c.Do(ctx, req)
	if err == nil && (resp.StatusCode == http.StatusMethodNotAllowed || resp.StatusCode == http.StatusNotImplemented) {
		u.RawQuery = form
		if req, err = http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil); err != nil {
			return err
		}
		resp, body, err = c.Do(ctx, req)
	}
	if err != nil {
		return err
	}
	ch.Warnings, ch.result, err = decodeMatrix(resp.StatusCode, body)
	return err
}

// formatTime is a time as client_golang's API sends it.
func formatTime(t time.Time) string {
	return strconv.FormatFloat(float64(t.Unix())+float64(t.Nanosecond())/1e9, 'f', -1, 64)
}

// rawJSON is a value as it stands in the answer's body: no copy
// (json.RawMessage copies, which for a day of a fleet is the body's size
// again), so the body must outlive it and stay unchanged.
type rawJSON []byte

// UnmarshalJSON keeps b, a slice of the body encoding/json decodes.
func (r *rawJSON) UnmarshalJSON(b []byte) error { *r = b; return nil }

// rawSeries is a series whose points stay raw until Points or Matrix
// reads them.
type rawSeries struct {
	Metric     model.Metric `json:"metric"`
	Values     rawJSON      `json:"values"`
	Histograms rawJSON      `json:"histograms"`
}

// rangeAnswer is the API's envelope.
type rangeAnswer struct {
	Status    string   `json:"status"`
	ErrorType string   `json:"errorType"`
	Error     string   `json:"error"`
	Warnings  []string `json:"warnings"`
	Data      struct {
		ResultType string      `json:"resultType"`
		Result     []rawSeries `json:"result"`
	} `json:"data"`
}

// decodeMatrix reads a range query's answer: its warnings and its
// series, their points left raw.
func decodeMatrix(status int, body []byte) ([]string, []rawSeries, error) {
	var a rangeAnswer
	if err := json.Unmarshal(body, &a); err != nil {
		return nil, nil, fmt.Errorf("HTTP %d: %w (%.200s)", status, err, body)
	}
	if a.Status != "success" {
		return a.Warnings, nil, fmt.Errorf("%s: %s (HTTP %d)", a.ErrorType, a.Error, status)
	}
	if a.Data.ResultType != "matrix" {
		return a.Warnings, nil, fmt.Errorf("got %s, want a matrix", a.Data.ResultType)
	}
	return a.Warnings, a.Data.Result, nil
}

// Points hands each float point of the chunk's series to put (t in
// seconds), series after series, each in time order, without a
// model.Matrix: a fleet's week is tens of millions of points, and
// model.Matrix spends an allocation or more on each (see fleet's
// BenchmarkFleet5000). Native histograms are left out.
func (ch *Chunk) Points(put func(m model.Metric, t, v float64)) error {
	for _, s := range ch.result {
		if err := scanPoints(s.Values, func(t, v float64) { put(s.Metric, t, v) }); err != nil {
			return fmt.Errorf("series %s: %w", s.Metric, err)
		}
	}
	return nil
}

// Matrix is the chunk's series as client_golang's API gives them: float
// points and native histograms.
func (ch *Chunk) Matrix() (model.Matrix, error) {
	m := make(model.Matrix, 0, len(ch.result))
	for _, s := range ch.result {
		ss := &model.SampleStream{Metric: s.Metric}
		for _, p := range []struct {
			raw  rawJSON
			into any
		}{{s.Values, &ss.Values}, {s.Histograms, &ss.Histograms}} {
			if len(p.raw) == 0 {
				continue
			}
			if err := json.Unmarshal(p.raw, p.into); err != nil {
				return nil, fmt.Errorf("series %s: %w", s.Metric, err)
			}
		}
		m = append(m, ss)
	}
	return m, nil
}

// scanPoints reads [[t,"v"],...] as the API writes it (already valid
// JSON: the envelope was decoded).
func scanPoints(b []byte, put func(t, v float64)) error {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || string(b) == "null" {
		return nil
	}
	i := 0
	skip := func() {
		for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\t' || b[i] == '\r') {
			i++
		}
	}
	want := func(c byte) error {
		skip()
		if i >= len(b) || b[i] != c {
			return fmt.Errorf("values: want %q at byte %d", c, i)
		}
		i++
		return nil
	}
	// num parses b[from:to] without copying it (strconv keeps nothing).
	num := func(from, to int) (float64, error) {
		if to <= from {
			return 0, fmt.Errorf("values: empty number at byte %d", from)
		}
		return strconv.ParseFloat(unsafe.String(&b[from], to-from), 64)
	}
	if err := want('['); err != nil {
		return err
	}
	skip()
	if i < len(b) && b[i] == ']' {
		return nil
	}
	for {
		if err := want('['); err != nil {
			return err
		}
		skip()
		j := i
		for j < len(b) && b[j] != ',' && b[j] != ' ' {
			j++
		}
		t, err := num(i, j)
		if err != nil {
			return err
		}
		i = j
		if err := want(','); err != nil {
			return err
		}
		if err := want('"'); err != nil {
			return err
		}
		j = bytes.IndexByte(b[i:], '"')
		if j < 0 {
			return fmt.Errorf("values: unterminated value at byte %d", i)
		}
		v, err := num(i, i+j)
		if err != nil {
			return err
		}
		i += j + 1
		if err := want(']'); err != nil {
			return err
		}
		put(t, v)
		skip()
		if i < len(b) && b[i] == ',' {
			i++
			continue
		}
		return want(']')
	}
}
