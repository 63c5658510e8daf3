package conformance

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/trellis-run/trellis/runtime/store"
)

func principal(id, name, role string, created int) store.Principal {
	return store.Principal{ID: id, Name: name, Kind: store.PrincipalHuman, Role: role, CreatedAt: at(created)}
}

func keyOf(id, principalID, secret string, created int) store.APIKey {
	h := sha256.Sum256([]byte(secret))
	return store.APIKey{ID: id, PrincipalID: principalID, Name: "label " + id, Hash: h[:], Prefix: secret[:4], CreatedAt: at(created)}
}

func testPrincipals(t *testing.T, st store.Store) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		p    store.Principal
	}{
		{"empty id", principal("", "ann", store.RoleViewer, 0)},
		{"empty name", principal("p-1", " ", store.RoleViewer, 0)},
		{"unknown role", principal("p-1", "ann", "superuser", 0)},
		{"unknown kind", store.Principal{ID: "p-1", Name: "ann", Kind: "robot", Role: store.RoleViewer}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantErr(t, st.CreatePrincipal(ctx, tc.p), store.ErrInvalid)
		})
	}
	if ps, err := st.ListPrincipals(ctx); err != nil || len(ps) != 0 {
		t.Fatalf("after refused creates: %v %v, want none", ps, err)
	}
	bob := principal("p-bob", "bob", store.RoleMember, 1)
	bob.Kind = store.PrincipalService
	must(t, st.CreatePrincipal(ctx, principal("p-ann", "ann", store.RoleAdmin, 0)))
	must(t, st.CreatePrincipal(ctx, bob))
	wantErr(t, st.CreatePrincipal(ctx, principal("p-ann", "other", store.RoleViewer, 2)), store.ErrConflict)
	wantErr(t, st.CreatePrincipal(ctx, principal("p-x", "bob", store.RoleViewer, 2)), store.ErrConflict)

	got, err := st.GetPrincipal(ctx, "p-bob")
	must(t, err)
	if !reflect.DeepEqual(got, bob) || got.CreatedAt.Location() != time.UTC {
		t.Errorf("GetPrincipal = %+v, want %+v", got, bob)
	}
	_, err = st.GetPrincipal(ctx, "p-none")
	wantErr(t, err, store.ErrNotFound)
	ps, err := st.ListPrincipals(ctx)
	must(t, err)
	if len(ps) != 2 || ps[0].Name != "ann" || ps[1].Name != "bob" {
		t.Fatalf("ListPrincipals = %+v, want ann, bob", ps)
	}

	// Updates: rename, role change, refusals that change nothing.
	up, err := st.UpdatePrincipal(ctx, "p-bob", store.PrincipalUpdate{Name: ptr("robert"), Role: ptr(store.RoleOperator)})
	must(t, err)
	if up.Name != "robert" || up.Role != store.RoleOperator || up.Kind != store.PrincipalService {
		t.Errorf("UpdatePrincipal = %+v", up)
	}
	_, err = st.UpdatePrincipal(ctx, "p-bob", store.PrincipalUpdate{Name: ptr("ann")})
	wantErr(t, err, store.ErrConflict)
	_, err = st.UpdatePrincipal(ctx, "p-bob", store.PrincipalUpdate{Role: ptr("root")})
	wantErr(t, err, store.ErrInvalid)
	_, err = st.UpdatePrincipal(ctx, "p-none", store.PrincipalUpdate{Role: ptr(store.RoleViewer)})
	wantErr(t, err, store.ErrNotFound)

	// The last admin can be neither demoted nor deleted.
	_, err = st.UpdatePrincipal(ctx, "p-ann", store.PrincipalUpdate{Role: ptr(store.RoleViewer)})
	wantErr(t, err, store.ErrLastAdmin)
	wantErr(t, st.DeletePrincipal(ctx, "p-ann"), store.ErrLastAdmin)
	if p, _ := st.GetPrincipal(ctx, "p-ann"); p.Role != store.RoleAdmin {
		t.Fatalf("refused demotion changed the role: %+v", p)
	}
	// With a second admin, the first can go.
	_, err = st.UpdatePrincipal(ctx, "p-bob", store.PrincipalUpdate{Role: ptr(store.RoleAdmin)})
	must(t, err)
	_, err = st.UpdatePrincipal(ctx, "p-ann", store.PrincipalUpdate{Role: ptr(store.RoleViewer)})
	must(t, err)
	wantErr(t, st.DeletePrincipal(ctx, "p-bob"), store.ErrLastAdmin)
	must(t, st.DeletePrincipal(ctx, "p-ann"))
	wantErr(t, st.DeletePrincipal(ctx, "p-ann"), store.ErrNotFound)
}

