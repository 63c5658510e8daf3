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
//   - The first candidate in script order that is not used up wins; with
//     none, the first "default" step not used up is played. A step is used
//     up once played (unless its "repeat" says more), so identical prompts
//     take the steps that match them in turn. When every candidate is used
//     up and one of them was played once: with the top-level "repeat" the
//     script starts over, else the last such candidate plays again (a
//     fixture with one step per prompt answers that prompt every time).
//     Candidates whose count ran out leave the choice to the "default"
//     steps. Steps with "match" never answer a tool result, so a step that
//     calls a tool cannot loop on its own prompt.
//   - With no step to play, the top-level "default" object is played; without
//     one the call plays an empty answer (no text, stop reason "stop"), as the
//     snowpea fixture format specifies.
//
// Step fields (all optional except one of match / after_tool / default):
//
//   - "match" (string), "after_tool" (string), "default" (bool): when the
//     step applies, as above. "default" excludes the other two.
//   - "reasoning" (or "thinking", its snowpea name), "text" (string):
//     streamed in that order, a few words per chunk; the chunks add up
//     exactly to the strings.
//   - "tool_calls": [{"name": string, "arguments": object, "id": string}]:
//     sent after the text, one complete call per chunk. "arguments" defaults
//     to {}; "id" defaults to "call_" + 24 random hex digits.
//   - "delaySec" (number, 0..3600): how long the step takes. It is spread
//     evenly before each chunk (or waited once when the step has none).
//     Cancelling the call's context ends the wait at once.
//   - "stopReason": "stop" | "tool_use" | "length"; defaults to "tool_use"
//     when the step has tool calls, else "stop".
//   - "usage": {"input": int, "output": int, "cacheRead": int, "cacheWrite":
//     int}; a missing input or output is estimated as bytes/4 of the request
//     (input) or of what the step sends (output). cacheRead and cacheWrite
//     (default 0) are the input tokens reported as read from and written to
//     a prompt cache: part of the input, which is at least their sum (a
//     given "usage.input" must be; an estimate is raised to it).
//   - "reasoningTokens" (int >= 0): of the output tokens, those the usage
//     reports as spent reasoning; they are added to the estimated output
//     (a given "usage.output" must be at least as many).
//   - "error" (string): after streaming the reasoning and text, the call
//     fails with a provider_error carrying this message (status 500). Such a
//     step may not have tool calls.
//   - "repeat": true (never used up), false or absent (played once), or a
//     count N > 0 (played N times; 0 means true). A step that is used up is
//     skipped and the choice goes on to later steps, so steps sharing a
//     "match" play a sequence.
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
