// Package anthropic is the model provider for the Anthropic Messages
// streaming API: text deltas, thinking blocks as reasoning, tool_use blocks
// assembled from their input_json_delta pieces, usage from message_start and
// message_delta, and retries before the first token under llm.RetryPolicy.
package anthropic
