//go:build !cgo

package main

import "errors"

const haveCgo = false

func cmalloc(int64) ([][]byte, func(), error) {
	return nil, nil, errors.New("-via malloc needs a cgo build (CGO_ENABLED=1 and a C compiler)")
}