// testPrincipalLimits: a service principal's agents and workdirs round-trip
// through create, get, list, key lookup and update; bad limits are refused
// and change nothing.
func testPrincipalLimits(t *testing.T, st store.Store) {
	ctx := context.Background()
	svc := principal("p-svc", "svc", store.RoleMember, 0)
	svc.Kind = store.PrincipalService
	for _, tc := range []struct {
		name             string
		kind             string
		agents, workdirs []string
	}{
		{"human with limits", store.PrincipalHuman, []string{"a1"}, nil},
		{"empty agent", store.PrincipalService, []string{"a1", " "}, nil},
		{"relative workdir", store.PrincipalService, nil, []string{"srv/a"}},
		{"unclean workdir", store.PrincipalService, nil, []string{"/srv/a/"}},
		{"too many agents", store.PrincipalService, make([]string, store.MaxPrincipalLimits+1), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := svc
			p.Kind, p.Agents, p.Workdirs = tc.kind, tc.agents, tc.workdirs
			wantErr(t, st.CreatePrincipal(ctx, p), store.ErrInvalid)
		})
	}
	// Lists come back as written, whatever their items hold (a backend
	// may keep them in a syntax of its own: JSON, PostgreSQL's arrays).
	svc.Agents, svc.Workdirs = []string{"a1", `a2,"NULL"`}, []string{"/srv/a", `/tmp/b c,{"d"}\e`}
	must(t, st.CreatePrincipal(ctx, svc))
	must(t, st.CreatePrincipal(ctx, principal("p-hum", "hum", store.RoleMember, 0)))
	got, err := st.GetPrincipal(ctx, "p-svc")
	must(t, err)
	if !reflect.DeepEqual(got, svc) {
		t.Fatalf("GetPrincipal = %+v, want %+v", got, svc)
	}
	if ps, err := st.ListPrincipals(ctx); err != nil || len(ps) != 2 || !reflect.DeepEqual(ps[1], svc) {
		t.Fatalf("ListPrincipals = %+v %v, want hum then %+v", ps, err, svc)
	}
	if hum, err := st.GetPrincipal(ctx, "p-hum"); err != nil || hum.Agents != nil || hum.Workdirs != nil {
		t.Fatalf("a principal without limits = %+v %v, want nil lists", hum, err)
	}
	k := keyOf("k-svc", "p-svc", "secret-svc", 1)
	must(t, st.CreateKey(ctx, k))
	if _, p, err := st.KeyByHash(ctx, k.Hash); err != nil || !reflect.DeepEqual(p, svc) {
		t.Fatalf("KeyByHash principal = %+v %v, want %+v", p, err, svc)
	}

	// Nil leaves a list, a list replaces it, an empty list clears it.
	up, err := st.UpdatePrincipal(ctx, "p-svc", store.PrincipalUpdate{Role: ptr(store.RoleViewer)})
	must(t, err)
	if !reflect.DeepEqual(up.Agents, svc.Agents) || !reflect.DeepEqual(up.Workdirs, svc.Workdirs) {
		t.Fatalf("a role change changed the limits: %+v", up)
	}
	up, err = st.UpdatePrincipal(ctx, "p-svc", store.PrincipalUpdate{Agents: &[]string{"a3"}, Workdirs: &[]string{}})
	must(t, err)
	got, err = st.GetPrincipal(ctx, "p-svc")
	must(t, err)
	if !reflect.DeepEqual(got, up) || !reflect.DeepEqual(got.Agents, []string{"a3"}) || got.Workdirs != nil {
		t.Fatalf("after update: %+v (answered %+v), want agents [a3] and no workdirs", got, up)
	}
	// Refused updates change nothing.
	_, err = st.UpdatePrincipal(ctx, "p-svc", store.PrincipalUpdate{Workdirs: &[]string{"relative"}, Role: ptr(store.RoleMember)})
	wantErr(t, err, store.ErrInvalid)
	_, err = st.UpdatePrincipal(ctx, "p-hum", store.PrincipalUpdate{Agents: &[]string{"a1"}})
	wantErr(t, err, store.ErrInvalid)
	if p, _ := st.GetPrincipal(ctx, "p-svc"); p.Role != store.RoleViewer || p.Workdirs != nil {
		t.Fatalf("a refused update changed %+v", p)
	}
	if p, _ := st.GetPrincipal(ctx, "p-hum"); p.Agents != nil {
		t.Fatalf("a human was given limits: %+v", p)
	}
}

