module github.com/gofit-dev/gofit/cmd/gofit

go 1.26.0

require github.com/gofit-dev/gofit v0.0.0

require (
	github.com/HdrHistogram/hdrhistogram-go v1.1.2 // indirect
	golang.org/x/sys v0.38.0 // indirect
)

// The command is built from this repository; the library and the Kubernetes
// module are the checkout's own.
replace github.com/gofit-dev/gofit => ../..
