package auth

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/runtime/store/sqlite"
)

func TestAuthenticate(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), sqlite.FileName))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	a := &Authenticator{Token: "the-daemon-token-0123456789abcdefghijkl", Store: st, Now: func() time.Time { return now }}
	if err := st.CreatePrincipal(ctx, store.Principal{ID: "p-1", Name: "ann", Kind: store.PrincipalHuman, Role: store.RoleMember, CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	newKey := func(id string, expires, revoked time.Time) string {
		secret, hash, display, err := NewKey()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(secret, KeyPrefix) || !strings.HasPrefix(secret, display) || len(display) >= len(secret)/2 {
			t.Fatalf("key %q shows %q", secret, display)
		}
		if err := st.CreateKey(ctx, store.APIKey{ID: id, PrincipalID: "p-1", Hash: hash, Prefix: display, CreatedAt: now, ExpiresAt: expires, RevokedAt: revoked}); err != nil {
			t.Fatal(err)
		}
		return secret
	}
	live := newKey("k-live", now.Add(time.Hour), time.Time{})
	expired := newKey("k-expired", now, time.Time{})
	revoked := newKey("k-revoked", time.Time{}, now.Add(-time.Minute))

	p, err := a.Authenticate(ctx, a.Token)
	if err != nil || !p.Builtin || p.Role != store.RoleAdmin {
		t.Fatalf("token: %+v %v", p, err)
	}
	p, err = a.Authenticate(ctx, live)
	if err != nil || p.ID != "p-1" || p.Role != store.RoleMember || p.KeyID != "k-live" || p.Builtin {
		t.Fatalf("live key: %+v %v", p, err)
	}
	unknown, _, _, _ := NewKey()
	for name, tc := range map[string]struct{ cred, want string }{
		"expired":     {expired, "expired"},
		"revoked":     {revoked, "revoked"},
		"unknown":     {unknown, "unknown API key"},
		"malformed":   {KeyPrefix + "short", "bad token"},
		"empty":       {"", "bad token"},
		"not a token": {"hello", "bad token"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := a.Authenticate(ctx, tc.cred)
			if errs.CodeOf(err) != errcode.Unauthorized || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%s: %v (code %s), want unauthorized saying %q", name, err, errs.CodeOf(err), tc.want)
			}
		})
	}
}

func TestAllows(t *testing.T) {
	for _, c := range []struct {
		role, min string
		want      bool
	}{
		{"admin", "admin", true}, {"operator", "admin", false}, {"operator", "member", true},
		{"member", "operator", false}, {"member", "approver", true}, {"approver", "member", false},
		{"approver", "viewer", true}, {"viewer", "approver", false}, {"viewer", "viewer", true},
		{"root", "viewer", false}, {"admin", "superuser", false}, {"", "viewer", false},
	} {
		if got := Allows(c.role, c.min); got != c.want {
			t.Errorf("Allows(%q, %q) = %v, want %v", c.role, c.min, got, c.want)
		}
	}
}

