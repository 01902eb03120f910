// Package podplan owns the gofit.dev/plan pod annotation: the record the
// webhook (kube/admission) writes of what it planned and injected for each
// container, and the node agent (kube/memqos) reads back to learn a
// container's GOMEMLIMIT. One type for both sides, so the format cannot
// drift between writer and reader.
package podplan

import (
	"encoding/json"
	"fmt"
)

// Annotation is the pod annotation that holds a Record as JSON.
const Annotation = "gofit.dev/plan"

// MaxSize bounds the annotation a reader accepts: the API server's limit
// on all of an object's annotations together (256 KiB), so no annotation
// of a stored pod is refused, while a pod list read from a file cannot
// make a reader decode more.
const MaxSize = 256 << 10

// Mode is how the webhook treats one container.
type Mode string

// The modes: env injects GOMAXPROCS/GOMEMLIMIT (the default), auto leaves
// the binary's imported gofit/auto to follow limits in-process, off leaves
// the container alone.
const (
	ModeEnv  Mode = "env"
	ModeAuto Mode = "auto"
	ModeOff  Mode = "off"
)

// Record is the value of Annotation.
type Record struct {
	Containers []Container `json:"containers"`
}

// Container says what was planned for one container.
type Container struct {
	Name string `json:"name"`
	Mode Mode   `json:"mode"`
	// CPU and Memory are the limits the values were computed for.
	CPU    string `json:"cpu,omitempty"`
	Memory string `json:"memory,omitempty"`
	// Env holds exactly the variables the webhook added; a later pass
	// recognises them by name and value and leaves them be.
	Env     map[string]string `json:"env,omitempty"`
	Reasons []string          `json:"reasons"`
}

// Parse decodes an annotation value. Errors name the annotation; a value
// longer than MaxSize is refused before it is decoded.
func Parse(s string) (*Record, error) {
	if len(s) > MaxSize {
		return nil, fmt.Errorf("annotation %s: %d bytes, more than %d", Annotation, len(s), MaxSize)
	}
	var r Record
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		return nil, fmt.Errorf("annotation %s: %w", Annotation, err)
	}
	return &r, nil
}

// Container returns the record of the container called name, or nil (also
// for a nil Record).
func (r *Record) Container(name string) *Container {
	if r == nil {
		return nil
	}
	for i := range r.Containers {
		if r.Containers[i].Name == name {
			return &r.Containers[i]
		}
	}
	return nil
}
