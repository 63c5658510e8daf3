package tool

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sync"

	"github.com/invopop/jsonschema"
)

// Args, embedded in a tool's type, gives the tool the JSON Schema of its
// arguments' Go type In, which Run decodes the call's arguments into
// (decodeArgs): the arguments are written once, as a struct, and the
// schema the model sees cannot drift from what Run reads. The schema is inferred from In's
// fields:
//   - a field's json name is the property; a field without omitempty is
//     required; no other property is allowed;
//   - `jsonschema:"minLength=1,maximum=600"` adds constraints (on a slice,
//     item constraints such as minLength apply to its items;
//     `type=integer` on a float64 asks for a whole number that decodes
//     even when written 10.0);
//   - `jsonschema_description:"…"` is what the model reads about it.
type Args[In any] struct{}

// InputSchema implements Tool.
func (Args[In]) InputSchema() json.RawMessage { return SchemaOf[In]() }

// schemas caches each arguments type's schema (reflect.Type → json.RawMessage).
var schemas sync.Map

// SchemaOf returns the JSON Schema (draft 2020-12) of the arguments type
// In, inferred as Args documents. In must be a struct.
func SchemaOf[In any]() json.RawMessage {
	t := reflect.TypeFor[In]()
	if s, ok := schemas.Load(t); ok {
		return s.(json.RawMessage)
	}
	if t.Kind() != reflect.Struct {
		panic(fmt.Sprintf("tool: arguments type %s is not a struct", t))
	}
	r := jsonschema.Reflector{Anonymous: true, DoNotReference: true, ExpandedStruct: true}
	s := r.ReflectFromType(t)
	s.Version = "" // the providers' tool schemas carry no $schema
	b, err := json.Marshal(s)
	if err != nil {
		panic(fmt.Sprintf("tool: the schema of %s: %v", t, err))
	}
	v, _ := schemas.LoadOrStore(t, json.RawMessage(b))
	return v.(json.RawMessage)
}
