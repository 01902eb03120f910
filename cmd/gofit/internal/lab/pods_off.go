//go:build nokube

package lab

import (
	"context"
	"errors"
	"io"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/result"
)

func runPodStudy(ctx context.Context, cfg Config, ko KubeOptions, progress io.Writer) (*result.Results, *Records, error) {
	return &result.Results{}, &Records{}, errors.New("--kube: this gofit was built with -tags nokube, without a Kubernetes client")
}
