package openai

import "strings"

// contextWindows maps model name prefixes to their context windows in
// tokens. The longest matching prefix wins, so "gpt-4o" is not read as
// "gpt-4".
var contextWindows = map[string]int{
	"gpt-5":             400000,
	"gpt-4.1":           1047576,
	"gpt-4o":            128000,
	"gpt-4-turbo":       128000,
	"gpt-4":             8192,
	"gpt-3.5-turbo":     16385,
	"o1":                200000,
	"o1-mini":           128000,
	"o3":                200000,
	"o4-mini":           200000,
	"deepseek-chat":     128000,
	"deepseek-reasoner": 128000,
}

// ContextWindow returns the context window of a known model, or 0. A
// routing prefix such as OpenRouter's "openai/" is ignored.
func ContextWindow(model string) int {
	if i := strings.LastIndexByte(model, '/'); i >= 0 {
		model = model[i+1:]
	}
	best, window := 0, 0
	for prefix, w := range contextWindows {
		if strings.HasPrefix(model, prefix) && len(prefix) > best {
			best, window = len(prefix), w
		}
	}
	return window
}
