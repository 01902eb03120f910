package fit

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"slices"
	"strconv"
)

// Rounding says how a fractional CPU limit becomes GOMAXPROCS.
type Rounding int

const (
	// Floor rounds down (at least 1): never plan more parallelism than the
	// quota pays for, so a burst cannot spend the period's quota early.
	Floor Rounding = iota
	// Ceil rounds up, as Go's runtime does: more parallelism, more risk of
	// throttling.
	Ceil
)

// Options tune the policy. The zero value is the default. Every surface
// (the library's options, `gofit run` and `gofit inspect`, the webhook,
// the GOFIT_* variables) reads them through BindFlags or ReadEnv and
// checks them with New, so each option is parsed and checked here alone.
type Options struct {
	// MemoryRatio is the share of the effective memory limit given to
	// GOMEMLIMIT when nothing better is known. 0 means DefaultMemoryRatio;
	// otherwise it must pass ValidMemoryRatio.
	MemoryRatio float64
	Rounding    Rounding
	// CPURequestFactor opts in to GOMAXPROCS from the CPU request when
	// there is no CPU limit: max(CPURequestMin, ceil(request × factor)),
	// capped at the usable CPUs. 0 (the default) leaves GOMAXPROCS at the
	// usable CPUs; otherwise it must pass ValidCPURequestFactor.
	CPURequestFactor float64
	// CPURequestMin is the least GOMAXPROCS planned from a request; 0
	// means DefaultCPURequestMin, otherwise it must pass
	// ValidCPURequestMin.
	CPURequestMin int
	// GOGC is "" to leave GOGC alone (the default), or a value that passes
	// ValidGOGC ("off", "200") to set together with GOMEMLIMIT: the "use the
	// memory you pay for" mode. It is only applied when a GOMEMLIMIT is
	// planned.
	GOGC string
}

// DefaultMemoryRatio leaves 10% of the limit for memory outside the Go heap.
const DefaultMemoryRatio = 0.9

// DefaultCPURequestMin is the least GOMAXPROCS planned from a CPU request.
// Without a CPU limit nothing throttles a second thread, and Go's runtime
// itself never goes below 2 for a limit: one P left alone stalls behind
// the garbage collector's worker.
const DefaultCPURequestMin = 2

// MaxCPURequestFactor bounds Options.CPURequestFactor: beyond it the
// request no longer says anything about the parallelism wanted.
const MaxCPURequestFactor = 16

// ErrBadOption is wrapped by the errors of New, the Valid functions,
// Flags.Options and ReadEnv.
var ErrBadOption = errors.New("bad option")

// ValidCPURequestFactor accepts a factor above 0 and at most
// MaxCPURequestFactor (0 itself means off and is not passed here).
func ValidCPURequestFactor(f float64) error {
	if math.IsNaN(f) || math.IsInf(f, 0) || f <= 0 || f > MaxCPURequestFactor {
		return fmt.Errorf("%w: CPU request factor %g: want a number above 0 and at most %d, such as 1 or 1.5", ErrBadOption, f, MaxCPURequestFactor)
	}
	return nil
}

// ValidMemoryRatio accepts a ratio strictly between 0 and 1. NaN and the
// infinities fail, as do 0 and 1: a GOMEMLIMIT of nothing or of the whole
// limit is never what anyone wants.
func ValidMemoryRatio(r float64) error {
	if math.IsNaN(r) || math.IsInf(r, 0) || r <= 0 || r >= 1 {
		return fmt.Errorf("%w: memory ratio %g: want a number between 0 and 1, such as 0.9", ErrBadOption, r)
	}
	return nil
}

// ValidCPURequestMin accepts 1 or 2: above 2 would be a floor no CPU
// request asked for.
func ValidCPURequestMin(n int) error {
	if n != 1 && n != 2 {
		return badRequestMin(strconv.Itoa(n))
	}
	return nil
}

func badRequestMin(v string) error {
	return fmt.Errorf("%w: CPU request minimum %s: want 1 or 2", ErrBadOption, v)
}

