package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"google.golang.org/protobuf/compiler/protogen"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/pluginpb"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
)

const repoRoot = "../.."

// registryRequest builds a CodeGeneratorRequest for the trellis.v1 files
// linked into this test binary. Compiled-in descriptors carry no comments.
func registryRequest(t *testing.T) *pluginpb.CodeGeneratorRequest {
	t.Helper()
	req := &pluginpb.CodeGeneratorRequest{}
	seen := map[string]bool{}
	var add func(fd protoreflect.FileDescriptor)
	add = func(fd protoreflect.FileDescriptor) {
		if seen[fd.Path()] {
			return
		}
		seen[fd.Path()] = true
		for i := 0; i < fd.Imports().Len(); i++ {
			add(fd.Imports().Get(i).FileDescriptor)
		}
		req.ProtoFile = append(req.ProtoFile, protodesc.ToFileDescriptorProto(fd))
	}
	var paths []string
	protoregistry.GlobalFiles.RangeFilesByPackage("trellis.v1", func(fd protoreflect.FileDescriptor) bool {
		paths = append(paths, fd.Path())
		return true
	})
	sort.Strings(paths)
	for _, p := range paths {
		fd, err := protoregistry.GlobalFiles.FindFileByPath(p)
		if err != nil {
			t.Fatal(err)
		}
		add(fd)
	}
	req.FileToGenerate = paths
	if len(paths) < 10 {
		t.Fatalf("only %d trellis.v1 files linked in: %v", len(paths), paths)
	}
	return req
}

// bufRequest builds the request from the .proto sources with buf, comments
// included, as `buf generate` does. It skips the test when buf cannot run.
func bufRequest(t *testing.T) *pluginpb.CodeGeneratorRequest {
	t.Helper()
	if testing.Short() {
		t.Skip("runs buf; skipped in -short mode")
	}
	out := filepath.Join(t.TempDir(), "image.binpb")
	cmd := exec.Command("go", "tool", "-modfile=tools/go.mod", "buf", "build", "--as-file-descriptor-set", "-o", out)
	cmd.Dir = repoRoot
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("buf build failed (is the tools module available?): %v\n%s", err, msg)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	set := &descriptorpb.FileDescriptorSet{}
	if err := proto.Unmarshal(raw, set); err != nil {
		t.Fatal(err)
	}
	req := &pluginpb.CodeGeneratorRequest{ProtoFile: set.File}
	for _, f := range set.File {
		if strings.HasPrefix(f.GetName(), "trellis/") {
			req.FileToGenerate = append(req.FileToGenerate, f.GetName())
		}
	}
	return req
}

// run runs the plugin on req and returns the generated files by name.
func run(t *testing.T, req *pluginpb.CodeGeneratorRequest) map[string][]byte {
	t.Helper()
	if req.Parameter == nil {
		req.Parameter = proto.String("http=" + filepath.Join(repoRoot, "proto", "trellis", "v1", "http.yaml"))
	}
	gen, err := protogen.Options{ParamFunc: flags.Set}.New(req)
	if err != nil {
		t.Fatal(err)
	}
	if err := generate(gen); err != nil {
		t.Fatal(err)
	}
	resp := gen.Response()
	if resp.Error != nil {
		t.Fatal(resp.GetError())
	}
	files := map[string][]byte{}
	for _, f := range resp.File {
		files[f.GetName()] = []byte(f.GetContent())
	}
	return files
}

// jsonrpcMethods lists the (jsonrpc) names of the linked-in services, read
// through the generated Go extension rather than the plugin's own reader.
func jsonrpcMethods(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	protoregistry.GlobalFiles.RangeFilesByPackage("trellis.v1", func(fd protoreflect.FileDescriptor) bool {
		for i := 0; i < fd.Services().Len(); i++ {
			s := fd.Services().Get(i)
			for j := 0; j < s.Methods().Len(); j++ {
				m := s.Methods().Get(j)
				if name := proto.GetExtension(m.Options(), trellisv1.E_Jsonrpc).(string); name != "" {
					out[name] = "/" + string(s.FullName()) + "/" + string(m.Name())
				}
			}
		}
		return true
	})
	return out
}

