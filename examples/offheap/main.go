// Command offheap is a test service whose memory a ratio cannot see: an
// off-heap cache of anonymous memory outside the Go heap, mapped with mmap
// (as fastcache or bigcache-style mmap'd arenas hold it) or, with -via
// malloc in a cgo build, allocated with C's malloc (as cgo libraries do),
// kept hot, beside a live Go heap that churns. GOMEMLIMIT bounds only the
// heap; the cache is charged to the same memory cgroup and the kernel
// cannot reclaim it (anonymous, no swap). It is a `gofit lab` target:
//
//	go build -o /tmp/offheap ./examples/offheap
//	gofit lab --quick --cmd '/tmp/offheap -addr 127.0.0.1:{port}' --url 'http://127.0.0.1:{port}/work'
//
// With -gofit it runs gofit's library in-process, which measures the
// cache (memory outside the heap) and lowers GOMEMLIMIT by it; without,
// GOMEMLIMIT is whatever the environment says.
//
// Each /work request reads and rewrites a few random cache pages, replaces
// one slot of the live heap (the old slot becomes garbage), allocates
// -garbage bytes of short-lived garbage and hashes a little, so the heap
// grows toward its GC goal between collections.
package main

import (
	"context"
	"crypto/sha256"
	"expvar"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"sync"
	"syscall"

	"github.com/gofit-dev/gofit"
	"github.com/gofit-dev/gofit/examples/serve"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		log.Fatal(err)
	}
}

type config struct {
	addr        string
	offheap     int64  // bytes mapped outside the Go heap
	via         string // "mmap" or "malloc"
	live        int64  // bytes of live Go heap
	slot        int64  // size of one live-heap slot
	garbage     int64  // short-lived bytes per request
	touchPages  int    // cache pages read and rewritten per request
	hashRepeats int
	gofit       bool // run gofit's library in-process
}

func parse(args []string) (config, error) {
	fs := flag.NewFlagSet("offheap", flag.ContinueOnError)
	c := config{}
	fs.StringVar(&c.addr, "addr", "127.0.0.1:8080", "listen address")
	offMiB := fs.Int64("offheap-mib", 48, "MiB of anonymous memory mapped outside the Go heap, kept resident and hot")
	fs.StringVar(&c.via, "via", "mmap", "how the off-heap cache is allocated: mmap (one anonymous mapping) or malloc (C's malloc in 1 MiB pieces; needs cgo)")
	liveMiB := fs.Int64("live-mib", 16, "MiB of live Go heap")
	slotKiB := fs.Int64("slot-kib", 64, "KiB per live-heap slot; each request replaces one")
	garbageKiB := fs.Int64("garbage-kib", 128, "KiB of short-lived garbage per request")
	fs.IntVar(&c.touchPages, "touch-pages", 16, "cache pages (4 KiB) read and rewritten per request")
	fs.IntVar(&c.hashRepeats, "hash", 200, "SHA-256 rounds per request (CPU work)")
	fs.BoolVar(&c.gofit, "gofit", false, "run gofit's library in-process: it measures the memory outside the Go heap (this cache) and keeps GOMEMLIMIT below the limit by that much, refining what `gofit run` set (the GOFIT_RUN marker); values set by anyone else are left alone")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	for _, v := range []struct {
		name     string
		v, lo, h int64
	}{{"-offheap-mib", *offMiB, 0, 1 << 20}, {"-live-mib", *liveMiB, 0, 1 << 20}, {"-slot-kib", *slotKiB, 4, 1 << 20},
		{"-garbage-kib", *garbageKiB, 0, 1 << 20}, {"-touch-pages", int64(c.touchPages), 0, 1 << 20}, {"-hash", int64(c.hashRepeats), 0, 1 << 20}} {
		if v.v < v.lo || v.v > v.h {
			return c, fmt.Errorf("%s %d: want %d to %d", v.name, v.v, v.lo, v.h)
		}
	}
	if c.via != "mmap" && c.via != "malloc" {
		return c, fmt.Errorf("-via %q: want mmap or malloc", c.via)
	}
	if c.via == "malloc" && !haveCgo {
		return c, fmt.Errorf("-via malloc: this binary was built without cgo (CGO_ENABLED=0)")
	}
	c.offheap, c.live, c.slot, c.garbage = *offMiB<<20, *liveMiB<<20, *slotKiB<<10, *garbageKiB<<10
	if c.live > 0 && c.live < c.slot {
		return c, fmt.Errorf("-live-mib %d is under one -slot-kib %d", *liveMiB, *slotKiB)
	}
	return c, nil
}

