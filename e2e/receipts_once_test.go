package e2e

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/trellis-run/trellis/daemon"
	"github.com/trellis-run/trellis/protocol/errcode"
)

// TestKeyCreateReceiptIsSealed: a repeat of key.create with its operation
// id answers the key it made, secret included, without making another; the
// store never holds the secret readable; a repeat made with another key of
// the same principal is refused, and makes no key either.
func TestKeyCreateReceiptIsSealed(t *testing.T) {
	d := startDaemon(t)
	admin := dialGRPC(t, d)
	opsID, adminKey := makePrincipal(t, admin, "ops", "admin")
	_, otherKey := makePrincipal(t, admin, "ops2", "admin")
	var second struct {
		Secret string `json:"secret"`
	}
	if err := admin.Call(context.Background(), "key.create", map[string]any{"principalId": opsID, "name": "second"}, &second); err != nil {
		t.Fatal(err)
	}
	target, _ := makePrincipal(t, admin, "ci", "member")

	type created struct {
		Key struct {
			KeyID string `json:"keyId"`
		} `json:"key"`
		Secret string `json:"secret"`
	}
	for name, call := range map[string]opCaller{
		"ws": func(method string, params map[string]any, op string, result any) *errcode.Error {
			ws, _ := helloWSKey(t, d, adminKey)
			params["operationId"] = op
			return ws.Call(context.Background(), method, params, result)
		},
		"rest": func(method string, params map[string]any, op string, result any) *errcode.Error {
			return restOp(d.HTTPPort(), adminKey, method, params, op, result)
		},
	} {
		t.Run(name, func(t *testing.T) {
			before := len(keysOf(t, admin, target))
			op := "new-key-" + name
			var k1, k2 created
			if err := call("key.create", map[string]any{"principalId": target, "name": name}, op, &k1); err != nil {
				t.Fatal(err)
			}
			if err := call("key.create", map[string]any{"principalId": target, "name": name}, op, &k2); err != nil {
				t.Fatal(err)
			}
			if k1.Secret == "" || k2.Secret != k1.Secret || k2.Key.KeyID != k1.Key.KeyID {
				t.Fatalf("the repeat answered key %s, the first %s (same secret: %v)", k2.Key.KeyID, k1.Key.KeyID, k2.Secret == k1.Secret)
			}
			if n := len(keysOf(t, admin, target)) - before; n != 1 {
				t.Fatalf("%d keys made by a key.create and its repeat, want 1", n)
			}
			assertNotInHome(t, d, k1.Secret)
			// The same principal with another of its keys: refused.
			err := restOp(d.HTTPPort(), second.Secret, "key.create", map[string]any{"principalId": target, "name": name}, op, nil)
			wantCode(t, err, errcode.InvalidParams, "credential")
			if n := len(keysOf(t, admin, target)) - before; n != 1 {
				t.Fatalf("%d keys after the refused repeat, want 1", n)
			}
		})
	}
	// Another principal's call with the same id is its own operation.
	var k created
	if err := restOp(d.HTTPPort(), otherKey, "key.create", map[string]any{"principalId": target, "name": "rest"}, "new-key-rest", &k); err != nil || k.Secret == "" {
		t.Fatalf("another principal's key.create with the same operation id: %v %+v", err, k)
	}
}

// keysOf lists the key ids of a principal.
func keysOf(t *testing.T, c client, principal string) []string {
	t.Helper()
	var r struct {
		Keys []struct {
			KeyID string `json:"keyId"`
		} `json:"keys"`
	}
	if err := c.Call(context.Background(), "key.list", map[string]any{"principalId": principal}, &r); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, k := range r.Keys {
		ids = append(ids, k.KeyID)
	}
	return ids
}

// assertNotInHome fails if secret is in any file of the daemon's home (the
// database and its write-ahead log included).
func assertNotInHome(t *testing.T, d *daemon.Daemon, secret string) {
	t.Helper()
	err := filepath.WalkDir(d.Home(), func(path string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte(secret)) {
			t.Errorf("the key's secret is readable in %s", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