func TestOutputs(t *testing.T) {
	files := run(t, registryRequest(t))
	var names []string
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	want := []string{docsPath, methodsGoPath, protocolJSONPath, typescriptPath, errcodeCodesPath, eventKindsGoPath, openAPIPath, rolesDocPath, rpcAuthzPath, clientCallsPath, eventPayloadsPath}
	sort.Strings(want)
	if strings.Join(names, ",") != strings.Join(want, ",") {
		t.Fatalf("generated %v, want %v", names, want)
	}
	for _, n := range names {
		if !bytes.Contains(files[n], []byte(generatedHeader)) && n != protocolJSONPath && n != openAPIPath {
			t.Errorf("%s lacks the generated-code header", n)
		}
	}
}

func TestEveryJSONRPCMethodIsGenerated(t *testing.T) {
	files := run(t, registryRequest(t))
	methods := jsonrpcMethods(t)
	if len(methods) == 0 {
		t.Fatal("no (jsonrpc) methods found")
	}
	var doc struct {
		Methods map[string]struct {
			Direction string `json:"direction"`
		} `json:"methods"`
	}
	if err := json.Unmarshal(files[protocolJSONPath], &doc); err != nil {
		t.Fatal(err)
	}
	goSrc := string(files[methodsGoPath])
	ts := string(files[typescriptPath])
	for name, full := range methods {
		if !strings.Contains(goSrc, `FullMethod: "`+full+`"`) {
			t.Errorf("methods.gen.go: no entry for %s (%s)", name, full)
		}
		if d := doc.Methods[name].Direction; d != "c2s" {
			t.Errorf("protocol.json: %s direction %q, want c2s", name, d)
		}
		if !strings.Contains(ts, `"`+name+`": { params: `) {
			t.Errorf("protocol.ts: Methods lacks %s", name)
		}
		if !strings.Contains(string(files[docsPath]), "#### `"+name+"`") {
			t.Errorf("protocol.md: no section for %s", name)
		}
	}
	s2c := []string{"approval.request", "question.request", "tool.call"}
	for _, name := range s2c {
		if d := doc.Methods[name].Direction; d != "s2c" {
			t.Errorf("%s direction %q, want s2c", name, d)
		}
	}
	if got, want := len(doc.Methods), len(methods)+len(s2c); got != want {
		t.Errorf("protocol.json has %d methods, want %d", got, want)
	}
}

func TestOutputIsDeterministic(t *testing.T) {
	req := registryRequest(t)
	first := run(t, req)
	// Same files, generation order reversed: nothing may depend on it.
	rev := proto.Clone(req).(*pluginpb.CodeGeneratorRequest)
	for i, j := 0, len(rev.FileToGenerate)-1; i < j; i, j = i+1, j-1 {
		rev.FileToGenerate[i], rev.FileToGenerate[j] = rev.FileToGenerate[j], rev.FileToGenerate[i]
	}
	for i := 0; i < 2; i++ {
		again := run(t, rev)
		for name, content := range first {
			if !bytes.Equal(content, again[name]) {
				t.Errorf("%s differs between runs", name)
			}
		}
	}
}

