// Package fake is the scripted, offline model provider: it plays a JSON
// script, and is both the default for demos and the test double of every
// package that needs a model.
//
// # Selecting it
//
// The provider spec "fake" plays the built-in demo script (demo.json, embedded);
// "fake:PATH" plays the script in the file PATH. Register it with
//
//	reg.Register(fake.Vendor, fake.Open)
//
// # Script format
//
//	{
//	  "steps": [
//	    {"match": "hello", "text": "Hi!"},
//	    {"match": "list files", "reasoning": "The user wants a listing.",
//	     "text": "Let me look.", "tool_calls": [{"name": "list_dir", "arguments": {"path": "."}}]},
//	    {"after_tool": "list_dir", "text": "Those are your files.", "delaySec": 0.5},
//	    {"match": "fail", "text": "Oh", "error": "upstream exploded"},
//	    {"default": true, "text": "I only know a few lines.", "usage": {"input": 10, "output": 5}}
//	  ],
//	  "repeat": false,
//	  "contextWindow": 128000
//	}
//
// Every model call plays exactly one step, chosen as follows:
//
//   - If the last message of the history is a tool result, the candidates are
//     the steps whose "after_tool" equals that result's tool name
//     (case-insensitive). A step that has both "after_tool" and "match" also
//     needs its "match" to be found in the latest user text.
//   - Otherwise the candidates are the steps with a "match" (and no
//     "after_tool") whose text is a case-insensitive substring of the latest
//     user message's text.
//   - The first candidate in script order wins; with none, the first "default"
//     step is played. Steps with "match" never answer a tool result, so a step
//     that calls a tool cannot loop on its own prompt.
//   - With no step to play, the top-level "default" object is played; without
//     one the call plays an empty answer (no text, stop reason "stop"), as the
//     snowpea fixture format specifies.
//
// Step fields (all optional except one of match / after_tool / default):
//
//   - "match" (string), "after_tool" (string), "default" (bool): when the
//     step applies, as above. "default" excludes the other two.
//   - "reasoning", "text" (string): streamed in that order, a few words per
//     chunk; the chunks add up exactly to the strings.
//   - "tool_calls": [{"name": string, "arguments": object, "id": string}]:
//     sent after the text, one complete call per chunk. "arguments" defaults
//     to {}; "id" defaults to "call_" + 24 random hex digits.
//   - "delaySec" (number, 0..3600): how long the step takes. It is spread
//     evenly before each chunk (or waited once when the step has none).
//     Cancelling the call's context ends the wait at once.
//   - "stopReason": "stop" | "tool_use" | "length"; defaults to "tool_use"
//     when the step has tool calls, else "stop".
//   - "usage": {"input": int, "output": int}; a missing count is estimated
//     as bytes/4 of the request (input) or of what the step sends (output).
//   - "error" (string): after streaming the reasoning and text, the call
//     fails with a provider_error carrying this message (status 500). Such a
//     step may not have tool calls.
//   - "repeat" (int >= 0): how many times the step may be played; 0 or absent
//     means without limit. A step that is used up is skipped and the choice
//     goes on to later steps, so steps sharing a "match" can play a sequence.
//
// Top-level fields: "steps" (at least one, unless "default" is given),
// "default" (a step object without "match", "after_tool" or "repeat": the
// snowpea fixture format's answer to every unmatched call), "repeat" (bool: when true and no
// step can be played because steps are used up, every step's count is reset
// and the choice is made again, so the script loops; default false), and
// "contextWindow" (int tokens reported by ContextWindow; default 128000).
//
// Uses are counted per Provider value: each Open or New starts from zero.
//
// Decoding is strict: an unknown field, a value of the wrong type or trailing
// data is an error naming the field and the step.
package fake