// testLastAdminRace: the only two admins deleted at once, each by a
// transaction of its own: exactly one delete may win, every round.
func testLastAdminRace(t *testing.T, st store.Store) {
	ctx := context.Background()
	survivor := "p-0"
	must(t, st.CreatePrincipal(ctx, principal(survivor, "admin-0", store.RoleAdmin, 0)))
	for round := 1; round <= 5; round++ {
		fresh := fmt.Sprintf("p-%d", round)
		must(t, st.CreatePrincipal(ctx, principal(fresh, "admin-"+fresh, store.RoleAdmin, round)))
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, id := range []string{survivor, fresh} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = st.DeletePrincipal(ctx, id)
			}()
		}
		wg.Wait()
		ok := 0
		for _, err := range errs {
			switch {
			case err == nil:
				ok++
			case !errors.Is(err, store.ErrLastAdmin):
				t.Fatalf("round %d: %v", round, err)
			}
		}
		ps, err := st.ListPrincipals(ctx)
		must(t, err)
		if ok != 1 || len(ps) != 1 || ps[0].Role != store.RoleAdmin {
			t.Fatalf("round %d: %d of 2 concurrent deletes of the last two admins succeeded (%v); left %+v", round, ok, errs, ps)
		}
		survivor = ps[0].ID
	}
}

