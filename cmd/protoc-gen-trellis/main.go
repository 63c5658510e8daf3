package main

import (
	"errors"
	"flag"

	"google.golang.org/protobuf/compiler/protogen"
	"google.golang.org/protobuf/types/pluginpb"
)

// flags are the plugin's options (buf.gen.yaml opt):
//
//	http=proto/trellis/v1/http.yaml  the grpc-gateway HTTP rules, for the OpenAPI document
var (
	flags     flag.FlagSet
	httpRules = flags.String("http", "", "path of the grpc-gateway HTTP rules (google.api.Service YAML)")
)

func main() {
	protogen.Options{ParamFunc: flags.Set}.Run(generate)
}

// Output paths, relative to the plugin's `out` directory (the repository root).
const (
	methodsGoPath    = "facade/methods/methods.gen.go"
	protocolJSONPath = "facade/methods/protocol.json"
	docsPath         = "docs/protocol.md"
	rolesDocPath     = "docs/roles.md"
	typescriptPath   = "sdk/src/protocol.ts"
	openAPIPath      = "facade/methods/openapi.json"

	methodsImportPath = protogen.GoImportPath("github.com/trellis-run/trellis/facade/methods")
)

// generate builds the protocol model from the request and writes every output.
func generate(gen *protogen.Plugin) error {
	gen.SupportedFeatures = uint64(pluginpb.CodeGeneratorResponse_FEATURE_PROTO3_OPTIONAL)

	p, err := buildProtocol(gen)
	if err != nil {
		return err
	}
	genMethodsGo(gen.NewGeneratedFile(methodsGoPath, methodsImportPath), p)
	genErrcodeGo(gen.NewGeneratedFile(errcodeCodesPath, "github.com/trellis-run/trellis/protocol/errcode"), p)
	genEventKindsGo(gen.NewGeneratedFile(eventKindsGoPath, "github.com/trellis-run/trellis/proto/trellis/v1/eventkind"), p)
	genAuthzGo(gen.NewGeneratedFile(rpcAuthzPath, "github.com/trellis-run/trellis/runtime/rpc"), p)
	genClientGo(gen.NewGeneratedFile(clientCallsPath, "github.com/trellis-run/trellis/client"), p)
	if err := genPayloadsGo(gen.NewGeneratedFile(eventPayloadsPath, "github.com/trellis-run/trellis/protocol/events"), p); err != nil {
		return err
	}

	doc, err := protocolJSON(p)
	if err != nil {
		return err
	}
	if _, err := gen.NewGeneratedFile(protocolJSONPath, "").Write(doc); err != nil {
		return err
	}
	if _, err := gen.NewGeneratedFile(docsPath, "").Write(markdown(p)); err != nil {
		return err
	}
	if _, err := gen.NewGeneratedFile(rolesDocPath, "").Write(rolesMarkdown(p)); err != nil {
		return err
	}
	if _, err := gen.NewGeneratedFile(typescriptPath, "").Write(typescript(p)); err != nil {
		return err
	}
	if *httpRules == "" {
		return errors.New("protoc-gen-trellis: set opt http=<path of the grpc-gateway HTTP rules> (proto/trellis/v1/http.yaml)")
	}
	rules, err := readHTTPRules(*httpRules)
	if err != nil {
		return err
	}
	api, err := openAPI(p, rules)
	if err != nil {
		return err
	}
	if _, err := gen.NewGeneratedFile(openAPIPath, "").Write(api); err != nil {
		return err
	}
	return nil
}
