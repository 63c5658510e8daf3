package pricing

import (
	_ "embed"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/trellis-run/trellis/runtime/llm"
)

// Price is what one model charges for each kind of token, in
// micro-US-dollars per million tokens (so that every price a vendor lists,
// down to a millionth of a dollar, is an exact integer).
type Price struct {
	Input      int64 // input tokens neither read from nor written to a cache
	Output     int64 // output tokens not spent reasoning
	CacheRead  int64 // input tokens read from the prompt cache
	CacheWrite int64 // input tokens written to the prompt cache
	Reasoning  int64 // output tokens spent reasoning
}

// Cost is what a call with usage u costs at p, in micro-US-dollars,
// rounded to the nearest (half up). Cached tokens are part of
// u.InputTokens and reasoning tokens part of u.OutputTokens, as providers
// report them; counts that exceed their whole are taken as the whole.
func (p Price) Cost(u llm.Usage) int64 {
	in, out := nonNegative(u.InputTokens), nonNegative(u.OutputTokens)
	read := min(nonNegative(u.CacheReadTokens), in)
	write := min(nonNegative(u.CacheWriteTokens), in-read)
	reasoning := min(nonNegative(u.ReasoningTokens), out)
	var hi, lo uint64
	for _, part := range [...]struct{ tokens, price int64 }{
		{in - read - write, p.Input}, {read, p.CacheRead}, {write, p.CacheWrite},
		{out - reasoning, p.Output}, {reasoning, p.Reasoning},
	} {
		h, l := bits.Mul64(uint64(part.tokens), uint64(part.price))
		var carry uint64
		lo, carry = bits.Add64(lo, l, 0)
		hi += h + carry
	}
	// Prices are per million tokens: divide by a million, rounding half up.
	var carry uint64
	lo, carry = bits.Add64(lo, perMillion/2, 0)
	hi += carry
	if hi >= perMillion {
		return math.MaxInt64
	}
	q, _ := bits.Div64(hi, lo, perMillion)
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}

const perMillion = 1_000_000

func nonNegative(n int) int64 { return int64(max(n, 0)) }

// Table is a price table: a Price per vendor and model. The zero Table
// prices nothing. A Table is not changed once built, so it is safe for
// concurrent use.
type Table struct {
	prices map[string]map[string]Price // vendor → model → price
}

//go:embed prices.toml
var defaultFile []byte

// defaultTable is the embedded table, parsed once (its test keeps it valid).
var defaultTable = func() *Table {
	t, err := Parse("prices.toml", defaultFile, nil)
	if err != nil {
		panic("pricing: the embedded prices.toml: " + err.Error())
	}
	return t
}()

// Default returns the embedded price table (prices.toml).
func Default() *Table { return defaultTable }

// Lookup returns the price of vendor's model and whether the table lists
// it. A model the table does not list under its own name takes the price
// of its name without a date suffix ("-20250929", "-2024-08-06").
func (t *Table) Lookup(vendor, model string) (Price, bool) {
	if t == nil {
		return Price{}, false
	}
	models := t.prices[vendor]
	if p, ok := models[model]; ok {
		return p, true
	}
	if base := dateSuffix.ReplaceAllString(model, ""); base != model {
		p, ok := models[base]
		return p, ok
	}
	return Price{}, false
}

var dateSuffix = regexp.MustCompile(`-(\d{8}|\d{4}-\d{2}-\d{2})$`)

// Cost is what a call of vendor's model with usage u costs, in
// micro-US-dollars, and whether the table prices the model: a model it
// does not list costs 0.
func (t *Table) Cost(vendor, model string, u llm.Usage) (microUSD int64, priced bool) {
	p, ok := t.Lookup(vendor, model)
	if !ok {
		return 0, false
	}
	return p.Cost(u), true
}