func testKeys(t *testing.T, st store.Store) {
	ctx := context.Background()
	must(t, st.CreatePrincipal(ctx, principal("p-ann", "ann", store.RoleMember, 0)))
	must(t, st.CreatePrincipal(ctx, principal("p-bob", "bob", store.RoleViewer, 0)))

	bad := keyOf("k-bad", "p-ann", "secret-bad", 0)
	bad.Hash = bad.Hash[:4]
	wantErr(t, st.CreateKey(ctx, bad), store.ErrInvalid)
	wantErr(t, st.CreateKey(ctx, keyOf("", "p-ann", "secret-x", 0)), store.ErrInvalid)
	wantErr(t, st.CreateKey(ctx, keyOf("k-x", "p-none", "secret-x", 0)), store.ErrNotFound)

	k1 := keyOf("k-1", "p-ann", "secret-one", 1)
	k1.ExpiresAt = at(60)
	k1.RatePerSecond = 7
	k1.MaxRunningSessions = 3
	negative := keyOf("k-neg", "p-ann", "secret-neg", 1)
	negative.RatePerSecond = -1
	wantErr(t, st.CreateKey(ctx, negative), store.ErrInvalid)
	negative.RatePerSecond, negative.MaxRunningSessions = 0, -1
	wantErr(t, st.CreateKey(ctx, negative), store.ErrInvalid)
	k2 := keyOf("k-2", "p-bob", "secret-two", 2)
	k3 := keyOf("k-3", "p-ann", "secret-three", 3)
	for _, k := range []store.APIKey{k1, k2, k3} {
		must(t, st.CreateKey(ctx, k))
	}
	wantErr(t, st.CreateKey(ctx, keyOf("k-1", "p-ann", "secret-other", 4)), store.ErrConflict)
	wantErr(t, st.CreateKey(ctx, keyOf("k-4", "p-ann", "secret-one", 4)), store.ErrConflict)

	all, err := st.ListKeys(ctx, "")
	must(t, err)
	if ids := keyIDs(all); !reflect.DeepEqual(ids, []string{"k-1", "k-2", "k-3"}) {
		t.Fatalf("ListKeys(all) = %v", ids)
	}
	if !sameKey(all[0], k1) {
		t.Errorf("listed %+v, want %+v", all[0], k1)
	}
	anns, err := st.ListKeys(ctx, "p-ann")
	must(t, err)
	if ids := keyIDs(anns); !reflect.DeepEqual(ids, []string{"k-1", "k-3"}) {
		t.Fatalf("ListKeys(p-ann) = %v", ids)
	}

	h := sha256.Sum256([]byte("secret-two"))
	k, p, err := st.KeyByHash(ctx, h[:])
	must(t, err)
	if !sameKey(k, k2) || p.ID != "p-bob" || p.Role != store.RoleViewer || p.Name != "bob" {
		t.Errorf("KeyByHash = %+v %+v", k, p)
	}
	h = sha256.Sum256([]byte("no such secret"))
	_, _, err = st.KeyByHash(ctx, h[:])
	wantErr(t, err, store.ErrNotFound)

	// Revocation keeps its first time and is seen by KeyByHash.
	r, err := st.RevokeKey(ctx, "k-2", at(10))
	must(t, err)
	if !r.RevokedAt.Equal(at(10)) {
		t.Errorf("revoked at %v, want %v", r.RevokedAt, at(10))
	}
	r, err = st.RevokeKey(ctx, "k-2", at(20))
	must(t, err)
	if !r.RevokedAt.Equal(at(10)) {
		t.Errorf("second revocation moved the time to %v", r.RevokedAt)
	}
	h = sha256.Sum256([]byte("secret-two"))
	k, _, err = st.KeyByHash(ctx, h[:])
	must(t, err)
	if !k.RevokedAt.Equal(at(10)) {
		t.Errorf("KeyByHash of a revoked key: RevokedAt %v", k.RevokedAt)
	}
	_, err = st.RevokeKey(ctx, "k-none", at(10))
	wantErr(t, err, store.ErrNotFound)

	// Deleting a principal deletes its keys.
	must(t, st.DeletePrincipal(ctx, "p-ann"))
	all, err = st.ListKeys(ctx, "")
	must(t, err)
	if ids := keyIDs(all); !reflect.DeepEqual(ids, []string{"k-2"}) {
		t.Fatalf("after deleting p-ann: %v", ids)
	}
	h = sha256.Sum256([]byte("secret-one"))
	_, _, err = st.KeyByHash(ctx, h[:])
	wantErr(t, err, store.ErrNotFound)
}

func keyIDs(ks []store.APIKey) []string {
	return idsOf(ks, func(k store.APIKey) string { return k.ID })
}

