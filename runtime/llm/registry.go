package llm

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
)

var (
	// ErrInvalidSpec is wrapped by the errors of ParseSpec (code invalid_params).
	ErrInvalidSpec = errors.New("invalid provider spec")
	// ErrUnknownVendor is wrapped by Registry.Open for a vendor nobody
	// registered (code invalid_params).
	ErrUnknownVendor = errors.New("unknown provider vendor")
)

// Spec names a provider: "vendor" or "vendor:arg". The vendor decides what arg
// means: for "fake" it is the path of a script ("fake" alone plays the built-in
// demo); for "openai" and "anthropic" it will be a model name.
type Spec struct {
	Vendor string
	Arg    string
}

// String returns the spec in the form ParseSpec reads.
func (s Spec) String() string {
	if s.Arg == "" {
		return s.Vendor
	}
	return s.Vendor + ":" + s.Arg
}

// ParseSpec splits s at its first colon. The vendor must be a lowercase name
// ([a-z][a-z0-9_-]*); after a colon the argument must not be empty.
func ParseSpec(s string) (Spec, error) {
	vendor, arg, hasArg := strings.Cut(s, ":")
	if vendor == "" {
		return Spec{}, specError(s, "the vendor name is missing (expected vendor or vendor:arg, e.g. fake or fake:script.json)")
	}
	if !validVendor(vendor) {
		return Spec{}, specError(s, "vendor %q must be lowercase letters, digits, '-' or '_', starting with a letter", vendor)
	}
	if hasArg && arg == "" {
		return Spec{}, specError(s, "nothing follows the colon; write %q alone or %q", vendor, vendor+":ARG")
	}
	return Spec{Vendor: vendor, Arg: arg}, nil
}

func specError(spec, format string, args ...any) error {
	return &errs.Error{
		Code: errcode.InvalidParams,
		Msg:  fmt.Sprintf("provider spec %q: ", spec) + fmt.Sprintf(format, args...),
		Err:  ErrInvalidSpec,
	}
}

func validVendor(v string) bool {
	for i, r := range v {
		switch {
		case r >= 'a' && r <= 'z':
		case i > 0 && (r >= '0' && r <= '9' || r == '-' || r == '_'):
		default:
			return false
		}
	}
	return v != ""
}

// Factory builds a provider of one vendor from the spec's argument. A vendor
// that needs configuration (keys, base URL) captures it when it is registered.
type Factory func(arg string) (Provider, error)

// Registry maps vendor names to factories. It is safe for concurrent use.
type Registry struct {
	mu        sync.RWMutex
	factories map[string]Factory
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{factories: map[string]Factory{}} }

// Register adds a vendor. Registering an invalid or already registered name
// is a programming error and panics.
func (r *Registry) Register(vendor string, f Factory) {
	if !validVendor(vendor) || f == nil {
		panic(fmt.Sprintf("llm: Register(%q): invalid vendor name or nil factory", vendor))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.factories[vendor]; dup {
		panic(fmt.Sprintf("llm: Register(%q): vendor already registered", vendor))
	}
	r.factories[vendor] = f
}

// Vendors returns the registered vendor names, sorted.
func (r *Registry) Vendors() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Sorted(maps.Keys(r.factories))
}

// Open parses spec and builds its provider with a fresh instance each call.
func (r *Registry) Open(spec string) (Provider, error) {
	s, err := ParseSpec(spec)
	if err != nil {
		return nil, err
	}
	r.mu.RLock()
	f, ok := r.factories[s.Vendor]
	r.mu.RUnlock()
	if !ok {
		return nil, &errs.Error{
			Code: errcode.InvalidParams,
			Msg:  fmt.Sprintf("unknown provider %q (known: %s)", s.Vendor, strings.Join(r.Vendors(), ", ")),
			Err:  ErrUnknownVendor,
		}
	}
	return f(s.Arg)
}
