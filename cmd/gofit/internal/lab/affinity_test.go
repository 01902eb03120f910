package lab

import (
	"strings"
	"testing"
)

func TestPlacement(t *testing.T) {
	p := planPlacement([]int{0, 1}, 2, 1)
	if p.Isolated || p.Overlap != 1 || len(p.Target) != 2 || len(p.Generator) != 1 || p.Generator[0] != 1 || !strings.Contains(p.Note, "not isolated") {
		t.Errorf("2 CPUs, target needs 2: %+v", p)
	}
	p = planPlacement([]int{0, 1, 2, 3}, 2, 1)
	if !p.Isolated || p.Overlap != 0 || len(p.Target) != 3 || p.Generator[0] != 3 {
		t.Errorf("4 CPUs, target needs 2: %+v", p)
	}
	p = planPlacement([]int{0, 1, 2, 3}, 4, 1)
	if p.Isolated || len(p.Target) != 4 {
		t.Errorf("4 CPUs, target needs 4: %+v", p)
	}
}