// sameKey compares every field, times by instant (and in UTC).
func sameKey(got, want store.APIKey) bool {
	for _, tm := range []time.Time{got.CreatedAt, got.ExpiresAt, got.RevokedAt} {
		if !tm.IsZero() && tm.Location() != time.UTC {
			return false
		}
	}
	return got.ID == want.ID && got.PrincipalID == want.PrincipalID && got.Name == want.Name &&
		bytes.Equal(got.Hash, want.Hash) && got.Prefix == want.Prefix && got.CreatedAt.Equal(want.CreatedAt) &&
		got.ExpiresAt.Equal(want.ExpiresAt) && got.RevokedAt.Equal(want.RevokedAt) && got.RatePerSecond == want.RatePerSecond &&
		got.MaxRunningSessions == want.MaxRunningSessions
}

func testGrants(t *testing.T, st store.Store) {
	ctx := context.Background()
	must(t, st.CreatePrincipal(ctx, principal("p-ann", "ann", store.RoleMember, 0)))
	must(t, st.CreatePrincipal(ctx, principal("p-bob", "bob", store.RoleViewer, 0)))
	own := func(id, owner string, min int) {
		s := newSession(id, at(min))
		s.Owner = owner
		must(t, st.CreateSession(ctx, s))
	}
	own("s-ann", "p-ann", 0)
	own("s-bob", "p-bob", 1)
	own("s-daemon", "", 2)
	if s, err := st.GetSession(ctx, "s-ann"); err != nil || s.Owner != "p-ann" {
		t.Fatalf("owner of s-ann: %+v %v", s, err)
	}

	grant := func(sessionID, principalID, role string) store.Grant {
		return store.Grant{SessionID: sessionID, PrincipalID: principalID, Role: role, GrantedAt: at(5)}
	}
	wantErr(t, st.ShareSession(ctx, grant("s-ann", "p-bob", "owner")), store.ErrInvalid)
	wantErr(t, st.ShareSession(ctx, grant("s-none", "p-bob", store.GrantViewer)), store.ErrNotFound)
	wantErr(t, st.ShareSession(ctx, grant("s-ann", "p-none", store.GrantViewer)), store.ErrNotFound)
	_, err := st.SessionGrant(ctx, "s-ann", "p-bob")
	wantErr(t, err, store.ErrNotFound)

	visible := func(principalID string) []string {
		t.Helper()
		ss, err := st.ListSessions(ctx, store.SessionFilter{IncludeClosed: true, VisibleTo: principalID})
		must(t, err)
		ids := []string{}
		for _, s := range ss {
			ids = append(ids, s.SessionID)
		}
		return ids
	}
	if got := visible("p-bob"); !reflect.DeepEqual(got, []string{"s-bob"}) {
		t.Fatalf("bob sees %v before the share", got)
	}
	must(t, st.ShareSession(ctx, grant("s-ann", "p-bob", store.GrantViewer)))
	must(t, st.ShareSession(ctx, grant("s-ann", "p-bob", store.GrantController))) // replaces
	g, err := st.SessionGrant(ctx, "s-ann", "p-bob")
	must(t, err)
	if g.Role != store.GrantController || !g.GrantedAt.Equal(at(5)) || g.GrantedAt.Location() != time.UTC {
		t.Errorf("grant = %+v", g)
	}
	if got := visible("p-bob"); !reflect.DeepEqual(got, []string{"s-bob", "s-ann"}) {
		t.Fatalf("bob sees %v after the share, want s-bob, s-ann (newest first)", got)
	}
	if got := visible("p-ann"); !reflect.DeepEqual(got, []string{"s-ann"}) {
		t.Fatalf("ann sees %v", got)
	}
	if got := visible(""); len(got) != 3 {
		t.Fatalf("no filter: %v", got)
	}
	gs, err := st.ListGrants(ctx, "s-ann")
	must(t, err)
	if len(gs) != 1 || gs[0].PrincipalID != "p-bob" {
		t.Fatalf("ListGrants = %+v", gs)
	}

	// Unshare; grants go with their principal and with their session.
	must(t, st.UnshareSession(ctx, "s-ann", "p-bob"))
	wantErr(t, st.UnshareSession(ctx, "s-ann", "p-bob"), store.ErrNotFound)
	must(t, st.ShareSession(ctx, grant("s-ann", "p-bob", store.GrantViewer)))
	must(t, st.ShareSession(ctx, grant("s-daemon", "p-bob", store.GrantViewer)))
	must(t, st.DeletePrincipal(ctx, "p-bob"))
	gs, err = st.ListGrants(ctx, "s-ann")
	must(t, err)
	if len(gs) != 0 {
		t.Fatalf("grants of a deleted principal: %+v", gs)
	}
	must(t, st.CreatePrincipal(ctx, principal("p-cy", "cy", store.RoleViewer, 0)))
	must(t, st.ShareSession(ctx, grant("s-daemon", "p-cy", store.GrantViewer)))
	if _, err := st.DeleteSessions(ctx, store.Unfenced(), []string{"s-daemon"}); err != nil {
		t.Fatal(err)
	}
	_, err = st.SessionGrant(ctx, "s-daemon", "p-cy")
	wantErr(t, err, store.ErrNotFound)
}

