package e2e

import (
	"fmt"
	"testing"
)

// Steps with lanes run at once, a lane's steps in order; CI leaves
// lab-pods out, and fleet must still follow fleet-alerts.
func TestGroups(t *testing.T) {
	st := func(name, lane string) guestStep { return guestStep{name: name, lane: lane} }
	show := func(gs [][][]guestStep) string {
		var out [][][]string
		for _, g := range gs {
			var lanes [][]string
			for _, l := range g {
				var names []string
				for _, s := range l {
					names = append(names, s.name)
				}
				lanes = append(lanes, names)
			}
			out = append(out, lanes)
		}
		return fmt.Sprint(out)
	}
	for _, c := range []struct {
		steps []guestStep
		want  string
	}{
		{[]guestStep{st("static", ""), st("lab-pods", "lab"), st("fleet-alerts", "fleet"), st("fleet", "fleet"), st("experiment", "")},
			"[[[static]] [[lab-pods] [fleet-alerts fleet]] [[experiment]]]"},
		{[]guestStep{st("static", ""), st("fleet-alerts", "fleet"), st("fleet", "fleet"), st("experiment", "")},
			"[[[static]] [[fleet-alerts fleet]] [[experiment]]]"},
		{[]guestStep{st("a", ""), st("b", "")}, "[[[a]] [[b]]]"},
		{nil, "[]"},
	} {
		if got := show(groups(c.steps)); got != c.want {
			t.Errorf("groups: %s, want %s", got, c.want)
		}
	}
}
