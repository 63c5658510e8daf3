// Package strict decodes what a client sends — the params of a call, the
// result of a server → client request such as approval.request — into the
// runtime's protobuf messages, strictly: unknown fields, fields of the gRPC
// form only, wrong types, out-of-range integers and values outside a
// (trellis.v1.one_of) set are invalid_params errors whose message names the
// field and what was expected, e.g. `field "mode" in params of
// session.create must be one of "plan", "accept", "auto", got "fast"`. protojson
// does the decoding; where it fails, a walk of the JSON along the message's
// descriptor says precisely what is wrong. The facade decodes every request
// with it, the REST gateway its bodies and query strings.
package strict