// TestOwnerMayAct: the daemon token always may; a stored owner while it
// exists with the least role; a demoted or deleted one is forbidden,
// named in the message.
func TestOwnerMayAct(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	a := &Authenticator{Store: st}
	for _, p := range []store.Principal{
		{ID: "p-ann", Name: "ann", Role: store.RoleMember},
		{ID: "p-vic", Name: "vic", Role: store.RoleViewer},
		{ID: "p-gone", Name: "gone", Role: store.RoleMember},
	} {
		p.Kind, p.CreatedAt = store.PrincipalHuman, time.Now().UTC()
		if err := st.CreatePrincipal(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.DeletePrincipal(ctx, "p-gone"); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		owner, minRole, want, says string
	}{
		{"", store.RoleOperator, "", ""},
		{BuiltinID, store.RoleAdmin, "", ""},
		{"p-ann", store.RoleMember, "", ""},
		{"p-ann", store.RoleOperator, errcode.Forbidden, "ann, whose role is now member"},
		{"p-vic", store.RoleMember, errcode.Forbidden, "vic, whose role is now viewer"},
		{"p-gone", store.RoleMember, errcode.Forbidden, "p-gone, which was deleted"},
	} {
		err := a.OwnerMayAct(ctx, tt.owner, "job j-1", tt.minRole)
		if errs.CodeOf(err) != tt.want || (err != nil && !strings.Contains(err.Error(), tt.says)) {
			t.Errorf("OwnerMayAct(%q, %s): %v, want %q saying %q", tt.owner, tt.minRole, err, tt.want, tt.says)
		}
	}
}

func TestWithin(t *testing.T) {
	for _, tt := range []struct {
		path, prefix string
		want         bool
	}{
		{"/srv/a", "/srv/a", true},
		{"/srv/a/x", "/srv/a", true},
		{"/srv/a/x/y", "/srv/a", true},
		{"/srv/a/", "/srv/a", true},
		{"/srv/a/x", "/srv/a/", true},
		{"/srv/ab", "/srv/a", false},
		{"/srv", "/srv/a", false},
		{"/srv/a/../b", "/srv/a", false},
		{"/srv/a/./x", "/srv/a", true},
		{"/anything", "/", true},
		{"/", "/", true},
		{"srv/a", "/srv/a", false},
		{"srv/a/x", "srv/a", false},
		{"/other/srv/a", "/srv/a", false},
	} {
		if got := Within(tt.path, tt.prefix); got != tt.want {
			t.Errorf("Within(%q, %q) = %v, want %v", tt.path, tt.prefix, got, tt.want)
		}
	}
}

func TestMayRun(t *testing.T) {
	root := t.TempDir()
	if real, err := filepath.EvalSymlinks(root); err == nil {
		root = real
	}
	allowed := filepath.Join(root, "srv", "a")
	for _, d := range []string{filepath.Join(allowed, "x"), filepath.Join(root, "srv", "ab"), filepath.Join(root, "outside")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	// A link inside the allowed directory that leads out of it, and one
	// outside that leads in.
	if err := os.Symlink(filepath.Join(root, "outside"), filepath.Join(allowed, "escape")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(allowed, "x"), filepath.Join(root, "inward")); err != nil {
		t.Fatal(err)
	}
	// A prefix given through a link: it allows where the link leads.
	if err := os.Symlink(allowed, filepath.Join(root, "alias")); err != nil {
		t.Fatal(err)
	}
	viaLink := Principal{Name: "svc", Workdirs: []string{filepath.Join(root, "alias")}}
	svc := Principal{Name: "svc", Agents: []string{"a1", DefaultAgent}, Workdirs: []string{allowed}}
	onlyA1 := Principal{Name: "svc", Agents: []string{"a1"}}
	for _, tt := range []struct {
		p             Principal
		agent, wd     string
		want, mention string
	}{
		{Principal{Name: "free"}, "any", "/anywhere", "", ""},
		{svc, "a1", allowed, "", ""},
		{svc, "a1", filepath.Join(allowed, "x"), "", ""},
		{svc, "a1", filepath.Join(allowed, "x", "..", "x"), "", ""},
		{svc, "", allowed, "", ""}, // the default agent, allowed by name
		{svc, "a1", filepath.Join(allowed, "missing"), "", ""},
		{svc, "a1", filepath.Join(root, "inward"), "", ""},
		{viaLink, "a1", filepath.Join(allowed, "x"), "", ""},
		{viaLink, "a1", filepath.Join(root, "alias", "x"), "", ""},
		{viaLink, "a1", filepath.Join(root, "srv", "ab"), errcode.Forbidden, "only the workdirs " + filepath.Join(root, "alias")},
		{svc, "a2", allowed, errcode.Forbidden, `only the agents a1, default, not "a2"`},
		{onlyA1, "", "/anywhere", errcode.Forbidden, `not "default"`},
		{svc, "a1", filepath.Join(root, "srv", "ab"), errcode.Forbidden, "not " + filepath.Join(root, "srv", "ab")},
		{svc, "a1", filepath.Join(root, "srv"), errcode.Forbidden, "only the workdirs " + allowed},
		{svc, "a1", filepath.Join(allowed, "..", "..", "outside"), errcode.Forbidden, "not " + filepath.Join(root, "outside")},
		{svc, "a1", filepath.Join(allowed, "escape"), errcode.Forbidden, "not " + filepath.Join(root, "outside")},
		{svc, "a1", filepath.Join(allowed, "escape", "deeper"), errcode.Forbidden, "not " + filepath.Join(root, "outside", "deeper")},
	} {
		err := tt.p.MayRun(tt.agent, tt.wd)
		if errs.CodeOf(err) != tt.want || (err != nil && !strings.Contains(err.Error(), tt.mention)) {
			t.Errorf("%v MayRun(%q, %q) = %v, want %q mentioning %q", tt.p.Agents, tt.agent, tt.wd, err, tt.want, tt.mention)
		}
	}
}

func TestOwnerMayRun(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	a := &Authenticator{Store: st}
	svc := store.Principal{ID: "p-svc", Name: "svc", Kind: store.PrincipalService, Role: store.RoleMember, CreatedAt: time.Now().UTC(),
		Agents: []string{"a1"}, Workdirs: []string{"/srv/a"}}
	if err := st.CreatePrincipal(ctx, svc); err != nil {
		t.Fatal(err)
	}
	if err := a.OwnerMayRun(ctx, "p-svc", "a1", "/srv/a/x"); err != nil {
		t.Fatalf("within its limits: %v", err)
	}
	err := a.OwnerMayRun(ctx, "p-svc", "a1", "/srv/ab")
	if !errs.Is(err, errcode.Forbidden) || !strings.Contains(err.Error(), "principal svc may use only the workdirs /srv/a") {
		t.Fatalf("outside its workdirs: %v", err)
	}
	if err := a.OwnerMayRun(ctx, "", "x", "/"); err != nil {
		t.Fatalf("the daemon token's session: %v", err)
	}
	if err := a.OwnerMayRun(ctx, "p-gone", "a1", "/srv/a"); !errs.Is(err, errcode.Forbidden) {
		t.Fatalf("a deleted owner: %v", err)
	}
}

// openStore opens a SQLite store of the test's own.
func openStore(t *testing.T) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), sqlite.FileName))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}
