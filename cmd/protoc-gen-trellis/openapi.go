package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
)

// restRoute is the REST route of one RPC, from the grpc-gateway HTTP rules
// (proto/trellis/v1/http.yaml, the file grpc-gateway is generated from).
type restRoute struct {
	Verb string // get or post
	Path string
	Body string // "*" for a POST whose body is the params object
}

var (
	ruleSelector = regexp.MustCompile(`^\s*- selector:\s*(\S+)\s*$`)
	ruleVerb     = regexp.MustCompile(`^\s*(get|post|put|patch|delete):\s*(\S+)\s*$`)
	ruleBody     = regexp.MustCompile(`^\s*body:\s*"?([^"\s]*)"?\s*$`)
)

// readHTTPRules reads the rules of a google.api.Service HTTP configuration,
// keyed by selector (trellis.v1.SessionService.CreateSession). Only the
// shape http.yaml uses is understood: one verb and an optional body per
// rule; anything else is an error, not a silent gap.
func readHTTPRules(path string) (map[string]restRoute, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("the HTTP rules (opt http=%s): %w", path, err)
	}
	rules := map[string]restRoute{}
	var sel string
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case ruleSelector.MatchString(line):
			sel = ruleSelector.FindStringSubmatch(line)[1]
			if _, dup := rules[sel]; dup {
				return nil, fmt.Errorf("%s:%d: a second rule for %s", path, n, sel)
			}
			rules[sel] = restRoute{}
		case ruleVerb.MatchString(line):
			m := ruleVerb.FindStringSubmatch(line)
			r, ok := rules[sel]
			if !ok || r.Verb != "" {
				return nil, fmt.Errorf("%s:%d: %s outside a rule, or a rule's second verb", path, n, m[1])
			}
			if m[1] != "get" && m[1] != "post" {
				return nil, fmt.Errorf("%s:%d: verb %s: the REST mapping uses only get and post", path, n, m[1])
			}
			r.Verb, r.Path = m[1], m[2]
			rules[sel] = r
		case ruleBody.MatchString(line):
			r, ok := rules[sel]
			if !ok {
				return nil, fmt.Errorf("%s:%d: body outside a rule", path, n)
			}
			r.Body = ruleBody.FindStringSubmatch(line)[1]
			rules[sel] = r
		}
	}
	for sel, r := range rules {
		switch {
		case r.Verb == "":
			return nil, fmt.Errorf("%s: the rule for %s has no verb", path, sel)
		case r.Verb == "post" && r.Body != "*":
			return nil, fmt.Errorf("%s: the POST rule for %s must have body: \"*\" (the params object)", path, sel)
		case r.Verb == "get" && r.Body != "":
			return nil, fmt.Errorf("%s: the GET rule for %s has a body", path, sel)
		}
	}
	return rules, nil
}

// Where the OpenAPI document keeps the message schemas that protocol.json
// keeps under $defs (the same schemas, $refs rewritten).
const componentsPointer = "#/components/schemas/"

