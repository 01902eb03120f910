module github.com/gofit-dev/gofit/tools

go 1.26.0

require github.com/gofit-dev/gofit v0.0.0

require golang.org/x/sys v0.38.0 // indirect

// The tools measure and test this checkout's library.
replace github.com/gofit-dev/gofit => ../