func testSecurityEvents(t *testing.T, st store.Store) {
	ctx := context.Background()
	_, err := st.AppendSecurityEvent(ctx, store.SecurityEvent{Method: "key.create", Request: raw("{nope")})
	wantErr(t, err, store.ErrInvalid)
	var ids []int64
	for i, e := range []store.SecurityEvent{
		{At: at(0), PrincipalID: "p-ann", PrincipalName: "ann", Method: "key.create", Request: raw(`{"principalId":"p-bob"}`), Outcome: "ok"},
		{At: at(1), PrincipalID: "p-bob", PrincipalName: "bob", Method: "principal.delete", Request: raw(`{"principalId":"p-ann"}`), Outcome: "forbidden"},
		{At: at(2), PrincipalID: "p-ann", PrincipalName: "ann", Method: "key.revoke", Outcome: "ok"},
	} {
		id, err := st.AppendSecurityEvent(ctx, e)
		must(t, err)
		if i > 0 && id <= ids[i-1] {
			t.Fatalf("ids not rising: %v then %d", ids, id)
		}
		ids = append(ids, id)
	}
	list := func(f store.SecurityEventFilter) []store.SecurityEvent {
		t.Helper()
		es, err := st.ListSecurityEvents(ctx, f)
		must(t, err)
		return es
	}
	all := list(store.SecurityEventFilter{})
	if len(all) != 3 || all[0].ID != ids[2] || all[2].ID != ids[0] {
		t.Fatalf("all = %+v, want newest first", all)
	}
	e := all[1]
	if e.PrincipalName != "bob" || e.Method != "principal.delete" || e.Outcome != "forbidden" || !e.At.Equal(at(1)) ||
		e.At.Location() != time.UTC || !jsonEqual(e.Request, raw(`{"principalId":"p-ann"}`)) {
		t.Errorf("event = %+v", e)
	}
	if !jsonEqual(all[0].Request, raw(`{}`)) {
		t.Errorf("a nil request is stored as %s, want {}", all[0].Request)
	}
	if got := list(store.SecurityEventFilter{PrincipalID: "p-ann"}); len(got) != 2 || got[0].Method != "key.revoke" {
		t.Errorf("ann's = %+v", got)
	}
	if got := list(store.SecurityEventFilter{Method: "key.create"}); len(got) != 1 || got[0].ID != ids[0] {
		t.Errorf("key.create = %+v", got)
	}
	page := list(store.SecurityEventFilter{Limit: 2})
	if len(page) != 2 || page[1].ID != ids[1] {
		t.Fatalf("first page = %+v", page)
	}
	if next := list(store.SecurityEventFilter{Limit: 2, BeforeID: page[1].ID}); len(next) != 1 || next[0].ID != ids[0] {
		t.Errorf("second page = %+v", next)
	}
}
