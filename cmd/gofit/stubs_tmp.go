package main

import "io"

func runRun(args []string, stdout, stderr io.Writer) error { return nil }
func runLab(args []string, stdout, stderr io.Writer) error { return nil }