// service holds the cache and the live heap.
type service struct {
	cfg   config
	cache [][]byte // outside the Go heap: one mmap'd block, or malloc'd chunks
	free  func()
	mu    sync.Mutex
	slots [][]byte // the live heap
	next  int
}

const page = 4096

func newService(c config) (*service, error) {
	s := &service{cfg: c}
	switch {
	case c.offheap > 0 && c.via == "malloc":
		chunks, free, err := cmalloc(c.offheap)
		if err != nil {
			return nil, err
		}
		s.cache, s.free = chunks, free
	case c.offheap > 0:
		b, err := syscall.Mmap(-1, 0, int(c.offheap), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
		if err != nil {
			return nil, fmt.Errorf("mmap %d bytes: %w", c.offheap, err)
		}
		// Make every page resident: a filled cache, not a reservation.
		for i := 0; i < len(b); i += page {
			b[i] = byte(i / page)
		}
		s.cache = [][]byte{b}
		s.free = func() { syscall.Munmap(b) }
	}
	for n := int64(0); n+c.slot <= c.live; n += c.slot {
		s.slots = append(s.slots, fill(make([]byte, c.slot)))
	}
	return s, nil
}

func fill(b []byte) []byte {
	for i := 0; i < len(b); i += page {
		b[i] = byte(i)
	}
	return b
}

func (s *service) close() {
	if s.free != nil {
		s.free()
		s.free, s.cache = nil, nil
	}
}

func (s *service) work(w http.ResponseWriter, _ *http.Request) {
	var sum [32]byte
	// Cache hits: copy a page out of the cache and write it back changed,
	// so the whole cache stays hot and dirty.
	if len(s.cache) > 0 {
		buf := make([]byte, page)
		for i := 0; i < s.cfg.touchPages; i++ {
			c := s.cache[rand.IntN(len(s.cache))]
			if len(c) < page {
				continue
			}
			p := rand.IntN(len(c)/page) * page
			copy(buf, c[p:p+page])
			sum = sha256.Sum256(append(sum[:], buf[:256]...))
			buf[0]++
			copy(c[p:p+page], buf)
		}
	}
	// The live heap churns: one slot replaced, the old one garbage.
	if len(s.slots) > 0 {
		b := fill(make([]byte, s.cfg.slot))
		s.mu.Lock()
		s.slots[s.next] = b
		s.next = (s.next + 1) % len(s.slots)
		s.mu.Unlock()
	}
	garbage := fill(make([]byte, s.cfg.garbage))
	for i := 0; i < s.cfg.hashRepeats; i++ {
		sum = sha256.Sum256(append(sum[:], garbage[:min(len(garbage), 512)]...))
	}
	fmt.Fprintf(w, "%x\n", sum[:4])
}

// vars is what the lab reads on /debug/vars under "sample": GOMAXPROCS
// and GOMEMLIMIT as the runtime runs with them.
func vars() any {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return map[string]any{
		"go_version":      runtime.Version(),
		"gomaxprocs":      runtime.GOMAXPROCS(0),
		"gomemlimit":      debug.SetMemoryLimit(-1),
		"gc_cpu_fraction": ms.GCCPUFraction,
		"num_gc":          ms.NumGC,
		"heap_inuse":      ms.HeapInuse,
	}
}

func run(args []string) error {
	c, err := parse(args)
	if err != nil {
		return err
	}
	s, err := newService(c)
	if err != nil {
		return err
	}
	defer s.close()
	if c.gofit {
		// Started after the cache is filled, so the first plan sees it.
		f, err := gofit.Start(context.Background(), gofit.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, nil))))
		if err != nil {
			return fmt.Errorf("-gofit: %w", err)
		}
		defer f.Stop()
	}
	expvar.Publish("sample", expvar.Func(vars))
	mux := http.NewServeMux()
	mux.HandleFunc("/work", s.work)
	mux.Handle("/debug/vars", expvar.Handler())
	return serve.UntilSignal(c.addr, mux, 0)
}
