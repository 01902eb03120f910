//go:build cgo

package main

// #include <stdlib.h>
// #include <string.h>
import "C"

import (
	"fmt"
	"unsafe"
)

// cgoChunk is the size of one C allocation: above glibc's mmap threshold
// (128 KiB at start), as the buffers of cgo libraries (SQLite's page
// cache, RocksDB's block cache, image codecs) mostly are.
const cgoChunk = 1 << 20

const haveCgo = true

// cmalloc allocates n bytes with C's malloc in cgoChunk pieces and makes
// every page resident; free returns them.
func cmalloc(n int64) (data [][]byte, free func(), err error) {
	var ptrs []unsafe.Pointer
	free = func() {
		for _, p := range ptrs {
			C.free(p)
		}
		ptrs = nil
	}
	for left := n; left > 0; left -= cgoChunk {
		size := min(left, cgoChunk)
		p := C.malloc(C.size_t(size))
		if p == nil {
			free()
			return nil, nil, fmt.Errorf("malloc %d bytes: out of memory", size)
		}
		C.memset(p, 1, C.size_t(size))
		ptrs = append(ptrs, p)
		data = append(data, unsafe.Slice((*byte)(p), size))
	}
	return data, free, nil
}
