package daemon

import (
	"fmt"
	"sync"

	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/llm"
	"github.com/trellis-run/trellis/runtime/llm/fake"
)

// providers opens the provider of each vendor once, from the configured
// spec of that vendor (e.g. "fake:/path/script.json"), and names the default.
type providers struct {
	reg   *llm.Registry
	def   string
	specs map[string]string // vendor → spec

	mu    sync.Mutex
	cache map[string]llm.Provider
}

// newProviders registers the known vendors and chooses the default: the
// configured spec (--provider, $TRELLIS_PROVIDER), else the offline fake
// provider with its built-in demo script.
func newProviders(spec string) (*providers, error) {
	reg := llm.NewRegistry()
	reg.Register(fake.Vendor, fake.Open)
	p := &providers{reg: reg, def: fake.Vendor, specs: map[string]string{}, cache: map[string]llm.Provider{}}
	if spec != "" {
		s, err := llm.ParseSpec(spec)
		if err != nil {
			return nil, fmt.Errorf("--provider: %w", err)
		}
		p.def = s.Vendor
		p.specs[s.Vendor] = spec
		if _, err := p.Open(s.Vendor); err != nil {
			return nil, fmt.Errorf("--provider %s: %w", spec, err)
		}
	}
	return p, nil
}

// Open returns the provider of vendor ("" = the default).
func (p *providers) Open(vendor string) (llm.Provider, error) {
	if vendor == "" {
		vendor = p.def
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if prov, ok := p.cache[vendor]; ok {
		return prov, nil
	}
	spec, ok := p.specs[vendor]
	if !ok {
		spec = vendor
	}
	prov, err := p.reg.Open(spec)
	if err != nil {
		if errs.CodeOf(err) == errs.Internal {
			return nil, errs.Wrap(errs.InvalidParams, err, "provider %s cannot be opened: %v", vendor, err)
		}
		return nil, err
	}
	p.cache[vendor] = prov
	return prov, nil
}

// Default names the default vendor.
func (p *providers) Default() string { return p.def }