// ValidGOGC accepts "off" or a positive integer percentage such as "200",
// written as Go's runtime parses it.
func ValidGOGC(v string) error {
	if v == "off" {
		return nil
	}
	if n, err := strconv.ParseInt(v, 10, 32); err != nil || n <= 0 || strconv.FormatInt(n, 10) != v {
		return fmt.Errorf("%w: GOGC %q: want off or a positive integer such as 200", ErrBadOption, v)
	}
	return nil
}

// Policy is the validated policy. The zero value uses the default options.
type Policy struct {
	opt Options
}

// New validates opt and returns the policy it describes.
func New(opt Options) (Policy, error) {
	if opt.MemoryRatio != 0 {
		if err := ValidMemoryRatio(opt.MemoryRatio); err != nil {
			return Policy{}, err
		}
	}
	if opt.Rounding != Floor && opt.Rounding != Ceil {
		return Policy{}, fmt.Errorf("%w: rounding %d: want fit.Floor or fit.Ceil", ErrBadOption, opt.Rounding)
	}
	if opt.CPURequestFactor != 0 {
		if err := ValidCPURequestFactor(opt.CPURequestFactor); err != nil {
			return Policy{}, err
		}
	}
	if opt.CPURequestMin != 0 {
		if err := ValidCPURequestMin(opt.CPURequestMin); err != nil {
			return Policy{}, err
		}
	}
	if opt.GOGC != "" {
		if err := ValidGOGC(opt.GOGC); err != nil {
			return Policy{}, err
		}
	}
	return Policy{opt: opt}, nil
}

// Options are the policy's options, with defaults filled in.
func (p Policy) Options() Options {
	o := p.opt
	if o.MemoryRatio == 0 {
		o.MemoryRatio = DefaultMemoryRatio
	}
	if o.CPURequestMin == 0 {
		o.CPURequestMin = DefaultCPURequestMin
	}
	return o
}

func (o Options) minRequestProcs() int { return max(o.CPURequestMin, 1) }

// setting is one option as text: its flag, its environment variable and
// the one parser both go through, which checks with the Valid function
// New uses.
type setting struct {
	flag, env string
	usage     string
	def       string // the default as a flag's help shows it; "" shows none
	boolFlag  bool   // given alone (--ceil), the flag means "true"
	// parse sets the option from its environment text, parseFlag (when
	// not nil) from its flag's.
	parse, parseFlag func(o *Options, v string) error
}

var settings = []setting{
	{
		flag: "memory-ratio", env: "GOFIT_MEMORY_RATIO", def: strconv.FormatFloat(DefaultMemoryRatio, 'g', -1, 64),
		usage: "share of the memory limit for GOMEMLIMIT, a `RATIO` between 0 and 1",
		parse: func(o *Options, v string) error {
			f, err := parseNumber(v)
			if err == nil {
				err = ValidMemoryRatio(f)
			}
			o.MemoryRatio = f
			return err
		},
	},
	{
		flag: "ceil", env: "GOFIT_CPU_ROUNDING", boolFlag: true,
		usage: "round a fractional CPU limit up instead of down",
		parse: func(o *Options, v string) error {
			switch v {
			case "floor":
				o.Rounding = Floor
			case "ceil":
				o.Rounding = Ceil
			default:
				return fmt.Errorf("%w: CPU rounding %q: want floor or ceil", ErrBadOption, v)
			}
			return nil
		},
		parseFlag: func(o *Options, v string) error {
			up, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("%w: %q: want true or false", ErrBadOption, v)
			}
			if up {
				o.Rounding = Ceil
			} else {
				o.Rounding = Floor
			}
			return nil
		},
	},
	{
		flag: "gogc", env: "GOFIT_GOGC",
		usage: "also set GOGC to `VALUE` (off or a percentage such as 200) with GOMEMLIMIT: use the memory you pay for",
		parse: func(o *Options, v string) error {
			o.GOGC = v
			return ValidGOGC(v)
		},
	},
	{
		flag: "cpu-request-factor", env: "GOFIT_CPU_REQUEST_FACTOR",
		usage: "opt in: without a CPU limit, GOMAXPROCS = max(min, ceil(CPU request × `FACTOR`)), the request read from cpu.shares/cpu.weight (0: off)",
		parse: func(o *Options, v string) error {
			f, err := parseNumber(v)
			if err == nil && f != 0 {
				err = ValidCPURequestFactor(f)
			}
			o.CPURequestFactor = f
			return err
		},
	},
	{
		flag: "cpu-request-min", env: "GOFIT_CPU_REQUEST_MIN", def: strconv.Itoa(DefaultCPURequestMin),
		usage: "`N`, the least GOMAXPROCS planned from a CPU request: 1 or 2",
		parse: func(o *Options, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil {
				return badRequestMin(strconv.Quote(v))
			}
			o.CPURequestMin = n
			return ValidCPURequestMin(n)
		},
	},
}

