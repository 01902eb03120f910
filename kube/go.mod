module github.com/gofit-dev/gofit/kube

go 1.26.0

require github.com/gofit-dev/gofit v0.0.0

replace github.com/gofit-dev/gofit => ../
