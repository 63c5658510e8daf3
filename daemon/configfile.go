package daemon

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/trellis-run/trellis/internal/duration"
)

// FileConfig is the configuration file (TOML, given with --config): one
// key per trellisd flag, named like the flag, at the top level. It is also
// the type docs/trellisd.schema.json is generated from. A value given in
// the file means what the flag given the same value means.
type FileConfig struct {
	Home                      string   `toml:"home"`
	Host                      string   `toml:"host"`
	TLSCert                   string   `toml:"tls-cert"`
	TLSKey                    string   `toml:"tls-key"`
	ClusterCA                 string   `toml:"cluster-ca"`
	ClusterCert               string   `toml:"cluster-cert"`
	ClusterKey                string   `toml:"cluster-key"`
	InsecureNoTLS             bool     `toml:"insecure-no-tls"`
	Port                      int      `toml:"port" jsonschema:"minimum=0,maximum=65535"`
	GRPCPort                  int      `toml:"grpc-port" jsonschema:"minimum=0,maximum=65535"`
	GatewayPort               int      `toml:"gateway-port" jsonschema:"minimum=0,maximum=65535"`
	Provider                  string   `toml:"provider"`
	ProviderConcurrency       int      `toml:"provider-concurrency" jsonschema:"minimum=0"`
	ProviderRPM               int      `toml:"provider-rpm" jsonschema:"minimum=0"`
	BudgetDefaultCostMicroUSD int64    `toml:"budget-default-cost-micro-usd" jsonschema:"minimum=0"`
	BudgetDefaultTokens       int64    `toml:"budget-default-tokens" jsonschema:"minimum=0"`
	Store                     string   `toml:"store"`
	AllowOrigin               []string `toml:"allow-origin"`
	LogLevel                  string   `toml:"log-level" jsonschema:"enum=debug,enum=info,enum=warn,enum=error"`
	ApprovalTimeout           Duration `toml:"approval-timeout"`
	CommitLinger              Duration `toml:"commit-linger"`
	MergeDeltas               int      `toml:"merge-deltas" jsonschema:"minimum=0,maximum=1048576"`
	Durability                string   `toml:"durability" jsonschema:"enum=sync,enum=batch"`
	MaxConnections            int      `toml:"max-connections" jsonschema:"minimum=0"`
	MaxWatchedSessions        int      `toml:"max-watched-sessions" jsonschema:"minimum=0"`
	MaxInFlight               int      `toml:"max-in-flight" jsonschema:"minimum=0"`
	HelloTimeout              Duration `toml:"hello-timeout"`
	OperationWindow           Duration `toml:"operation-window"`
	MaxUnauthenticated        int      `toml:"max-unauthenticated" jsonschema:"minimum=0"`
	MCPConfig                 string   `toml:"mcp-config"`
	Prices                    string   `toml:"prices"`
	SearchProvider            string   `toml:"search-provider"`
	WebFetchAllowPrivate      bool     `toml:"web-fetch-allow-private"`
	BrowserProvider           string   `toml:"browser-provider" jsonschema:"enum=local,enum=none"`
	BrowserChromium           string   `toml:"browser-chromium"`
	LogStderr                 bool     `toml:"log-stderr"`
	LogMaxSize                int      `toml:"log-max-size" jsonschema:"minimum=1"`
	LogMaxFiles               int      `toml:"log-max-files" jsonschema:"minimum=1"`
	UnsandboxedCommands       bool     `toml:"unsandboxed-commands"`
	ToolEnv                   []string `toml:"tool-env"`
	CommandAllowPorts         []int    `toml:"command-allow-ports" jsonschema:"minimum=1,maximum=65535"`
	OutputMaxAge              Duration `toml:"output-max-age"`
	OutputMaxSize             int      `toml:"output-max-size" jsonschema:"minimum=0"`
	CommandNetwork            string   `toml:"command-network" jsonschema:"enum=,enum=none,enum=host"`
	Lease                     Duration `toml:"lease"`
	TokenFile                 string   `toml:"token-file"`
	SecretsKeyFile            string   `toml:"secrets-key-file"`
	Advertise                 string   `toml:"advertise"`
	Workdir                   string   `toml:"workdir"`
	WorkspaceRoot             string   `toml:"workspace-root"`
	Checkpoints               bool     `toml:"checkpoints"`
	CheckpointMaxFile         int64    `toml:"checkpoint-max-file" jsonschema:"minimum=0"`
	CheckpointQuota           int      `toml:"checkpoint-quota" jsonschema:"minimum=0"`
	Retain                    Duration `toml:"retain"`
	RetainLatest              int      `toml:"retain-latest" jsonschema:"minimum=0"`
	RetainPer                 string   `toml:"retain-per" jsonschema:"enum=workdir,enum=agent"`
}

