//go:build nokube

package pods

import (
	"context"
	"errors"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/trial"
)

// Opener, in a gofit built with -tags nokube, opens nothing: --kube
// fails when the study starts, and client-go is not linked.
type Opener struct{}

// New is the opener --kube cannot use in this build.
func New(o Options) *Opener { return &Opener{} }

var _ trial.Opener = (*Opener)(nil)

func (*Opener) Prepare(ctx context.Context, s *trial.Study) error { return nil }

func (*Opener) Open(ctx context.Context, s *trial.Study) (trial.Runner, error) {
	return nil, errors.New("--kube: this gofit was built with -tags nokube, without a Kubernetes client")
}

func (*Opener) Close() error { return nil }
