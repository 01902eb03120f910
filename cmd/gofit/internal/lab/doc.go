// Package lab runs a service under real limits, drives load at it, sweeps
// Go runtime settings, finds its memory floor and recommends settings. It
// is what `gofit lab` runs: the study and its analysis, on a runner the
// command chooses through the contract in lab/trial (lab/local on this
// machine, lab/pods on a cluster's nodes).
package lab