// Override returns t with the entries of over in place of t's for the
// same vendor and model: an entry is replaced whole, never field by field.
func (t *Table) Override(over *Table) *Table {
	out := &Table{prices: map[string]map[string]Price{}}
	for _, src := range []*Table{t, over} {
		for vendor, models := range src.prices {
			if out.prices[vendor] == nil {
				out.prices[vendor] = map[string]Price{}
			}
			for model, p := range models {
				out.prices[vendor][model] = p
			}
		}
	}
	return out
}

// An Error is one problem of a price file: where it is and what is wrong.
type Error struct {
	File string
	Line int    // 0 when unknown
	Key  string // the dotted key it is about, e.g. openai."gpt-4.1".input; "" for the whole file
	Msg  string
}

func (e *Error) Error() string {
	where := e.File
	if e.Line > 0 {
		where += ":" + strconv.Itoa(e.Line)
	}
	if e.Key == "" {
		return where + ": " + e.Msg
	}
	return where + ": " + e.Key + ": " + e.Msg
}

// fields are the keys of a model's entry, in the order messages list them.
var fields = []string{"input", "output", "cache-read", "cache-write", "reasoning"}

// maxPrice bounds a price, in US dollars per million tokens: above it a
// value is a typo, and the bound keeps micro-dollar sums far from overflow.
const maxPrice = 1_000_000

// Parse reads a price table in the format of prices.toml; name is the
// file's name for messages, vendors the vendor names it may price (nil:
// any). It reports every problem at once, in the order of the file, each
// an *Error naming the key: TOML that does not parse, an unknown vendor, a
// vendor or a model that is not a table, an unknown field, a missing input
// or output, a price that is not a number, negative, above maxPrice or
// finer than a millionth of a dollar. Model names are not checked: an
// OpenAI-compatible server serves models of any name.
func Parse(name string, data []byte, vendors []string) (*Table, error) {
	var tables map[string]toml.Primitive
	md, err := toml.Decode(string(data), &tables)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, &Error{File: name, Line: pe.Position.Line, Msg: "not TOML: " + pe.Message}
		}
		return nil, &Error{File: name, Msg: "not TOML: " + err.Error()}
	}
	t := &Table{prices: map[string]map[string]Price{}}
	var problems []error
	bad := func(p toml.Primitive, key, format string, args ...any) {
		problems = append(problems, &Error{File: name, Line: keyLine(&md, p), Key: key, Msg: fmt.Sprintf(format, args...)})
	}
	for _, vendor := range sortedKeys(tables) {
		if vendors != nil && !slices.Contains(vendors, vendor) {
			bad(tables[vendor], vendor, "unknown vendor (the vendors are %s)", strings.Join(vendors, ", "))
			continue
		}
		var models map[string]toml.Primitive
		if !isTable(&md, tables[vendor]) || md.PrimitiveDecode(tables[vendor], &models) != nil {
			bad(tables[vendor], vendor, `want a table of models ([%s."MODEL"]), not %s`, vendor, describe(&md, tables[vendor]))
			continue
		}
		t.prices[vendor] = map[string]Price{}
		for _, model := range sortedKeys(models) {
			key := fmt.Sprintf("%s.%q", vendor, model)
			var entry map[string]toml.Primitive
			if !isTable(&md, models[model]) || md.PrimitiveDecode(models[model], &entry) != nil {
				bad(models[model], key, "want a table of prices (input, output...), not %s", describe(&md, models[model]))
				continue
			}
			got := map[string]int64{}
			for _, field := range sortedKeys(entry) {
				fkey := key + "." + field
				if !slices.Contains(fields, field) {
					bad(entry[field], fkey, "unknown field (the fields are %s)", strings.Join(fields, ", "))
					continue
				}
				micro, err := microPrice(&md, entry[field])
				if err != nil {
					bad(entry[field], fkey, "%v", err)
					continue
				}
				got[field] = micro
			}
			for _, field := range fields[:2] {
				if _, ok := entry[field]; !ok {
					bad(models[model], key, "%s is missing: an entry gives at least input and output", field)
				}
			}
			p := Price{Input: got["input"], Output: got["output"], CacheRead: got["input"], CacheWrite: got["input"], Reasoning: got["output"]}
			if v, ok := got["cache-read"]; ok {
				p.CacheRead = v
			}
			if v, ok := got["cache-write"]; ok {
				p.CacheWrite = v
			}
			if v, ok := got["reasoning"]; ok {
				p.Reasoning = v
			}
			t.prices[vendor][model] = p
		}
	}
	if len(problems) > 0 {
		slices.SortStableFunc(problems, func(a, b error) int { return a.(*Error).Line - b.(*Error).Line })
		return nil, errors.Join(problems...)
	}
	return t, nil
}

