// Package lab runs a service under real cgroup limits on one Linux machine,
// drives load at it, sweeps Go runtime settings, finds its memory floor and
// recommends settings. It is what `gofit lab` runs.
package lab
