package result

import (
	"testing"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/stats"
)

// How the report and the study's progress name what they show.
func TestLabels(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{Millicores(0.25), "250m"},
		{Millicores(1.5), "1500m"},
		{CPULabel(0), "no"},
		{CPULabel(0.5), "500m"},
		{RowLabel(0.5, 0), "500m"},
		{RowLabel(0, 0.25), "no limit, request 250m"},
		{CPUList([]int{0, 1, 3}), "0,1,3"},
		{SummaryLabel(CPUSummary{Setting: SetGofit, SameAs: []string{SetProcs1}}), "gofit = gomaxprocs=1"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
	if !(SettingRank(SetGoDefault) < SettingRank(SetGofit) && SettingRank(SetGofit) < SettingRank(SetProcs1) && SettingRank(SetProcs1) < SettingRank(SetProcsNCPU)) {
		t.Error("settings rank go-default, gofit, gomaxprocs=1, the rest")
	}
	ss := []CPUSummary{{QuotaCores: 0.5}, {QuotaCores: 0, RequestCores: 0.25}}
	if RequestCores(ss) != 0.25 || RequestCores(ss[:1]) != 0 {
		t.Error("RequestCores: want the request row's request, else 0")
	}
	if s := (CPUSummary{Setting: SetGofit, SameAs: []string{SetProcs1}}); !s.Is(SetProcs1) || !s.Is(SetGofit) || s.Is(SetGoDefault) {
		t.Error("a summary is every setting it stands for, and no other")
	}
}

func TestMemTrialVerdict(t *testing.T) {
	for _, tc := range []struct {
		t    MemTrial
		want string
	}{
		{MemTrial{Outcome: OOMKilled}, "oom_killed"},
		{MemTrial{Outcome: OK}, "ok"},
		{MemTrial{Outcome: OK, Pairs: 3, Healthy: true, Decided: true, P99: 3, RefP99: 2, P99Ratio: &stats.Interval{Value: 1.5, Low: 1.2, High: 1.8}},
			"healthy: p99 3.0ms vs 2.0ms unlimited, ×1.50 [1.20–1.80], 3 pairs"},
		{MemTrial{Outcome: OK, Pairs: 1, BudgetCut: true, P99: 9, RefP99: 2},
			"not healthy (undecided) (cut by the budget): p99 9.0ms vs 2.0ms unlimited, -, 1 pairs"},
	} {
		if got := tc.t.Verdict(); got != tc.want {
			t.Errorf("Verdict() = %q, want %q", got, tc.want)
		}
	}
}

func TestEmpty(t *testing.T) {
	if !(&Results{Memory: []MemResult{{Setting: SetGofit}}}).Empty() {
		t.Error("a memory setting without trials is nothing measured")
	}
	if (&Results{Memory: []MemResult{{Trials: []MemTrial{{}}}}}).Empty() || (&Results{CPU: []CPUCell{{}}}).Empty() {
		t.Error("a trial or a CPU cell is something measured")
	}
}
