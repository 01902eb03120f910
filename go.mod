module github.com/gofit-dev/gofit

go 1.24.0

require golang.org/x/sys v0.38.0 // indirect