// Duration is a duration written as in a flag: "90s", "5m", "1h30m",
// "30d", "2w".
type Duration time.Duration

// UnmarshalText parses a duration such as "90s" or "30d" (duration.Parse).
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := duration.Parse(string(b))
	*d = Duration(v)
	return err
}

// MarshalText writes the duration as time.Duration.String does.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// envKeys are the keys the daemon also reads from an environment
// variable, which beats the file (and loses to the flag).
var envKeys = map[string]string{
	"home":            "TRELLIS_HOME",
	"provider":        "TRELLIS_PROVIDER",
	"store":           "TRELLIS_STORE",
	"search-provider": "TRELLIS_SEARCH_PROVIDER",
}

// fileKeys maps each key of FileConfig to its field.
var fileKeys = func() map[string]reflect.StructField {
	out := map[string]reflect.StructField{}
	t := reflect.TypeFor[FileConfig]()
	for i := range t.NumField() {
		f := t.Field(i)
		out[f.Tag.Get("toml")] = f
	}
	return out
}()

// A Problem is one thing wrong with a configuration: what, the keys (flag
// names) it is about, and where the file gave the first of them.
type Problem struct {
	Keys []string
	Err  error
	// File and Line are where the value is written; Line 0 = not in a
	// file (a flag, an environment variable or a default).
	File string
	Line int
}

func (p Problem) Error() string {
	if p.Line > 0 {
		return fmt.Sprintf("%s:%d: %v", p.File, p.Line, p.Err)
	}
	return p.Err.Error()
}

func (p Problem) Unwrap() error { return p.Err }

// joinProblems is nil for none, else one error with a line per problem.
func joinProblems(problems []Problem) error {
	errs := make([]error, len(problems))
	for i, p := range problems {
		errs[i] = p
	}
	return errors.Join(errs...)
}

// sortProblems orders problems by their line in the file, those from
// elsewhere last, in the order found.
func sortProblems(problems []Problem) []Problem {
	slices.SortStableFunc(problems, func(a, b Problem) int {
		if (a.Line == 0) != (b.Line == 0) {
			return cmp.Compare(b.Line, a.Line) // the one not in the file last
		}
		return cmp.Compare(a.Line, b.Line)
	})
	return problems
}

// fileSource is a configuration file as read: the line of each key it
// set (a key a flag or an environment variable overrides is not listed).
type fileSource struct {
	path  string
	lines map[string]int
}

// locate gives each problem the line of the first of its keys that the
// file set.
func (src fileSource) locate(problems []Problem) []Problem {
	for i, p := range problems {
		for _, k := range p.Keys {
			if l := src.lines[k]; l > 0 && p.Line == 0 {
				problems[i].File, problems[i].Line = src.path, l
				break
			}
		}
	}
	return problems
}

