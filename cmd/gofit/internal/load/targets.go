package load

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"net/textproto"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Target is one kind of request in a load mix.
type Target struct {
	Method string      `json:"method"`
	URL    string      `json:"url"`
	Header http.Header `json:"header,omitempty"`
	Body   []byte      `json:"-"`
	// BodyFile names where Body came from, for the report.
	BodyFile string `json:"body_file,omitempty"`
	// Weight is the target's share of the requests against the others'
	// (at least 1).
	Weight int `json:"weight"`
}

// Get is a mix of one GET target, with headers (may be nil).
func Get(url string, h http.Header) []Target {
	return []Target{{Method: http.MethodGet, URL: url, Header: h, Weight: 1}}
}

// maxBodyBytes bounds a request body read from a targets file.
const maxBodyBytes = 64 << 20

// ReadTargets reads a targets file in vegeta's plain format:
//
//	GET http://127.0.0.1:{port}/get
//	X-Trace: 1
//
//	POST http://127.0.0.1:{port}/post weight=2
//	Content-Type: application/octet-stream
//	@body.bin
//
// A request line (METHOD URL, and optionally weight=N, gofit's own
// addition), then header lines, then optionally @FILE for the body (a path
// relative to the targets file), a blank line between targets. Lines
// starting with # are comments. Errors name the file and the line.
func ReadTargets(path string) ([]Target, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--targets: %w", err)
	}
	defer f.Close()
	return ParseTargets(f, path, filepath.Dir(path))
}

// ParseTargets parses a targets file read from r; name is how errors name
// it, dir where body files are looked up.
func ParseTargets(r io.Reader, name, dir string) ([]Target, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var out []Target
	var cur *Target
	line := 0
	fail := func(format string, a ...any) error {
		return fmt.Errorf("%s:%d: %s", name, line, fmt.Sprintf(format, a...))
	}
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(text, "#"):
			continue
		case text == "":
			cur = nil
			continue
		case cur == nil:
			t, err := parseRequestLine(text)
			if err != nil {
				return nil, fail("%v", err)
			}
			out = append(out, t)
			cur = &out[len(out)-1]
		case strings.HasPrefix(text, "@"):
			if cur.BodyFile != "" {
				return nil, fail("a second body file for %s %s", cur.Method, cur.URL)
			}
			p := strings.TrimSpace(text[1:])
			if p == "" {
				return nil, fail("@ without a file name")
			}
			if !filepath.IsAbs(p) {
				p = filepath.Join(dir, p)
			}
			b, err := readBody(p)
			if err != nil {
				return nil, fail("body: %v", err)
			}
			cur.Body, cur.BodyFile = b, p
		default:
			if cur.BodyFile != "" {
				return nil, fail("header line after the body file; put a blank line before the next target")
			}
			k, v, ok := strings.Cut(text, ":")
			k = strings.TrimSpace(k)
			if !ok || k == "" || strings.ContainsAny(k, " \t") {
				return nil, fail("%q is neither a header (Name: value), a body (@file) nor a blank line", text)
			}
			if cur.Header == nil {
				cur.Header = http.Header{}
			}
			cur.Header.Add(textproto.CanonicalMIMEHeaderKey(k), strings.TrimSpace(v))
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no targets", name)
	}
	return out, nil
}

func parseRequestLine(text string) (Target, error) {
	f := strings.Fields(text)
	if len(f) < 2 || len(f) > 3 {
		return Target{}, fmt.Errorf("%q: want METHOD URL [weight=N]", text)
	}
	t := Target{Method: strings.ToUpper(f[0]), URL: f[1], Weight: 1}
	for _, c := range t.Method {
		if c < 'A' || c > 'Z' {
			return Target{}, fmt.Errorf("%q is not an HTTP method", f[0])
		}
	}
	if err := CheckURL(t.URL); err != nil {
		return Target{}, err
	}
	if len(f) == 3 {
		w, ok := strings.CutPrefix(f[2], "weight=")
		n, err := strconv.Atoi(w)
		if !ok || err != nil || n < 1 || n > 1000 {
			return Target{}, fmt.Errorf("%q: want weight=N with N from 1 to 1000", f[2])
		}
		t.Weight = n
	}
	return t, nil
}

// CheckURL accepts an absolute http(s) URL; {port} may stand for the port.
func CheckURL(s string) error {
	u, err := url.Parse(strings.ReplaceAll(s, "{port}", "1"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q: want an http:// or https:// URL", s)
	}
	return nil
}

func readBody(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxBodyBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxBodyBytes {
		return nil, fmt.Errorf("%s: over %d MiB", path, maxBodyBytes>>20)
	}
	return b, nil
}

// ParseHeader parses one --header value, "Name: value".
func ParseHeader(s string) (string, string, error) {
	k, v, ok := strings.Cut(s, ":")
	k = strings.TrimSpace(k)
	if !ok || k == "" || strings.ContainsAny(k, " \t") {
		return "", "", fmt.Errorf("--header %q: want Name: value", s)
	}
	return textproto.CanonicalMIMEHeaderKey(k), strings.TrimSpace(v), nil
}

// WithPort is a copy of ts with {port} replaced in URLs and headers.
func WithPort(ts []Target, port string) []Target {
	out := make([]Target, len(ts))
	for i, t := range ts {
		t.URL = strings.ReplaceAll(t.URL, "{port}", port)
		if t.Header != nil {
			h := make(http.Header, len(t.Header))
			for k, vs := range t.Header {
				for _, v := range vs {
					h.Add(k, strings.ReplaceAll(v, "{port}", port))
				}
			}
			t.Header = h
		}
		out[i] = t
	}
	return out
}

// Schedule is the order requests go to targets: each target as often as
// its weight, shuffled with the seed, then repeated. The same seed gives
// the same order, so a run can be replayed.
func Schedule(ts []Target, seed int64) []int {
	var s []int
	for i, t := range ts {
		for range max(t.Weight, 1) {
			s = append(s, i)
		}
	}
	rand.New(rand.NewSource(seed)).Shuffle(len(s), func(i, j int) { s[i], s[j] = s[j], s[i] })
	return s
}

// newRequest builds one request to t. The header map is shared, not
// copied: the transport only reads it.
func newRequest(ctx context.Context, t *Target) (*http.Request, error) {
	var body io.Reader
	if t.Body != nil {
		body = bytes.NewReader(t.Body)
	}
	req, err := http.NewRequestWithContext(ctx, t.Method, t.URL, body)
	if err != nil {
		return nil, err
	}
	if t.Header != nil {
		req.Header = t.Header
		if h := t.Header.Get("Host"); h != "" {
			req.Host = h
		}
	}
	return req, nil
}
