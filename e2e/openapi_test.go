package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	vErrors "github.com/pb33f/libopenapi-validator/errors"

	"github.com/trellis-run/trellis/facade/methods"
)

var (
	openAPIOnce sync.Once
	openAPIV    validator.Validator
	openAPIErr  error
	// openAPIMu serialises validations (the validator caches per call).
	openAPIMu sync.Mutex
)

// openAPIValidator is a validator of the generated OpenAPI document (the
// one the daemon serves at /openapi.json), in strict mode: a response
// property the document does not declare is an error too.
func openAPIValidator(t testing.TB) validator.Validator {
	t.Helper()
	openAPIOnce.Do(func() {
		doc, err := libopenapi.NewDocument(methods.OpenAPIJSON)
		if err != nil {
			openAPIErr = err
			return
		}
		v, errs := validator.NewValidator(doc)
		if len(errs) > 0 {
			openAPIErr = fmt.Errorf("%v", errs)
			return
		}
		openAPIV = v
	})
	if openAPIErr != nil {
		t.Fatalf("the OpenAPI document does not load: %v", openAPIErr)
	}
	return openAPIV
}

func describeValidation(errs []*vErrors.ValidationError) string {
	var b strings.Builder
	for _, e := range errs {
		fmt.Fprintf(&b, "\n  %s: %s", e.Message, e.Reason)
		for _, f := range e.SchemaValidationErrors {
			fmt.Fprintf(&b, "\n    at %s: %s", f.FieldPath, f.Reason)
		}
	}
	return b.String()
}

// checkOpenAPI validates one real REST exchange against the document: the
// response always (status, content type, body schema), the request too
// when the call succeeded (a refused request is meant to be invalid).
func checkOpenAPI(t testing.TB, verb, url string, reqBody []byte, status int, header http.Header, respBody []byte) {
	t.Helper()
	if problems := openAPIProblems(t, verb, url, reqBody, status, header, respBody); problems != "" {
		t.Errorf("%s %s (%d) does not match the OpenAPI document:%s\nbody: %.600s", verb, url, status, problems, respBody)
	}
}

// openAPIProblems is checkOpenAPI's finding, "" when the exchange matches.
func openAPIProblems(t testing.TB, verb, url string, reqBody []byte, status int, header http.Header, respBody []byte) string {
	t.Helper()
	v := openAPIValidator(t)
	req, err := http.NewRequest(verb, url, bytes.NewReader(reqBody))
	if err != nil {
		t.Fatal(err)
	}
	if reqBody != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer x")
	resp := &http.Response{StatusCode: status, Header: header.Clone(), Body: io.NopCloser(bytes.NewReader(respBody)), Request: req}
	openAPIMu.Lock()
	defer openAPIMu.Unlock()
	var ok bool
	var errs []*vErrors.ValidationError
	if status == http.StatusOK {
		ok, errs = v.ValidateHttpRequestResponse(req, resp)
	} else {
		ok, errs = v.ValidateHttpResponse(req, resp)
	}
	if ok {
		return ""
	}
	return describeValidation(errs)
}

// TestOpenAPIValidationCatchesProtojson: the checks above fail on what the
// REST gateway answered before it used the facade's codec (seq as a string,
// the payload under its oneof name), on a payload that is not its kind's
// message, and on a params field the method lacks.
func TestOpenAPIValidationCatchesProtojson(t *testing.T) {
	h := http.Header{"Content-Type": {"application/json"}}
	base := "http://127.0.0.1:1"
	good := `{"sessionId":"s","mode":"auto","provider":"fake","model":"m","events":[{"sessionId":"s","seq":1,"kind":"turn.started","payload":{"turnId":"t","prompt":"p","queued":false},"ts":"2026-01-01T00:00:00.000Z"}],"more":false}`
	if p := openAPIProblems(t, "POST", base+"/v1/session/resume", []byte(`{"sessionId":"s"}`), 200, h, []byte(good)); p != "" {
		t.Fatalf("a good answer is refused:%s", p)
	}
	for name, c := range map[string]struct{ req, resp string }{
		"seq as a string":                 {`{"sessionId":"s"}`, strings.Replace(good, `"seq":1`, `"seq":"1"`, 1)},
		"no payload":                      {`{"sessionId":"s"}`, strings.Replace(good, `"payload":{"turnId":"t",`, `"turnStarted":{"turnId":"t",`, 1)},
		"unknown param":                   {`{"sessionId":"s","bogus":1}`, good},
		"payload field of the wrong type": {`{"sessionId":"s"}`, strings.Replace(good, `"turnId":"t"`, `"turnId":5`, 1)},
	} {
		if openAPIProblems(t, "POST", base+"/v1/session/resume", []byte(c.req), 200, h, []byte(c.resp)) == "" {
			t.Errorf("%s: validates", name)
		}
	}
	if openAPIProblems(t, "POST", base+"/v1/session/resume", nil, 400, h, []byte(`{"error":"proto: (line 1:2): unknown field"}`)) == "" {
		t.Error("an error body that is no JSON-RPC error object validates")
	}
}

// validatedByOpenAPI reports whether url is a route the OpenAPI document
// describes (the event streams are NDJSON/SSE, described in protocol.md).
func validatedByOpenAPI(path string) bool {
	return strings.HasPrefix(path, "/v1/") && !strings.HasPrefix(path, "/v1/sessions/")
}

// TestOpenAPIDocument: GET /openapi.json answers the generated OpenAPI 3.1
// document, which is a valid OpenAPI 3.1 document and has one operation
// per method at the method's REST route.
func TestOpenAPIDocument(t *testing.T) {
	d := startDaemon(t)
	code, body := httpGet(t, fmt.Sprintf("http://127.0.0.1:%d/openapi.json", d.HTTPPort()), "")
	if code != http.StatusOK {
		t.Fatalf("/openapi.json: %d %.200s", code, body)
	}
	if !bytes.Equal(body, methods.OpenAPIJSON) {
		t.Fatal("/openapi.json is not the generated facade/methods/openapi.json")
	}
	var doc struct {
		OpenAPI string `json:"openapi"`
		Paths   map[string]map[string]struct{ OperationID string }
	}
	if err := json.Unmarshal(body, &doc); err != nil || doc.OpenAPI != "3.1.0" {
		t.Fatalf("openapi = %q (%v), want 3.1.0", doc.OpenAPI, err)
	}
	if ok, errs := openAPIValidator(t).ValidateDocument(); !ok {
		t.Fatalf("not a valid OpenAPI 3.1 document:%s", describeValidation(errs))
	}
	routes := restRoutes(t)
	ops := 0
	for path, item := range doc.Paths {
		for verb, op := range item {
			ops++
			r, ok := routes[op.OperationID]
			if !ok || r.Path != path || r.Verb != strings.ToUpper(verb) {
				t.Errorf("%s %s is operation %q, whose route is %+v", verb, path, op.OperationID, r)
			}
		}
	}
	if ops != len(routes) || len(routes) != len(methods.Names()) {
		t.Errorf("%d operations, %d routes, %d methods", ops, len(routes), len(methods.Names()))
	}
}
