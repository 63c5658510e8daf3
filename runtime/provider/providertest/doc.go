// Package providertest runs local HTTP servers that speak the streaming wire
// formats of the real model vendors (OpenAI Chat Completions, Anthropic
// Messages): they record every request they get and play scripted replies,
// so that tests of the providers, the daemon and its clients can check both
// what the runtime sent and what it made of the answer.
package providertest
