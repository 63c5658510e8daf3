// Package openai is the model provider for the OpenAI Chat Completions
// streaming API, and so for any server that speaks it through a base URL
// (vLLM, Ollama, llama.cpp, OpenRouter, DeepSeek): text and reasoning deltas,
// tool calls assembled from their argument fragments, usage from the final
// chunk, and retries before the first token under llm.RetryPolicy.
package openai
