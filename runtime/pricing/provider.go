package pricing

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"

	"github.com/trellis-run/trellis/runtime/llm"
)

// Entry is one model's price as a provider configuration gives it
// (provider.configure {prices}), in US dollars per million tokens; absent
// cache and reasoning prices are the input and output prices, as in a
// price file.
type Entry struct {
	Input, Output                    float64
	CacheRead, CacheWrite, Reasoning *float64
}

// Entries reads a provider configuration's prices (vendor's, by model)
// as micro-dollars per million tokens, reporting every problem at once,
// each an *Error whose Key names the field (prices."MODEL".input): a price
// that is negative, not finite, above the bound of a price file or finer
// than a millionth of a dollar, or an empty model name.
func Entries(vendor string, entries map[string]Entry) (map[string]Price, error) {
	out := make(map[string]Price, len(entries))
	var problems []error
	models := make([]string, 0, len(entries))
	for m := range entries {
		models = append(models, m)
	}
	sort.Strings(models)
	for _, model := range models {
		e := entries[model]
		key := fmt.Sprintf("prices.%q", model)
		if model == "" {
			problems = append(problems, &Error{File: "provider " + vendor, Key: key, Msg: "a model name is empty"})
			continue
		}
		read := func(field string, v float64) int64 {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				problems = append(problems, &Error{File: "provider " + vendor, Key: key + "." + field, Msg: "not a price: want US dollars per million tokens, such as 2.50"})
				return 0
			}
			micro, err := decimalMicro(strconv.FormatFloat(v, 'f', -1, 64))
			if err != nil {
				problems = append(problems, &Error{File: "provider " + vendor, Key: key + "." + field, Msg: err.Error()})
			}
			return micro
		}
		p := Price{Input: read("input", e.Input), Output: read("output", e.Output)}
		p.CacheRead, p.CacheWrite, p.Reasoning = p.Input, p.Input, p.Output
		if e.CacheRead != nil {
			p.CacheRead = read("cache_read", *e.CacheRead)
		}
		if e.CacheWrite != nil {
			p.CacheWrite = read("cache_write", *e.CacheWrite)
		}
		if e.Reasoning != nil {
			p.Reasoning = read("reasoning", *e.Reasoning)
		}
		out[model] = p
	}
	if len(problems) > 0 {
		return nil, errors.Join(problems...)
	}
	return out, nil
}

// Coster prices a provider call (a Table, a File).
type Coster interface {
	Cost(vendor, model string, u llm.Usage) (microUSD int64, priced bool)
}

// Overlay prices a call of a vendor's model with the vendor's own prices
// (its provider configuration's, from Own) when they list the model, and
// with Base otherwise.
type Overlay struct {
	Own  func(vendor string) map[string]Price
	Base Coster
}

// Cost prices a call: the provider's own price of the model (a model not
// listed under its own name takes the price of its name without a date
// suffix, as in a Table), else Base's.
func (o Overlay) Cost(vendor, model string, u llm.Usage) (microUSD int64, priced bool) {
	if own := o.Own(vendor); len(own) > 0 {
		t := &Table{prices: map[string]map[string]Price{vendor: own}}
		if p, ok := t.Lookup(vendor, model); ok {
			return p.Cost(u), true
		}
	}
	return o.Base.Cost(vendor, model, u)
}
