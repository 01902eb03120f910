package fleet

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

// queryRange runs one range query on the raw client and hands each point
// to put as it reads the answer: a fleet's week is tens of millions of
// points, and client_golang's model.Matrix spends an allocation or more
// on each (see BenchmarkFleet5000).
func queryRange(ctx context.Context, c api.Client, query string, start, end time.Time, step time.Duration,
	put func(m model.Metric, t float64, v float64)) ([]string, error) {
	form := url.Values{
		"query": {query},
		"start": {strconv.FormatFloat(float64(start.UnixMilli())/1e3, 'f', -1, 64)},
		"end":   {strconv.FormatFloat(float64(end.UnixMilli())/1e3, 'f', -1, 64)},
		"step":  {strconv.FormatFloat(step.Seconds(), 'f', -1, 64)},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL("/api/v1/query_range", nil).String(), strings.NewReader(form.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, body, err := c.Do(ctx, req)
	if err != nil {
		return nil, err
	}
	return scanMatrix(resp.StatusCode, body, put)
}

// rawPoints is a series' points as they stand in the answer's body: no
// copy (json.RawMessage copies, which for a day of a fleet is the body's
// size again), so the body must outlive it and stay unchanged.
type rawPoints []byte

// UnmarshalJSON keeps b, a slice of the body encoding/json decodes.
func (r *rawPoints) UnmarshalJSON(b []byte) error { *r = b; return nil }

// rangeAnswer is the API's envelope; each series' points stay raw until
// scanPoints reads them.
type rangeAnswer struct {
	Status    string   `json:"status"`
	ErrorType string   `json:"errorType"`
	Error     string   `json:"error"`
	Warnings  []string `json:"warnings"`
	Data      struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric model.Metric `json:"metric"`
			Values rawPoints    `json:"values"`
		} `json:"result"`
	} `json:"data"`
}

func scanMatrix(status int, body []byte, put func(m model.Metric, t float64, v float64)) ([]string, error) {
	var a rangeAnswer
	if err := json.Unmarshal(body, &a); err != nil {
		return nil, fmt.Errorf("HTTP %d: %w (%.200s)", status, err, body)
	}
	if a.Status != "success" {
		return a.Warnings, fmt.Errorf("%s: %s (HTTP %d)", a.ErrorType, a.Error, status)
	}
	if a.Data.ResultType != "matrix" {
		return a.Warnings, fmt.Errorf("got %s, want a matrix", a.Data.ResultType)
	}
	for _, s := range a.Data.Result {
		if err := scanPoints(s.Values, func(t, v float64) { put(s.Metric, t, v) }); err != nil {
			return a.Warnings, fmt.Errorf("series %s: %w", s.Metric, err)
		}
	}
	return a.Warnings, nil
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