// applyFile sets the flags of fs from the configuration file path, but
// not those given on the command line (set) nor those whose environment
// variable is set. It returns where each key it applied is written, and
// every problem of the file: syntax, unknown keys, wrong types.
func applyFile(fs *flag.FlagSet, path string, set map[string]bool, getenv func(string) string) (fileSource, []Problem) {
	src := fileSource{path: path, lines: map[string]int{}}
	b, err := os.ReadFile(path)
	if err != nil {
		return src, []Problem{{Keys: []string{"config"}, Err: fmt.Errorf("config: %w", err)}}
	}
	var keys map[string]toml.Primitive
	md, err := toml.Decode(string(b), &keys)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return src, []Problem{{File: path, Line: pe.Position.Line, Err: fmt.Errorf("not TOML: %s", pe.Message)}}
		}
		return src, []Problem{{File: path, Err: fmt.Errorf("%s: not TOML: %w", path, err)}}
	}
	lines := map[string]int{}
	names := make([]string, 0, len(keys))
	for k, p := range keys {
		lines[k] = keyLine(&md, p)
		names = append(names, k)
	}
	slices.SortFunc(names, func(a, b string) int { return lines[a] - lines[b] })
	var problems []Problem
	for _, k := range names {
		bad := func(err error) {
			problems = append(problems, Problem{Keys: []string{k}, Err: err, File: path, Line: lines[k]})
		}
		field, ok := fileKeys[k]
		if !ok {
			bad(fmt.Errorf("%s: unknown key (the keys are trellisd's flag names, at the top level; trellisd --help lists them)", k))
			continue
		}
		v := reflect.New(field.Type)
		if err := md.PrimitiveDecode(keys[k], v.Interface()); err != nil {
			var raw any
			_ = md.PrimitiveDecode(keys[k], &raw)
			bad(fmt.Errorf("%s: want %s, not %s", k, wantType(field.Type), describe(raw)))
			continue
		}
		if list, ok := v.Elem().Interface().([]string); ok {
			if i := slices.IndexFunc(list, func(e string) bool { return strings.Contains(e, ",") }); i >= 0 {
				bad(fmt.Errorf("%s: %q holds a comma: one value per string", k, list[i]))
				continue
			}
		}
		if set[k] || envKeys[k] != "" && getenv(envKeys[k]) != "" {
			continue
		}
		if err := fs.Set(k, flagText(v.Elem())); err != nil {
			bad(fmt.Errorf("%s: %w", k, err))
			continue
		}
		src.lines[k] = lines[k]
	}
	return src, problems
}

// lineProbe refuses every value: the decoder's error then carries the line
// of the key, which the toml package tells no other way.
type lineProbe struct{}

func (lineProbe) UnmarshalTOML(any) error { return errors.New("line probe") }

// keyLine is the line of the key whose value p is.
func keyLine(md *toml.MetaData, p toml.Primitive) int {
	var pe toml.ParseError
	if errors.As(md.PrimitiveDecode(p, &lineProbe{}), &pe) {
		return pe.Position.Line
	}
	return 0
}

// wantType names what a key of type t takes.
func wantType(t reflect.Type) string {
	switch t {
	case reflect.TypeFor[Duration]():
		return `a duration such as "90s" or "5m"`
	case reflect.TypeFor[[]string]():
		return "an array of strings"
	case reflect.TypeFor[[]int]():
		return "an array of integers"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Int:
		return "an integer"
	case reflect.Bool:
		return "true or false"
	}
	return t.String()
}

// describe names a TOML value for an error message.
func describe(v any) string {
	switch v := v.(type) {
	case string:
		return fmt.Sprintf("the string %q", v)
	case int64:
		return fmt.Sprintf("the integer %d", v)
	case float64:
		return fmt.Sprintf("the number %v", v)
	case bool:
		return fmt.Sprintf("%v", v)
	case []any:
		if len(v) > 0 {
			return "an array holding " + describe(v[0])
		}
		return "an array"
	case map[string]any:
		return "a table"
	case time.Time:
		return "a date or time"
	}
	return fmt.Sprintf("%v", v)
}

// flagText writes a decoded file value as the flag of the same name takes
// it on the command line.
func flagText(v reflect.Value) string {
	switch v := v.Interface().(type) {
	case Duration:
		return time.Duration(v).String()
	case []string:
		return strings.Join(v, ",")
	case []int:
		s := make([]string, len(v))
		for i, n := range v {
			s[i] = strconv.Itoa(n)
		}
		return strings.Join(s, ",")
	}
	return fmt.Sprint(v.Interface())
}