// parseNumber reads a decimal number; the Valid functions judge it.
func parseNumber(v string) (float64, error) {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return f, fmt.Errorf("%w: %q is not a number", ErrBadOption, v)
	}
	return f, nil
}

// set parses v into o through s, leaving o as it was when v is bad.
func (s *setting) set(o *Options, v string, asFlag bool) error {
	parse := s.parse
	if asFlag && s.parseFlag != nil {
		parse = s.parseFlag
	}
	next := *o
	if err := parse(&next, v); err != nil {
		return err
	}
	*o = next
	return nil
}

// ReadEnv reads the options from their GOFIT_* variables through lookup
// (os.LookupEnv, say): GOFIT_MEMORY_RATIO, GOFIT_CPU_ROUNDING (floor or
// ceil), GOFIT_GOGC, GOFIT_CPU_REQUEST_FACTOR and GOFIT_CPU_REQUEST_MIN.
// Each bad variable gives an error naming it and quoting its value, and
// leaves its option at the default; the others still apply.
func ReadEnv(lookup func(string) (string, bool)) (Options, []error) {
	var o Options
	var errs []error
	for i := range settings {
		s := &settings[i]
		if v, ok := lookup(s.env); ok {
			if err := s.set(&o, v, false); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", s.env, v, err))
			}
		}
	}
	return o, errs
}

// Set sets the option whose environment variable is env (such as
// GOFIT_CPU_REQUEST_FACTOR) from its text v, parsed and checked as ReadEnv
// does, for a surface with its own name for an option (the webhook's pod
// annotations). When v is bad, o is left as it was; an env that names no
// option is an error too.
func (o *Options) Set(env, v string) error {
	for i := range settings {
		if s := &settings[i]; s.env == env {
			return s.set(o, v, false)
		}
	}
	return fmt.Errorf("%w: no option is read from %s", ErrBadOption, env)
}

// Flags are options bound to command-line flags by BindFlags.
type Flags struct {
	given map[string]string // by flag name, the last text given
}

// BindFlags defines the options named by their flags (--memory-ratio,
// --ceil, --gogc, --cpu-request-factor, --cpu-request-min; all of them
// when none is named) on fs. After fs.Parse, Flags.Options checks what
// was given.
func BindFlags(fs *flag.FlagSet, names ...string) *Flags {
	f := &Flags{given: map[string]string{}}
	for i := range settings {
		s := &settings[i]
		if len(names) > 0 && !slices.Contains(names, s.flag) {
			continue
		}
		fs.Var(&flagValue{f: f, s: s}, s.flag, s.usage)
	}
	return f
}

// Options are the options the flags were given, checked as New checks
// them; the error names the first bad flag.
func (f *Flags) Options() (Options, error) {
	var o Options
	for i := range settings {
		s := &settings[i]
		v, ok := f.given[s.flag]
		if !ok {
			continue
		}
		if err := s.set(&o, v, true); err != nil {
			return Options{}, fmt.Errorf("--%s: %w", s.flag, err)
		}
	}
	return o, nil
}

// flagValue is one option's flag.Value: it keeps the text, and
// Flags.Options parses it, so a flag's error reads as an environment
// variable's does.
type flagValue struct {
	f *Flags
	s *setting
}

func (v *flagValue) String() string {
	if v == nil || v.f == nil {
		return "" // the zero value flag.PrintDefaults compares the default with
	}
	if t, ok := v.f.given[v.s.flag]; ok {
		return t
	}
	return v.s.def
}

func (v *flagValue) Set(t string) error {
	v.f.given[v.s.flag] = t
	return nil
}

func (v *flagValue) IsBoolFlag() bool { return v.s.boolFlag }