func TestProtocolDocument(t *testing.T) {
	files := run(t, registryRequest(t))
	var doc struct {
		ProtocolVersion   string                     `json:"protocolVersion"`
		ServerVersion     *string                    `json:"serverVersion"`
		Notifications     map[string]json.RawMessage `json:"notifications"`
		SessionEventKinds map[string]json.RawMessage `json:"sessionEventKinds"`
		ErrorCodes        []struct {
			Code    string `json:"code"`
			Numeric int    `json:"numeric"`
		} `json:"errorCodes"`
		Capabilities []string `json:"capabilities"`
		Transport    struct {
			WS string `json:"ws"`
		} `json:"transport"`
	}
	if err := json.Unmarshal(files[protocolJSONPath], &doc); err != nil {
		t.Fatal(err)
	}
	if doc.ProtocolVersion != "1.0.0" || doc.ServerVersion == nil || *doc.ServerVersion != "" {
		t.Errorf("versions: protocol %q, server %v", doc.ProtocolVersion, doc.ServerVersion)
	}
	for _, n := range []string{"session.event", "approval.pending", "approval.resolved", "job.event", "gateway.event", "commands.changed"} {
		if doc.Notifications[n] == nil {
			t.Errorf("notification %s missing", n)
		}
	}
	payload := (&trellisv1.SessionEvent{}).ProtoReflect().Descriptor().Oneofs().ByName("payload")
	if got, want := len(doc.SessionEventKinds), payload.Fields().Len(); got != want {
		t.Errorf("%d event kinds, want %d", got, want)
	}
	for i := 0; i < payload.Fields().Len(); i++ {
		kind := proto.GetExtension(payload.Fields().Get(i).Options(), trellisv1.E_EventKind).(string)
		if doc.SessionEventKinds[kind] == nil {
			t.Errorf("event kind %s missing", kind)
		}
	}
	codes := map[string]int{}
	for _, c := range doc.ErrorCodes {
		codes[c.Code] = c.Numeric
	}
	if len(codes) != len(trellisv1.ErrorCode_name)-1 || codes["not_found"] != -32004 || codes["overloaded"] != -32001 {
		t.Errorf("error codes: %v", codes)
	}
	if !sort.StringsAreSorted(doc.Capabilities) || len(doc.Capabilities) == 0 {
		t.Errorf("capabilities %v: want sorted, non-empty", doc.Capabilities)
	}
	if doc.Transport.WS != "/ws" {
		t.Errorf("transport.ws = %q", doc.Transport.WS)
	}
}

