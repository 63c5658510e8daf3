package rpc

import (
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	_ "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/runtime/store"
)

// TestEveryRPCHasAnAuthzRow: every RPC of every trellis.v1 service has a
// row naming a real role, and the table names no RPC that does not exist.
// A new RPC without an (access) option fails generation; one whose
// generated table was not committed fails here.
func TestEveryRPCHasAnAuthzRow(t *testing.T) {
	seen := map[string]bool{}
	protoregistry.GlobalFiles.RangeFilesByPackage("trellis.v1", func(fd protoreflect.FileDescriptor) bool {
		for i := 0; i < fd.Services().Len(); i++ {
			sd := fd.Services().Get(i)
			for j := 0; j < sd.Methods().Len(); j++ {
				full := "/" + string(sd.FullName()) + "/" + string(sd.Methods().Get(j).Name())
				seen[full] = true
				role, _, ok := Access(full)
				switch {
				case !ok:
					t.Errorf("%s has no row in the authorization table: give it an (access) option and run buf generate", full)
				case !store.ValidRole(role):
					t.Errorf("%s: least role %q is not a role", full, role)
				}
			}
		}
		return true
	})
	if len(seen) < 60 {
		t.Fatalf("found only %d RPCs: are the trellis.v1 files linked?", len(seen))
	}
	for full := range authzTable {
		if !seen[full] {
			t.Errorf("the authorization table names %s, which no service has", full)
		}
	}
}
