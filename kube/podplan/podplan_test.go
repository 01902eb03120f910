package podplan

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestParseRoundTrip(t *testing.T) {
	in := Record{Containers: []Container{
		{Name: "app", Mode: ModeEnv, Memory: "1Gi", Env: map[string]string{"GOMEMLIMIT": "966367641"}, Reasons: []string{"r"}},
		{Name: "side", Mode: ModeOff, Reasons: []string{}},
	}}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Parse(string(b))
	if err != nil {
		t.Fatal(err)
	}
	if c := r.Container("app"); c == nil || c.Env["GOMEMLIMIT"] != "966367641" || c.Mode != ModeEnv {
		t.Errorf("app: %+v", c)
	}
	if c := r.Container("side"); c == nil || c.Mode != ModeOff {
		t.Errorf("side: %+v", c)
	}
	if c := r.Container("nope"); c != nil {
		t.Errorf("nope: %+v", c)
	}
	var nilRec *Record
	if nilRec.Container("app") != nil {
		t.Error("nil record found a container")
	}
}

func TestParseErrors(t *testing.T) {
	for name, s := range map[string]string{
		"malformed":  `{"containers":[`,
		"wrong type": `{"containers":{"name":"a"}}`,
		"too large":  `{"containers":[],"x":"` + strings.Repeat("a", MaxSize) + `"}`,
	} {
		_, err := Parse(s)
		if err == nil || !strings.Contains(err.Error(), Annotation) {
			t.Errorf("%s: error %v, want one naming %s", name, err, Annotation)
		}
	}
}