// TestSchemasValidate compiles schemas out of protocol.json ($refs into its
// $defs included) and checks that they accept and reject what the protocol says.
func TestSchemasValidate(t *testing.T) {
	files := run(t, registryRequest(t))
	docJSON, err := jsonschema.UnmarshalJSON(bytes.NewReader(files[protocolJSONPath]))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	const url = "mem:///protocol.json"
	if err := c.AddResource(url, docJSON); err != nil {
		t.Fatal(err)
	}
	compile := func(ptr string) *jsonschema.Schema {
		s, err := c.Compile(url + "#" + ptr)
		if err != nil {
			t.Fatalf("compile %s: %v", ptr, err)
		}
		return s
	}
	tests := []struct {
		name   string
		schema string // JSON pointer into protocol.json
		value  string
		ok     bool
	}{
		{"create minimal", "/methods/session.create/params", `{"workdir": "/tmp"}`, true},
		{"create full", "/methods/session.create/params", `{"workdir": "/tmp", "mode": "plan", "provider": "fake", "model": "m", "agent": "a"}`, true},
		{"create without workdir", "/methods/session.create/params", `{}`, false},
		{"create with unknown field", "/methods/session.create/params", `{"workdir": "/tmp", "bogus": 1}`, false},
		{"create with bad mode", "/methods/session.create/params", `{"workdir": "/tmp", "mode": "yolo"}`, false},
		{"create with wrong type", "/methods/session.create/params", `{"workdir": 3}`, false},
		{"empty params", "/methods/system.info/params", `{}`, true},
		{"provider config json names", "/methods/provider.configure/params", `{"vendor": "openai", "config": {"api_key": "k", "base_url": "u", "default": true}}`, true},
		// config is (open): other keys pass, its own fields are typed, the
		// params around it stay closed.
		{"provider config other keys", "/methods/provider.configure/params", `{"vendor": "openai", "config": {"organization": "o", "timeout": 3}}`, true},
		{"provider config wrong type", "/methods/provider.configure/params", `{"vendor": "openai", "config": {"default": "yes", "organization": "o"}}`, false},
		{"provider configure unknown field", "/methods/provider.configure/params", `{"vendor": "openai", "config": {}, "organization": "o"}`, false},
		{"bind one target", "/methods/gateway.bind/params", `{"platform": "slack", "credentialsRef": "env:X", "target": {"agent": "a"}}`, true},
		{"bind two targets", "/methods/gateway.bind/params", `{"platform": "slack", "credentialsRef": "env:X", "target": {"agent": "a", "session": "s-1"}}`, false},
		{"list sessions result", "/methods/session.list/result", `{"sessions": [{"sessionId": "s-1", "workdir": "/w", "mode": "accept", "provider": null, "model": null, "createdAt": "t", "seq": 5, "kind": "chat", "parentSessionId": null, "jobId": null, "agent": null, "status": "idle", "running": false, "title": null, "lastPrompt": null, "lastActivityAt": null, "pendingApprovals": 0, "workspace": "unmanaged"}]}`, true},
		{"list sessions result missing null field", "/methods/session.list/result", `{"sessions": [{"sessionId": "s-1"}]}`, false},
		{"session.event", "/notifications/session.event", `{"sessionId": "s-1", "seq": 1, "kind": "turn.started", "payload": {"turnId": "t-1", "prompt": "hi", "queued": false}, "ts": "2025-01-01T00:00:00.000Z"}`, true},
		{"session.event unknown kind", "/notifications/session.event", `{"sessionId": "s-1", "seq": 1, "kind": "nope", "payload": {}, "ts": "x"}`, false},
		{"turn.started payload", "/sessionEventKinds/turn.started", `{"turnId": "t-1", "prompt": "hi", "queued": true}`, true},
		{"context payload nulls", "/sessionEventKinds/context", `{"used": 10, "window": null, "percent": null}`, true},
		{"approval reply", "/methods/approval.request/result", `{"decision": "allow"}`, true},
		// A reply's scope is read leniently (an unknown one never flips
		// the decision: the runtime takes it as once); the decision is not.
		{"approval reply unknown scope", "/methods/approval.request/result", `{"decision": "allow", "scope": "forever"}`, true},
		{"approval reply bad decision", "/methods/approval.request/result", `{"decision": "maybe"}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inst, err := jsonschema.UnmarshalJSON(strings.NewReader(tt.value))
			if err != nil {
				t.Fatal(err)
			}
			ptr := strings.ReplaceAll(tt.schema, "~", "~0")
			err = compile(ptr).Validate(inst)
			if (err == nil) != tt.ok {
				t.Errorf("valid = %v, want %v (%v)", err == nil, tt.ok, err)
			}
		})
	}
}

// TestCommittedFilesAreCurrent regenerates from the .proto sources and
// compares with the files in the tree: CI's drift check, runnable locally.
// It needs buf, which `go test` must not download and compile (offline, and
// minutes on a cold cache): CI runs the same check as
// scripts/check-generated.sh, and TRELLIS_TEST_BUF=1 runs it here.
func TestCommittedFilesAreCurrent(t *testing.T) {
	if os.Getenv("TRELLIS_TEST_BUF") == "" {
		t.Skip("the generated-code drift check runs in .ci/run (scripts/check-generated.sh); set TRELLIS_TEST_BUF=1 to run it here (builds buf from tools/go.mod)")
	}
	files := run(t, bufRequest(t))
	for name, content := range files {
		onDisk, err := os.ReadFile(filepath.Join(repoRoot, name))
		if err != nil {
			t.Errorf("%s: %v (run buf generate)", name, err)
			continue
		}
		if !bytes.Equal(onDisk, content) {
			t.Errorf("%s is stale: run `go tool -modfile=tools/go.mod buf generate`", name)
		}
	}
	if md := string(files[docsPath]); !strings.Contains(md, "Creates a session in a working directory") {
		t.Errorf("protocol.md lacks the rpc comments")
	}
}

// badRequest is a request for one small file using our options, changed by mutate.
func badRequest(t *testing.T, mutate func(fd *descriptorpb.FileDescriptorProto)) *pluginpb.CodeGeneratorRequest {
	t.Helper()
	optsFile, err := protoregistry.GlobalFiles.FindFileByPath("trellis/v1/options.proto")
	if err != nil {
		t.Fatal(err)
	}
	str := descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum()
	i32 := descriptorpb.FieldDescriptorProto_TYPE_INT32.Enum()
	opt := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()
	rpc := func(name, jsonrpc string) *descriptorpb.MethodDescriptorProto {
		o := &descriptorpb.MethodOptions{}
		proto.SetExtension(o, trellisv1.E_Jsonrpc, jsonrpc)
		proto.SetExtension(o, trellisv1.E_Access, &trellisv1.Access{MinRole: "viewer"})
		return &descriptorpb.MethodDescriptorProto{Name: proto.String(name), InputType: proto.String(".bad.v1.Req"), OutputType: proto.String(".bad.v1.Resp"), Options: o}
	}
	fd := &descriptorpb.FileDescriptorProto{
		Name:       proto.String("bad/v1/bad.proto"),
		Package:    proto.String("bad.v1"),
		Syntax:     proto.String("proto3"),
		Dependency: []string{"trellis/v1/options.proto"},
		Options:    &descriptorpb.FileOptions{GoPackage: proto.String("example.com/bad/v1;badv1")},
		MessageType: []*descriptorpb.DescriptorProto{
			{Name: proto.String("Req"), Field: []*descriptorpb.FieldDescriptorProto{
				{Name: proto.String("limit"), JsonName: proto.String("limit"), Number: proto.Int32(1), Type: i32, Label: opt, Options: &descriptorpb.FieldOptions{}},
				{Name: proto.String("mode"), JsonName: proto.String("mode"), Number: proto.Int32(2), Type: str, Label: opt, Options: &descriptorpb.FieldOptions{}},
			}},
			{Name: proto.String("Resp"), Options: &descriptorpb.MessageOptions{}},
		},
		Service: []*descriptorpb.ServiceDescriptorProto{{
			Name:   proto.String("BadService"),
			Method: []*descriptorpb.MethodDescriptorProto{rpc("Do", "bad.do"), rpc("Again", "bad.again")},
		}},
	}
	mutate(fd)
	return &pluginpb.CodeGeneratorRequest{
		FileToGenerate: []string{fd.GetName()},
		ProtoFile: []*descriptorpb.FileDescriptorProto{
			protodesc.ToFileDescriptorProto(descriptorpb.File_google_protobuf_descriptor_proto),
			protodesc.ToFileDescriptorProto(optsFile),
			fd,
		},
	}
}

func TestRejectsBadAnnotations(t *testing.T) {
	limit := func(fd *descriptorpb.FileDescriptorProto) *descriptorpb.FieldOptions {
		return fd.MessageType[0].Field[0].Options
	}
	mode := func(fd *descriptorpb.FileDescriptorProto) *descriptorpb.FieldOptions {
		return fd.MessageType[0].Field[1].Options
	}
	const rules = `http:
  rules:
    - selector: bad.v1.BadService.Do
      post: /v1/bad/do
      body: "*"
    - selector: bad.v1.BadService.Again
      get: /v1/bad/again
`
	tests := []struct {
		name    string
		mutate  func(fd *descriptorpb.FileDescriptorProto)
		wantErr string // "" = generation succeeds
	}{
		{"valid", func(*descriptorpb.FileDescriptorProto) {}, ""},
		{"typed defaults", func(fd *descriptorpb.FileDescriptorProto) {
			proto.SetExtension(limit(fd), trellisv1.E_DefaultValue, "10")
			proto.SetExtension(mode(fd), trellisv1.E_OneOf, "a|b")
			proto.SetExtension(mode(fd), trellisv1.E_DefaultValue, "b")
		}, ""},
		{"integer default that is not a number", func(fd *descriptorpb.FileDescriptorProto) {
			proto.SetExtension(limit(fd), trellisv1.E_DefaultValue, "ten")
		}, `(default_value) "ten"`},
		{"default outside one_of", func(fd *descriptorpb.FileDescriptorProto) {
			proto.SetExtension(mode(fd), trellisv1.E_OneOf, "a|b")
			proto.SetExtension(mode(fd), trellisv1.E_DefaultValue, "c")
		}, "not one of a|b"},
		{"one_of on an integer", func(fd *descriptorpb.FileDescriptorProto) {
			proto.SetExtension(limit(fd), trellisv1.E_OneOf, "1|2")
		}, "(one_of) applies to string fields only"},
		{"duplicate method name", func(fd *descriptorpb.FileDescriptorProto) {
			proto.SetExtension(fd.Service[0].Method[1].Options, trellisv1.E_Jsonrpc, "bad.do")
		}, `"bad.do" is declared by both`},
		{"streaming method", func(fd *descriptorpb.FileDescriptorProto) {
			fd.Service[0].Method[0].ServerStreaming = proto.Bool(true)
		}, "unary RPCs only"},
		{"server request without result", func(fd *descriptorpb.FileDescriptorProto) {
			proto.SetExtension(fd.MessageType[1].Options, trellisv1.E_S2CRequest, "bad.ask")
		}, "no (s2c_result)"},
		{"method without a REST route", func(*descriptorpb.FileDescriptorProto) {}, "bad.again (bad.v1.BadService.Again) has no REST route"},
		{"REST route of no method", func(*descriptorpb.FileDescriptorProto) {}, "route bad.v1.BadService.Gone, which is no JSON-RPC method"},
		{"POST without the params body", func(*descriptorpb.FileDescriptorProto) {}, `must have body: "*"`},
		{"method without (access)", func(fd *descriptorpb.FileDescriptorProto) {
			proto.ClearExtension(fd.Service[0].Method[1].Options, trellisv1.E_Access)
		}, "bad.v1.BadService.Again has no (access) option"},
		{"(access) naming no role", func(fd *descriptorpb.FileDescriptorProto) {
			proto.SetExtension(fd.Service[0].Method[0].Options, trellisv1.E_Access, &trellisv1.Access{MinRole: "root"})
		}, `(access).min_role "root" is not a role`},
		{"session-scoped without a session_id", func(fd *descriptorpb.FileDescriptorProto) {
			proto.SetExtension(fd.Service[0].Method[0].Options, trellisv1.E_Access, &trellisv1.Access{MinRole: "member", Session: true})
		}, "(access).session needs a string session_id"},
		{"owner without a session_id", func(fd *descriptorpb.FileDescriptorProto) {
			proto.SetExtension(fd.Service[0].Method[0].Options, trellisv1.E_Access, &trellisv1.Access{MinRole: "member", Owner: true})
		}, "(access).owner needs a string session_id"},
		{"(watch) naming no mode", func(fd *descriptorpb.FileDescriptorProto) {
			proto.SetExtension(fd.Service[0].Method[0].Options, trellisv1.E_Watch, "during")
		}, `(watch) "during" is not one of before, after`},
		{"omit_unset on a field that cannot be unset", func(fd *descriptorpb.FileDescriptorProto) {
			proto.SetExtension(limit(fd), trellisv1.E_OmitUnset, true)
		}, "(omit_unset) applies to optional and message fields"},
		{"(watch) on a method", func(fd *descriptorpb.FileDescriptorProto) {
			proto.SetExtension(fd.Service[0].Method[0].Options, trellisv1.E_Watch, "after")
		}, ""},
	}
	// The HTTP rules of each case; rules when absent.
	caseRules := map[string]string{
		"method without a REST route":  strings.Split(rules, "    - selector: bad.v1.BadService.Again")[0],
		"REST route of no method":      rules + "    - selector: bad.v1.BadService.Gone\n      get: /v1/bad/gone\n",
		"POST without the params body": strings.Replace(rules, `      body: "*"`+"\n", "", 1),
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "http.yaml")
			r, ok := caseRules[tt.name]
			if !ok {
				r = rules
			}
			if err := os.WriteFile(path, []byte(r), 0o600); err != nil {
				t.Fatal(err)
			}
			req := badRequest(t, tt.mutate)
			req.Parameter = proto.String("http=" + path)
			gen, err := protogen.Options{ParamFunc: flags.Set}.New(req)
			if err != nil {
				t.Fatal(err)
			}
			err = generate(gen)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

// TestErrorAndEventTables: every ErrorCode value with an (error) option is
// a constant of package errcode with its numeric and gRPC codes; every event
// kind of SessionEvent.payload is a constant of package eventkind.
func TestErrorAndEventTables(t *testing.T) {
	files := run(t, registryRequest(t))
	src := string(files[errcodeCodesPath])
	n := 0
	for num := range trellisv1.ErrorCode_name {
		v := trellisv1.ErrorCode(num)
		info, _ := proto.GetExtension(v.Descriptor().Values().ByNumber(v.Number()).Options(), trellisv1.E_Error).(*trellisv1.ErrorCodeInfo)
		if info == nil {
			continue
		}
		n++
		goName := enumGoName(v.String(), "ErrorCode")
		if !has(src, `\n\t`+goName+`\s+= `+regexp.QuoteMeta(strconv.Quote(info.GetCode()))) {
			t.Errorf("%s: no %s = %q", errcodeCodesPath, goName, info.GetCode())
		}
		if !has(src, `\n\t`+goName+`:\s+`+strconv.Itoa(int(info.GetNumeric()))+`,`) {
			t.Errorf("%s: %s does not map to numeric %d", errcodeCodesPath, info.GetCode(), info.GetNumeric())
		}
		if g := info.GetGrpc(); !isGRPCCodeName(g) || !has(src, `\n\t`+goName+`:\s+rpccode\.Code_`+g+`,`) {
			t.Errorf("%s: %s does not map to gRPC %s", errcodeCodesPath, info.GetCode(), g)
		}
	}
	if n < 20 {
		t.Fatalf("found %d error codes with an (error) option, want every one of errors.proto", n)
	}
	kinds := string(files[eventKindsGoPath])
	payload := (&trellisv1.SessionEvent{}).ProtoReflect().Descriptor().Oneofs().ByName("payload").Fields()
	for i := 0; i < payload.Len(); i++ {
		kind := proto.GetExtension(payload.Get(i).Options(), trellisv1.E_EventKind).(string)
		if !has(kinds, `\s= `+regexp.QuoteMeta(strconv.Quote(kind))+`\n`) {
			t.Errorf("%s: no constant for %q", eventKindsGoPath, kind)
		}
	}
}

func TestEnumGoName(t *testing.T) {
	for in, want := range map[string]string{
		"ERROR_CODE_INVALID_PARAMS":              "InvalidParams",
		"ERROR_CODE_SEARCH_PROVIDER_UNAVAILABLE": "SearchProviderUnavailable",
		"ERROR_CODE_NOT_FOUND":                   "NotFound",
	} {
		if got := enumGoName(in, "ErrorCode"); got != want {
			t.Errorf("enumGoName(%s) = %s, want %s", in, got, want)
		}
	}
}

// TestPayloadGoNames: a payload field's Go name is its JSON name with Go's
// initialisms (as the hand-written payload types had them), and a (one_of)
// value is a word of a constant's name.
func TestPayloadGoNames(t *testing.T) {
	for in, want := range map[string]string{
		"turnId": "TurnID", "ok": "OK", "id": "ID", "inputTokens": "InputTokens", "summaryChars": "SummaryChars", "sessionId": "SessionID",
	} {
		if got := goFieldName(in); got != want {
			t.Errorf("goFieldName(%s) = %s, want %s", in, got, want)
		}
	}
	for in, want := range map[string]string{"tool_use": "ToolUse", "stop": "Stop", "team.task": "TeamTask"} {
		if got := goConstWord(in); got != want {
			t.Errorf("goConstWord(%s) = %s, want %s", in, got, want)
		}
	}
	src := string(run(t, registryRequest(t))[eventPayloadsPath])
	for _, pattern := range []string{
		`\n\tPrincipal \*PrincipalRef\s+` + "`" + `json:"principal,omitempty"` + "`", // (omit_unset)
		`\n\tError\s+\*string\s+` + "`" + `json:"error"` + "`",                       // optional: null
		`\n\tArgs\s+json\.RawMessage\s+` + "`" + `json:"args"` + "`",                 // google.protobuf.Struct
		`\n\tTurnDoneReasonComplete\s+= "complete"\n`,
		`\n\tStepDoneStopReasonToolUse\s+= "tool_use"\n`,
	} {
		if !has(src, pattern) {
			t.Errorf("%s: nothing matches %s", eventPayloadsPath, pattern)
		}
	}
}

func has(src, pattern string) bool { return regexp.MustCompile(pattern).MatchString(src) }

// TestGRPCStreamsDocumented: every streaming RPC (gRPC only, no JSON-RPC
// method) is in protocol.md's gRPC streams section, and the messages it
// carries are shown there unless the Types section shows them, each link
// of the section pointing at a heading.
func TestGRPCStreamsDocumented(t *testing.T) {
	doc := string(run(t, registryRequest(t))[docsPath])
	start := strings.Index(doc, "\n## gRPC streams\n")
	end := strings.Index(doc, "\n## Types\n")
	if start < 0 || end < start {
		t.Fatalf("protocol.md has no gRPC streams section before Types")
	}
	section := doc[start:end]
	for _, want := range []string{
		"#### `/trellis.v1.ApprovalService/Attach`",
		"A bidirectional stream: the client sends [AttachRequest](#attachrequest-grpc)",
		"#### `/trellis.v1.ApprovalService/WatchQueue`",
		"#### `/trellis.v1.SessionService/Subscribe`",
		"#### AttachDetach (gRPC)",
		"| `detach` | [AttachDetach](#attachdetach-grpc) | oneof `msg`.",
		"| `originId` | string |",
		"| `request` | [ApprovalRequest](#approvalrequest) |", // a Types entry: linked, not repeated
	} {
		if !strings.Contains(section, want) {
			t.Errorf("gRPC streams section lacks %q", want)
		}
	}
	if strings.Contains(section, "#### ApprovalRequest (gRPC)") {
		t.Error("ApprovalRequest, shown under Types, is repeated in the gRPC streams section")
	}
	anchors := map[string]bool{}
	for _, line := range strings.Split(doc, "\n") {
		if h, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " "); ok && strings.HasPrefix(line, "#") {
			anchors[slug(h)] = true
		}
	}
	for _, m := range regexp.MustCompile(`\]\(#([^)]+)\)`).FindAllStringSubmatch(section, -1) {
		if !anchors[m[1]] {
			t.Errorf("gRPC streams section links to #%s, which is no heading", m[1])
		}
	}
}

// TestGRPCOnlyAndPageFields: a (grpc_only) field is in no schema (params
// refuse it: additionalProperties false), and a field of a (json_array_of)
// message (EventPage) is the array of that message, as codec.Marshal
// renders it: session.resume's schema is the one of typed events.
func TestGRPCOnlyAndPageFields(t *testing.T) {
	files := run(t, registryRequest(t))
	var doc struct {
		Methods map[string]struct {
			Params, Result struct {
				Properties           map[string]json.RawMessage `json:"properties"`
				AdditionalProperties *bool                      `json:"additionalProperties"`
			}
		} `json:"methods"`
	}
	if err := json.Unmarshal(files[protocolJSONPath], &doc); err != nil {
		t.Fatal(err)
	}
	m := doc.Methods["session.resume"]
	if _, ok := m.Params.Properties["typed"]; ok || m.Params.AdditionalProperties == nil || *m.Params.AdditionalProperties {
		t.Errorf("session.resume params show the gRPC-only typed, or take any property: %v", m.Params.Properties)
	}
	if _, ok := m.Result.Properties["typedEvents"]; ok {
		t.Errorf("session.resume result shows the gRPC-only typedEvents")
	}
	var events struct {
		Type  string `json:"type"`
		Items struct {
			Ref string `json:"$ref"`
		} `json:"items"`
	}
	if err := json.Unmarshal(m.Result.Properties["events"], &events); err != nil || events.Type != "array" || events.Items.Ref != "#/$defs/SessionEvent" {
		t.Errorf("session.resume events: %s, want an array of SessionEvent", m.Result.Properties["events"])
	}
	if strings.Contains(string(files[typescriptPath]), "typedEvents") || strings.Contains(string(files[typescriptPath]), "EventPage") {
		t.Errorf("the TypeScript types show a gRPC-only field or the EventPage message")
	}
}