// microPrice reads a price in US dollars per million tokens as
// micro-dollars, exactly: the decimal a float is written as, not its
// binary value.
func microPrice(md *toml.MetaData, p toml.Primitive) (int64, error) {
	var v any
	_ = md.PrimitiveDecode(p, &v)
	var text string
	switch v := v.(type) {
	case int64:
		text = strconv.FormatInt(v, 10)
	case float64:
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return 0, fmt.Errorf("%v is not a price: want US dollars per million tokens, such as 2.50", v)
		}
		text = strconv.FormatFloat(v, 'f', -1, 64)
	default:
		return 0, fmt.Errorf("want a number (US dollars per million tokens, such as 2.50), not %s", describe(md, p))
	}
	return decimalMicro(text)
}

// decimalMicro reads the decimal text of a price in US dollars per million
// tokens as micro-dollars, exactly.
func decimalMicro(text string) (int64, error) {
	if strings.HasPrefix(text, "-") && text != "-0" {
		return 0, fmt.Errorf("%s is negative: want 0 or more US dollars per million tokens", text)
	}
	text = strings.TrimPrefix(text, "-")
	whole, frac, _ := strings.Cut(text, ".")
	if len(frac) > 6 {
		return 0, fmt.Errorf("%s is finer than a millionth of a dollar per million tokens", text)
	}
	w, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || w > maxPrice || w == maxPrice && strings.Trim(frac, "0") != "" {
		return 0, fmt.Errorf("%s is above %d US dollars per million tokens", text, maxPrice)
	}
	f, _ := strconv.ParseInt((frac + "000000")[:6], 10, 64)
	return w*perMillion + f, nil
}

// isTable reports whether p holds a table: decoding anything else into a
// map is not an error to the toml package.
func isTable(md *toml.MetaData, p toml.Primitive) bool {
	var v any
	_ = md.PrimitiveDecode(p, &v)
	_, ok := v.(map[string]any)
	return ok
}

// describe names the TOML value p holds, for a message.
func describe(md *toml.MetaData, p toml.Primitive) string {
	var v any
	_ = md.PrimitiveDecode(p, &v)
	switch v := v.(type) {
	case string:
		return fmt.Sprintf("the string %q", v)
	case bool:
		return fmt.Sprintf("%v", v)
	case int64, float64:
		return fmt.Sprintf("the number %v", v)
	case map[string]any:
		return "a table"
	case []any, []map[string]any:
		return "an array"
	}
	return "a date or time"
}

// lineProbe refuses every value: the decoder's error then carries the line
// of the key, which the toml package tells no other way (as in
// daemon/configfile.go).
type lineProbe struct{}

func (lineProbe) UnmarshalTOML(any) error { return errors.New("line probe") }

// keyLine is the line of the key whose value p is; for a table, which the
// probe cannot place, the first line of its values.
func keyLine(md *toml.MetaData, p toml.Primitive) int {
	var pe toml.ParseError
	if errors.As(md.PrimitiveDecode(p, &lineProbe{}), &pe) && pe.Position.Line > 0 {
		return pe.Position.Line
	}
	var children map[string]toml.Primitive
	if !isTable(md, p) || md.PrimitiveDecode(p, &children) != nil {
		return 0
	}
	first := 0
	for _, c := range children {
		if l := keyLine(md, c); l > 0 && (first == 0 || l < first) {
			first = l
		}
	}
	return first
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
