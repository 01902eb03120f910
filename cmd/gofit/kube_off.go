//go:build nokube

package main

// Built with -tags nokube: the Kubernetes subcommands are left out, and
// with them client-go and controller-runtime (a 4× smaller binary for
// images that only need `gofit run`).

import (
	"errors"
	"io"
)

var errNoKube = errors.New("this gofit was built with -tags nokube; the webhook and the node agent are not in it")

func runWebhook(args []string, stdout, stderr io.Writer) error { return errNoKube }

func runNode(args []string, stdout, stderr io.Writer) error { return errNoKube }

func runExperiment(args []string, stdout, stderr io.Writer) error { return errNoKube }

func runRightsize(args []string, stdout, stderr io.Writer) error { return errNoKube }
