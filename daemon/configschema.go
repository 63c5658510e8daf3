package daemon

import (
	"encoding/json"
	"reflect"
	"strconv"
	"strings"

	"github.com/invopop/jsonschema"

	"github.com/trellis-run/trellis/internal/duration"
)

// ConfigSchema is the JSON Schema of the configuration file, generated
// from FileConfig, with each key described by its flag's usage and its
// default. docs/trellisd.schema.json is this schema; a test fails when it
// drifts (go test ./daemon -run TestConfigSchema -update rewrites it).
func ConfigSchema() ([]byte, error) {
	r := &jsonschema.Reflector{FieldNameTag: "toml", RequiredFromJSONSchemaTags: true, DoNotReference: true, ExpandedStruct: true}
	s := r.Reflect(&FileConfig{})
	s.ID = "https://github.com/trellis-run/trellis/docs/trellisd.schema.json"
	s.Title = "trellisd configuration file"
	s.Description = "The TOML file of trellisd --config: a key per flag, named like it. Flags and environment variables beat the file; the file beats the defaults (docs/operations.md)."
	fs := newCommandLine("trellisd").fs
	for p := s.Properties.Oldest(); p != nil; p = p.Next() {
		f := fs.Lookup(p.Key)
		if f == nil {
			continue // TestFileKeysAreFlags fails
		}
		p.Value.Description = f.Usage
		if fileKeys[p.Key].Type.Kind() == reflect.Slice { // an array in the file
			p.Value.Description = strings.TrimPrefix(f.Usage, "comma-separated ")
		}
		p.Value.Default = typedDefault(fileKeys[p.Key].Type, f.DefValue)
	}
	b, err := json.MarshalIndent(s, "", "  ")
	return append(b, '\n'), err
}

// typedDefault is a flag's default as the file writes it (nil: none
// worth showing).
func typedDefault(t reflect.Type, def string) any {
	switch t.Kind() {
	case reflect.Int:
		n, _ := strconv.Atoi(def)
		return n
	case reflect.Bool:
		b, _ := strconv.ParseBool(def)
		return b
	}
	if def == "" {
		return nil
	}
	return def
}

// JSONSchema describes a duration in the schema: a string such as "90s".
func (Duration) JSONSchema() *jsonschema.Schema {
	return &jsonschema.Schema{
		Type:        "string",
		Pattern:     duration.Pattern,
		Description: `a duration such as "90s", "5m" or "1h30m"`,
	}
}