// openAPI renders the OpenAPI 3.1 document of the REST mapping: one
// operation per JSON-RPC method at its route, whose request is the
// method's params (a POST body, or a GET's query parameters) and whose 200
// response is the method's result, with the very schemas of /protocol.json.
func openAPI(p *protocol, rules map[string]restRoute) ([]byte, error) {
	paths := obj()
	tags := []any{}
	for _, s := range p.Services {
		tags = append(tags, obj().set("name", s.GoName).set("description", orDefault(s.Summary, s.GoName)))
	}
	errCodes := make([]string, 0, len(p.ErrorCodes))
	for _, c := range p.ErrorCodes {
		errCodes = append(errCodes, c.Code)
	}
	seen := map[string]bool{}
	for _, s := range p.Services {
		for _, m := range s.Methods {
			sel := strings.ReplaceAll(strings.TrimPrefix(m.FullMethod, "/"), "/", ".")
			r, ok := rules[sel]
			if !ok {
				return nil, fmt.Errorf("%s (%s) has no REST route in the HTTP rules", m.Name, sel)
			}
			seen[sel] = true
			op := obj().
				set("operationId", m.Name).
				set("summary", firstSentence(orDefault(m.Summary, m.Name))).
				set("description", restDescription(m)).
				set("tags", []string{s.GoName})
			if r.Verb == "get" {
				params, err := queryParameters(m)
				if err != nil {
					return nil, err
				}
				if len(params) > 0 {
					op.set("parameters", params)
				}
			} else {
				if m.Access.Mutating {
					op.set("parameters", []any{obj().set("name", "Idempotency-Key").set("in", "header").set("required", false).
						set("description", operationIDDoc).set("schema", obj().set("type", "string").set("minLength", 1).set("maxLength", 128))})
				}
				op.set("requestBody", obj().
					set("description", "The params object of "+m.Name+"; an empty body is {}.").
					set("required", false).
					set("content", obj().set("application/json", obj().set("schema", messageSchema(m.Params, false)))))
			}
			op.set("responses", obj().
				set("200", obj().
					set("description", "The result of "+m.Name+", the same JSON as its JSON-RPC result.").
					set("content", obj().set("application/json", obj().set("schema", messageSchema(m.Result, false))))).
				set("400", obj().set("$ref", "#/components/responses/InvalidParams")).
				set("401", obj().set("$ref", "#/components/responses/Unauthorized")).
				set("default", obj().set("$ref", "#/components/responses/Error")))
			item, ok := paths.get(r.Path)
			if !ok {
				item = obj()
				paths.set(r.Path, item)
			}
			item.(*object).set(r.Verb, op)
		}
	}
	for sel := range rules {
		if !seen[sel] {
			return nil, fmt.Errorf("the HTTP rules route %s, which is no JSON-RPC method", sel)
		}
	}

	// The message schemas the operations reach (event payloads and
	// notifications are WebSocket-only; protocol.json has them all).
	all := map[string]*object{}
	for _, v := range p.types.nested() {
		all[v.Name] = messageSchema(v, true)
	}
	// An event's payload is typed by its kind here (protocol.json says so in
	// words and lists the payloads under sessionEventKinds): if kind is K
	// then payload is K's payload message, so that a validator checks it.
	var payloadNames []string
	if ev, ok := all["SessionEvent"]; ok {
		var byKind []any
		for _, k := range p.EventKinds {
			name := k.Payload.Name
			if _, known := all[name]; !known { // a payload message also nested elsewhere is listed once
				all[name] = messageSchema(k.Payload, true)
				payloadNames = append(payloadNames, name)
			}
			byKind = append(byKind, obj().
				set("if", obj().set("properties", obj().set("kind", obj().set("const", k.Kind))).set("required", []string{"kind"})).
				set("then", obj().set("properties", obj().set("payload", obj().set("$ref", defsPointer+name)))))
		}
		ev.set("allOf", byKind)
	}
	used, err := reachable(paths, all)
	if err != nil {
		return nil, err
	}
	schemas := obj()
	for _, v := range p.types.nested() {
		if used[v.Name] {
			schemas.set(v.Name, all[v.Name])
		}
	}
	for _, name := range payloadNames {
		if used[name] {
			schemas.set(name, all[name])
		}
	}
	schemas.set("Error", obj().
		set("type", "object").
		set("description", "An error: the JSON-RPC error object of the same call.").
		set("properties", obj().
			set("code", obj().set("type", "integer").set("description", "The JSON-RPC numeric code.")).
			set("message", obj().set("type", "string")).
			set("data", obj().
				set("type", "object").
				set("description", "data.code is the protocol's string code; other keys add detail (retryAfterMs, limit, errorId, ...).").
				set("properties", obj().set("code", obj().set("type", "string").set("enum", errCodes))).
				set("required", []string{"code"}))).
		set("required", []string{"code", "message", "data"}))
	errorResponse := func(desc string) *object {
		return obj().set("description", desc).
			set("content", obj().set("application/json", obj().set("schema", obj().set("$ref", componentsPointer+"Error"))))
	}
	responses := obj().
		set("InvalidParams", errorResponse("invalid_params: the params (body or query) are not what the method takes; the message names the field.")).
		set("Unauthorized", errorResponse("unauthorized: no Authorization: Bearer <token> header, or a wrong token.")).
		set("Error", errorResponse("Any other error, with the HTTP status of its code: 404 not_found, 413 payload_too_large, 429 or 503 overloaded, 500 internal, ..."))

	doc := obj().
		set("openapi", "3.1.0").
		set("info", obj().
			set("title", "Trellis REST API").
			set("version", p.Version).
			set("description", "The REST mapping of the Trellis protocol (version "+p.Version+"): every JSON-RPC method "+
				"at /v1/ + its name with dots as slashes. Reads are GET with the params as query parameters, "+
				"everything else POST with the params object as the JSON body. A 200 body is the method's JSON-RPC "+
				"result and an error body its JSON-RPC error object, byte for byte the same JSON as over the "+
				"WebSocket. Generated from proto/trellis/v1 (the schemas are those of /protocol.json).").
			set("license", obj().set("name", "Apache-2.0").set("identifier", "Apache-2.0"))).
		set("servers", []any{obj().set("url", "/").set("description", "The daemon's HTTP port (daemon.json in its home).")}).
		set("security", []any{obj().set("bearer", []string{})}).
		set("tags", tags).
		set("paths", paths).
		set("components", obj().
			set("schemas", schemas).
			set("responses", responses).
			set("securitySchemes", obj().set("bearer", obj().
				set("type", "http").
				set("scheme", "bearer").
				set("description", "The daemon's token (the token file in its home directory)."))))

	raw, err := marshalRaw(doc)
	if err != nil {
		return nil, err
	}
	raw = bytes.ReplaceAll(raw, []byte(`"$ref":"`+defsPointer), []byte(`"$ref":"`+componentsPointer))
	var out bytes.Buffer
	if err := json.Indent(&out, raw, "", "  "); err != nil {
		return nil, err
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

var defsRef = regexp.MustCompile(`"\$ref":"` + regexp.QuoteMeta(defsPointer) + `([^"]+)"`)

// reachable returns the names of the schemas in all that root refers to,
// directly or through other schemas.
func reachable(root *object, all map[string]*object) (map[string]bool, error) {
	used := map[string]bool{}
	queue := []*object{root}
	for len(queue) > 0 {
		raw, err := marshalRaw(queue[0])
		if err != nil {
			return nil, err
		}
		queue = queue[1:]
		for _, m := range defsRef.FindAllSubmatch(raw, -1) {
			name := string(m[1])
			if used[name] {
				continue
			}
			s, ok := all[name]
			if !ok {
				return nil, fmt.Errorf("a schema refers to %s, which is no message of the protocol", name)
			}
			used[name] = true
			queue = append(queue, s)
		}
	}
	return used, nil
}

// queryParameters are a GET method's params as query parameters: each
// field of scalars (or of repeated scalars, as repeated keys).
func queryParameters(m *method) ([]any, error) {
	var out []any
	for _, f := range m.Params.Fields {
		if f.Elem.Ref != nil || f.Map || f.Elem.JSON == "any" || f.Elem.JSON == "object" {
			return nil, fmt.Errorf("%s is a GET route but its field %s is not a scalar: make it a POST", m.Name, f.JSONName)
		}
		p := obj().set("name", f.JSONName).set("in", "query")
		if f.Summary != "" {
			p.set("description", f.Summary)
		}
		p.set("required", f.Required)
		if f.Repeated {
			p.set("style", "form").set("explode", true)
		}
		p.set("schema", fieldSchema(f))
		out = append(out, p)
	}
	return out, nil
}

func restDescription(m *method) string {
	d := orDefault(m.Summary, m.Name)
	return d + "\n\nJSON-RPC method `" + m.Name + "`; gRPC `" + m.FullMethod + "`."
}

func orDefault(s, def string) string {
	if strings.TrimSpace(s) == "" {
		return def
	}
	return s
}

// firstSentence is s up to its first sentence end (or line end).
func firstSentence(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if i := strings.Index(s, ". "); i >= 0 {
		s = s[:i+1]
	}
	return s
}
