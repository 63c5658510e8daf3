package anthropic

import "strings"

// KnownModels are the models listed when the configuration lists none.
var KnownModels = []string{"claude-sonnet-4-5", "claude-opus-4-1", "claude-haiku-4-5", "claude-sonnet-4-0", "claude-3-5-haiku-latest"}

// claudeContextWindow is the context window of every Claude model.
const claudeContextWindow = 200000

// ContextWindow returns the context window of a known model, or 0.
func ContextWindow(model string) int {
	if strings.HasPrefix(model, "claude-") {
		return claudeContextWindow
	}
	return 0
}

// defaultMaxTokens is max_tokens when the request sets none; the Messages
// API requires one. The Claude 3 models (but 3.5 and 3.7) allow no more
// than 4096.
func defaultMaxTokens(model string) int64 {
	if strings.HasPrefix(model, "claude-3-") && !strings.HasPrefix(model, "claude-3-5") && !strings.HasPrefix(model, "claude-3-7") {
		return 4096
	}
	return 8192
}
