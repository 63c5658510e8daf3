package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trellis-run/trellis/proto/trellis/v1/eventkind"
	"github.com/trellis-run/trellis/runtime/store"
)

// Run runs the whole suite, its cases in parallel. newStore must return a
// new, empty store each time it is called (it is called concurrently) and
// should arrange (t.Cleanup) for the store to be closed.
func Run(t *testing.T, newStore func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		run  func(t *testing.T, st store.Store)
	}{
		{"Session/RoundTrip", testSessionRoundTrip},
		{"Session/CreateErrors", testSessionCreateErrors},
		{"Session/List", testSessionList},
		{"Session/Update", testSessionUpdate},
		{"Session/LastSeq", testSessionLastSeq},
		{"Events/AppendRead", testEventsAppendRead},
		{"Events/Scan", testEventsScan},
		{"Events/FailingBatchWritesNothing", testEventsFailingBatch},
		{"Events/ConcurrentConflicts", testEventsConcurrentConflicts},
		{"Events/ReadWhileWriting", testEventsReadWhileWriting},
		{"History", testHistory},
		{"HistoryAt", testHistoryAt},
		{"DeleteSessions", testDeleteSessions},
		{"Usage", testSumUsage},
		{"UsageCost", testSumUsageCost},
		{"Allowlist", testAllowlist},
		{"Audit", testAudit},
		{"Settings", testSettings},
		{"Principals", testPrincipals},
		{"PrincipalLimits", testPrincipalLimits},
		{"Principals/LastAdminRace", testLastAdminRace},
		{"Principals/Keys", testKeys},
		{"Principals/Grants", testGrants},
		{"Principals/SecurityEvents", testSecurityEvents},
		{"Memory/Write", testMemoryWrite},
		{"Memory/Ranking", testMemoryRanking},
		{"Memory/NamespaceAndLimit", testMemoryNamespaceAndLimit},
		{"Memory/Queries", testMemoryQueries},
		{"Memory/ListAndDelete", testMemoryListAndDelete},
		{"Cluster/Daemons", testDaemons},
		{"Cluster/LeaseAcquire", testLeaseAcquire},
		{"Cluster/LeaseExpiryAndRenew", testLeaseExpiryAndRenew},
		{"Cluster/LeaseRace", testLeaseRace},
		{"Cluster/FencedAppend", testFencedAppend},
		{"Cluster/FencedWrites", testFencedWrites},
		{"Cluster/DeposedOwner", testDeposedOwner},
		{"Cluster/UpdateSetting", testUpdateSetting},
		{"Receipts", testReceipts},
		{"Receipts/Race", testReceiptRace},
		{"ProviderLimits/Slots", testProviderSlots},
		{"ProviderLimits/LeaseExpiry", testProviderLeaseExpiry},
		{"ProviderLimits/Allowance", testProviderAllowance},
		{"ProviderLimits/Hold", testProviderHold},
		{"ProviderLimits/GiveUp", testProviderGiveUp},
		{"Checkpoints/Blobs", testCheckpointBlobs},
		{"Checkpoints/RoundTrip", testCheckpointRoundTrip},
		{"Checkpoints/GoWithSession", testCheckpointsGoWithSession},
		{"Sessions/Archived", testArchived},
		{"Sessions/Import", testImportSession},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, newStore(t))
		})
	}
}

// t0 has millisecond precision, which every backend keeps exactly.
var t0 = time.Date(2025, 3, 1, 12, 0, 0, 123_000_000, time.UTC)

func at(min int) time.Time { return t0.Add(time.Duration(min) * time.Minute) }

func raw(s string) json.RawMessage { return json.RawMessage(s) }

func ptr[T any](v T) *T { return &v }

// jsonEqual compares JSON semantically (backends may normalise).
func jsonEqual(a, b json.RawMessage) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return bytes.Equal(a, b)
	}
	return reflect.DeepEqual(x, y)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantErr(t *testing.T, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error = %v, want errors.Is(%v)", err, target)
	}
}

func newSession(id string, created time.Time) store.Session {
	return store.Session{SessionID: id, Workdir: "/w", Mode: "accept", Kind: store.KindChat, CreatedAt: created}
}

func createSessions(t *testing.T, st store.Store, ids ...string) {
	t.Helper()
	for i, id := range ids {
		must(t, st.CreateSession(context.Background(), newSession(id, at(i))))
	}
}

// sameSession compares every field, JSON semantically and times by instant,
// and checks that times come back in UTC.
func sameSession(t *testing.T, got, want store.Session) {
	t.Helper()
	for _, tm := range []time.Time{got.CreatedAt, got.LastActivityAt} {
		if !tm.IsZero() && tm.Location() != time.UTC {
			t.Errorf("session %s: time %v not in UTC", got.SessionID, tm)
		}
	}
	if !jsonEqual(got.Backend, want.Backend) {
		t.Errorf("session %s: Backend = %s, want %s", got.SessionID, got.Backend, want.Backend)
	}
	if !got.CreatedAt.Equal(want.CreatedAt) || !got.LastActivityAt.Equal(want.LastActivityAt) {
		t.Errorf("session %s: times = %v/%v, want %v/%v", got.SessionID,
			got.CreatedAt, got.LastActivityAt, want.CreatedAt, want.LastActivityAt)
	}
	got.Backend, want.Backend = nil, nil
	got.CreatedAt, want.CreatedAt = time.Time{}, time.Time{}
	got.LastActivityAt, want.LastActivityAt = time.Time{}, time.Time{}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("session:\n got %+v\nwant %+v", got, want)
	}
}

func testSessionRoundTrip(t *testing.T, st store.Store) {
	ctx := context.Background()
	paris := time.FixedZone("CET", 3600)
	full := store.Session{
		SessionID: "s-full", Workdir: "/home/u/proj", Mode: "plan", Provider: "openai", Model: "gpt-x",
		Agent: "reviewer", Kind: store.KindSubagent, ParentSessionID: "s-parent", JobID: "j-1",
		Title: "Fix the bug", LastPrompt: "please fix", CreatedAt: t0.In(paris),
		LastActivityAt: at(5).In(paris), Closed: true,
		Backend: raw(`{"kind": "ssh", "host": "h", "port": 22}`), Owner: "p-owner", Workspace: store.WorkspaceManaged,
	}
	bare := store.Session{SessionID: "s-bare", Workdir: "/w", Mode: "accept", Kind: store.KindChat, CreatedAt: t0}
	for _, s := range []store.Session{full, bare} {
		t.Run(s.SessionID, func(t *testing.T) {
			must(t, st.CreateSession(ctx, s))
			got, err := st.GetSession(ctx, s.SessionID)
			must(t, err)
			sameSession(t, got, s)
			if got.Backend != nil && s.Backend == nil {
				t.Errorf("nil Backend came back as %s", got.Backend)
			}
			if !got.LastActivityAt.IsZero() && s.LastActivityAt.IsZero() {
				t.Errorf("zero LastActivityAt came back as %v", got.LastActivityAt)
			}
		})
	}
	_, err := st.GetSession(ctx, "s-unknown")
	wantErr(t, err, store.ErrNotFound)
}

func testSessionCreateErrors(t *testing.T, st store.Store) {
	ctx := context.Background()
	createSessions(t, st, "s-1")
	tests := []struct {
		name string
		s    store.Session
		want error
	}{
		{"duplicate id", newSession("s-1", at(9)), store.ErrConflict},
		{"empty id", newSession("", t0), store.ErrInvalid},
		{"unknown kind", store.Session{SessionID: "s-2", Kind: "batch", CreatedAt: t0}, store.ErrInvalid},
		{"empty kind", store.Session{SessionID: "s-3", CreatedAt: t0}, store.ErrInvalid},
		{"bad backend JSON", store.Session{SessionID: "s-4", Kind: store.KindChat, Backend: raw(`{`)}, store.ErrInvalid},
		{"unknown workspace", store.Session{SessionID: "s-5", Kind: store.KindChat, Workspace: "shared"}, store.ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wantErr(t, st.CreateSession(ctx, tc.s), tc.want)
		})
	}
	list, err := st.ListSessions(ctx, store.SessionFilter{IncludeClosed: true})
	must(t, err)
	if len(list) != 1 {
		t.Errorf("failed creates left %d sessions, want 1", len(list))
	}
}

func ids(ss []store.Session) []string {
	return idsOf(ss, func(s store.Session) string { return s.SessionID })
}

// idsOf lists id of every row, in order ([] for none).
func idsOf[T any](rows []T, id func(T) string) []string {
	out := []string{}
	for _, r := range rows {
		out = append(out, id(r))
	}
	return out
}

func testSessionList(t *testing.T, st store.Store) {
	ctx := context.Background()
	rows := []store.Session{
		{SessionID: "s-a", Workdir: "/one", Kind: store.KindChat, CreatedAt: at(1)},
		{SessionID: "s-b", Workdir: "/two", Kind: store.KindScheduled, CreatedAt: at(3), Closed: true},
		{SessionID: "s-c", Workdir: "/one", Kind: store.KindChat, CreatedAt: at(2)},
		{SessionID: "s-d", Workdir: "/one", Kind: store.KindChat, CreatedAt: at(4), Closed: true},
		{SessionID: "s-e", Workdir: "/two", Kind: store.KindSubagent, CreatedAt: at(0)},
	}
	for _, s := range rows {
		must(t, st.CreateSession(ctx, s))
	}
	tests := []struct {
		name string
		f    store.SessionFilter
		want []string
	}{
		{"open only", store.SessionFilter{}, []string{"s-c", "s-a", "s-e"}},
		{"include closed", store.SessionFilter{IncludeClosed: true}, []string{"s-d", "s-b", "s-c", "s-a", "s-e"}},
		{"workdir", store.SessionFilter{Workdir: "/one"}, []string{"s-c", "s-a"}},
		{"workdir include closed", store.SessionFilter{Workdir: "/one", IncludeClosed: true}, []string{"s-d", "s-c", "s-a"}},
		{"unknown workdir", store.SessionFilter{Workdir: "/none", IncludeClosed: true}, []string{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := st.ListSessions(ctx, tc.f)
			must(t, err)
			if !reflect.DeepEqual(ids(got), tc.want) {
				t.Errorf("ListSessions(%+v) = %v, want %v", tc.f, ids(got), tc.want)
			}
		})
	}
	got, err := st.ListSessions(ctx, store.SessionFilter{IncludeClosed: true})
	must(t, err)
	for _, s := range got {
		for _, r := range rows {
			if r.SessionID == s.SessionID {
				sameSession(t, s, r)
			}
		}
	}
}

func testSessionUpdate(t *testing.T, st store.Store) {
	ctx := context.Background()
	base := store.Session{SessionID: "s-u", Workdir: "/w", Mode: "accept", Provider: "fake", Model: "m1",
		Kind: store.KindChat, Title: "t", LastPrompt: "p", CreatedAt: t0, LastActivityAt: at(1),
		Backend: raw(`{"kind":"docker"}`)}
	tests := []struct {
		name   string
		u      store.SessionUpdate
		mutate func(s *store.Session)
	}{
		{"nothing", store.SessionUpdate{}, func(s *store.Session) {}},
		{"mode", store.SessionUpdate{Mode: ptr("auto")}, func(s *store.Session) { s.Mode = "auto" }},
		{"provider and model", store.SessionUpdate{Provider: ptr("anthropic"), Model: ptr("m2")},
			func(s *store.Session) { s.Provider, s.Model = "anthropic", "m2" }},
		{"title", store.SessionUpdate{Title: ptr("new title")}, func(s *store.Session) { s.Title = "new title" }},
		{"last prompt", store.SessionUpdate{LastPrompt: ptr("again")}, func(s *store.Session) { s.LastPrompt = "again" }},
		{"last activity", store.SessionUpdate{LastActivityAt: ptr(at(7))}, func(s *store.Session) { s.LastActivityAt = at(7) }},
		{"clear last activity", store.SessionUpdate{LastActivityAt: ptr(time.Time{})}, func(s *store.Session) { s.LastActivityAt = time.Time{} }},
		{"closed", store.SessionUpdate{Closed: ptr(true)}, func(s *store.Session) { s.Closed = true }},
		{"backend", store.SessionUpdate{Backend: ptr(raw(`{"kind":"ssh","host":"x"}`))},
			func(s *store.Session) { s.Backend = raw(`{"kind":"ssh","host":"x"}`) }},
		{"clear backend", store.SessionUpdate{Backend: ptr[json.RawMessage](nil)}, func(s *store.Session) { s.Backend = nil }},
		{"everything", store.SessionUpdate{Mode: ptr("plan"), Provider: ptr(""), Model: ptr(""), Title: ptr(""),
			LastPrompt: ptr(""), LastActivityAt: ptr(at(9)), Closed: ptr(false), Backend: ptr(raw(`null`))},
			func(s *store.Session) {
				s.Mode, s.Provider, s.Model, s.Title, s.LastPrompt, s.LastActivityAt, s.Backend = "plan", "", "", "", "", at(9), raw(`null`)
			}},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := base
			s.SessionID = fmt.Sprintf("s-u%d", i)
			must(t, st.CreateSession(ctx, s))
			must(t, st.UpdateSession(ctx, store.Unfenced(), s.SessionID, tc.u))
			tc.mutate(&s)
			got, err := st.GetSession(ctx, s.SessionID)
			must(t, err)
			sameSession(t, got, s)
		})
	}
	t.Run("unknown", func(t *testing.T) {
		wantErr(t, st.UpdateSession(ctx, store.Unfenced(), "s-none", store.SessionUpdate{Mode: ptr("plan")}), store.ErrNotFound)
		wantErr(t, st.UpdateSession(ctx, store.Unfenced(), "s-none", store.SessionUpdate{}), store.ErrNotFound)
	})
	t.Run("bad backend JSON", func(t *testing.T) {
		must(t, st.CreateSession(ctx, newSession("s-bad", t0)))
		wantErr(t, st.UpdateSession(ctx, store.Unfenced(), "s-bad", store.SessionUpdate{Backend: ptr(raw(`{x`))}), store.ErrInvalid)
	})
}

func testSessionLastSeq(t *testing.T, st store.Store) {
	ctx := context.Background()
	createSessions(t, st, "s-1", "s-2")
	must(t, st.AppendEvents(ctx, store.Unfenced(), []store.Event{ev("s-1", 1), ev("s-1", 2), ev("s-1", 3)}))
	got, err := st.GetSession(ctx, "s-1")
	must(t, err)
	if got.LastSeq != 3 {
		t.Errorf("GetSession LastSeq = %d, want 3", got.LastSeq)
	}
	list, err := st.ListSessions(ctx, store.SessionFilter{})
	must(t, err)
	want := map[string]int64{"s-1": 3, "s-2": 0}
	for _, s := range list {
		if s.LastSeq != want[s.SessionID] {
			t.Errorf("ListSessions %s LastSeq = %d, want %d", s.SessionID, s.LastSeq, want[s.SessionID])
		}
	}
}

func ev(sessionID string, seq int64) store.Event {
	return store.Event{SessionID: sessionID, Seq: seq, Kind: eventkind.MessageDelta,
		Payload: raw(fmt.Sprintf(`{"text":"%s #%d"}`, sessionID, seq)), TS: t0.Add(time.Duration(seq) * time.Millisecond)}
}

func sameEvents(t *testing.T, got, want []store.Event) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d events %v, want %d", len(got), seqs(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.SessionID != w.SessionID || g.Seq != w.Seq || g.Kind != w.Kind || !g.TS.Equal(w.TS) ||
			g.TS.Location() != time.UTC || !jsonEqual(g.Payload, w.Payload) {
			t.Errorf("event %d:\n got %+v (%s)\nwant %+v (%s)", i, g, g.Payload, w, w.Payload)
		}
	}
}

func seqs(evs []store.Event) []int64 {
	out := make([]int64, len(evs))
	for i, e := range evs {
		out[i] = e.Seq
	}
	return out
}

func testEventsAppendRead(t *testing.T, st store.Store) {
	ctx := context.Background()
	createSessions(t, st, "s-1", "s-2")
	var s1 []store.Event
	for i := int64(1); i <= 10; i++ {
		s1 = append(s1, ev("s-1", i))
	}
	// One batch spanning both sessions, interleaved.
	batch := []store.Event{s1[0], ev("s-2", 1), s1[1], s1[2], ev("s-2", 2)}
	must(t, st.AppendEvents(ctx, store.Unfenced(), batch))
	must(t, st.AppendEvents(ctx, store.Unfenced(), s1[3:]))
	must(t, st.AppendEvents(ctx, store.Unfenced(), nil))

	tests := []struct {
		name     string
		session  string
		afterSeq int64
		limit    int
		want     []store.Event
	}{
		{"all", "s-1", 0, 0, s1},
		{"after", "s-1", 4, 0, s1[4:]},
		{"limit", "s-1", 0, 3, s1[:3]},
		{"after and limit", "s-1", 5, 2, s1[5:7]},
		{"negative limit", "s-1", 8, -1, s1[8:]},
		{"past the end", "s-1", 10, 0, nil},
		{"other session", "s-2", 0, 0, []store.Event{ev("s-2", 1), ev("s-2", 2)}},
		{"unknown session", "s-none", 0, 0, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := st.ReadEvents(ctx, tc.session, tc.afterSeq, tc.limit)
			must(t, err)
			sameEvents(t, got, tc.want)
		})
	}
	for session, want := range map[string]int64{"s-1": 10, "s-2": 2, "s-none": 0} {
		got, err := st.LastSeq(ctx, session)
		must(t, err)
		if got != want {
			t.Errorf("LastSeq(%s) = %d, want %d", session, got, want)
		}
	}
	t.Run("nil payload is null", func(t *testing.T) {
		must(t, st.AppendEvents(ctx, store.Unfenced(), []store.Event{{SessionID: "s-2", Seq: 3, Kind: "x", TS: t0}}))
		got, err := st.ReadEvents(ctx, "s-2", 2, 0)
		must(t, err)
		if len(got) != 1 || !jsonEqual(got[0].Payload, raw("null")) {
			t.Errorf("got %+v, want one event with payload null", got)
		}
	})
}

// testEventsScan: ScanEvents hands over the same rows as ReadEvents, byte
// for byte, with the same after/limit rules, whatever the kind's text and
// the time; an error from the callback stops the read.
func testEventsScan(t *testing.T, st store.Store) {
	ctx := context.Background()
	createSessions(t, st, "s-1", "s-2")
	var s1 []store.Event
	for i := int64(1); i <= 10; i++ {
		s1 = append(s1, ev("s-1", i))
	}
	s1[4].Payload = nil // stored as null
	s1[5].Payload = raw(`{"text":"` + strings.Repeat(`é\"x`, 3000) + `"}`)
	s1[6].Kind = `odd, "kind" é`                                      // a kind is any text
	s1[7].TS = time.Date(1969, 7, 20, 20, 17, 40, 123456e3, time.UTC) // before 1970
	must(t, st.AppendEvents(ctx, store.Unfenced(), append([]store.Event{ev("s-2", 1)}, s1...)))
	scan := func(session string, after int64, limit int) []store.Event {
		var out []store.Event
		must(t, st.ScanEvents(ctx, session, after, limit, func(r *store.EventRow) error {
			out = append(out, store.Event{SessionID: session, Seq: r.Seq, Kind: string(r.Kind),
				Payload: bytes.Clone(r.Payload), TS: r.TS})
			return nil
		}))
		return out
	}
	tests := []struct {
		name     string
		session  string
		afterSeq int64
		limit    int
	}{
		{"all", "s-1", 0, 0},
		{"after", "s-1", 4, 0},
		{"limit", "s-1", 0, 3},
		{"after and limit", "s-1", 5, 2},
		{"negative limit", "s-1", 8, -1},
		{"past the end", "s-1", 10, 0},
		{"other session", "s-2", 0, 0},
		{"unknown session", "s-none", 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want, err := st.ReadEvents(ctx, tc.session, tc.afterSeq, tc.limit)
			must(t, err)
			got := scan(tc.session, tc.afterSeq, tc.limit)
			sameEvents(t, got, want)
			for i := range got {
				if !bytes.Equal(got[i].Payload, want[i].Payload) {
					t.Errorf("event %d: scanned payload %s, read %s", got[i].Seq, got[i].Payload, want[i].Payload)
				}
			}
		})
	}
	t.Run("callback error stops the read", func(t *testing.T) {
		stop := errors.New("stop")
		n := 0
		err := st.ScanEvents(ctx, "s-1", 0, 0, func(*store.EventRow) error {
			if n++; n == 3 {
				return stop
			}
			return nil
		})
		if !errors.Is(err, stop) || n != 3 {
			t.Errorf("ScanEvents = %v after %d rows, want the callback's error after 3", err, n)
		}
		// The store still serves reads afterwards.
		if got := scan("s-1", 0, 0); len(got) != 10 {
			t.Errorf("after a stopped scan: %d events, want 10", len(got))
		}
	})
}

func testEventsFailingBatch(t *testing.T, st store.Store) {
	ctx := context.Background()
	createSessions(t, st, "s-1", "s-2")
	must(t, st.AppendEvents(ctx, store.Unfenced(), []store.Event{ev("s-1", 1), ev("s-1", 2)}))
	tests := []struct {
		name  string
		batch []store.Event
		want  error
	}{
		{"duplicate of a stored event", []store.Event{ev("s-2", 1), ev("s-1", 3), ev("s-1", 2)}, store.ErrConflict},
		{"duplicate inside the batch", []store.Event{ev("s-2", 1), ev("s-1", 3), ev("s-1", 3)}, store.ErrConflict},
		{"session without a row", []store.Event{ev("s-2", 1), ev("s-1", 3), ev("s-none", 1)}, store.ErrNotFound},
		{"seq zero", []store.Event{ev("s-2", 1), ev("s-1", 0)}, store.ErrInvalid},
		{"empty kind", []store.Event{ev("s-2", 1), {SessionID: "s-1", Seq: 3}}, store.ErrInvalid},
		{"empty session", []store.Event{ev("s-2", 1), {Seq: 3, Kind: "x"}}, store.ErrInvalid},
		{"bad payload", []store.Event{ev("s-2", 1), {SessionID: "s-1", Seq: 3, Kind: "x", Payload: raw(`{"a":`)}}, store.ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wantErr(t, st.AppendEvents(ctx, store.Unfenced(), tc.batch), tc.want)
			for session, want := range map[string]int64{"s-1": 2, "s-2": 0} {
				got, err := st.ReadEvents(ctx, session, 0, 0)
				must(t, err)
				if int64(len(got)) != want {
					t.Errorf("after the failed batch %s has %d events %v, want %d", session, len(got), seqs(got), want)
				}
			}
		})
	}
}

// testEventsConcurrentConflicts has writers race for the same seqs: each
// seq is won exactly once, the losers get ErrConflict.
func testEventsConcurrentConflicts(t *testing.T, st store.Store) {
	ctx := context.Background()
	createSessions(t, st, "s-1")
	const writers, n = 4, 20
	var (
		mu   sync.Mutex
		wins = map[int64]int{}
		wg   sync.WaitGroup
	)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := int64(1); seq <= n; seq++ {
				err := st.AppendEvents(ctx, store.Unfenced(), []store.Event{ev("s-1", seq)})
				mu.Lock()
				switch {
				case err == nil:
					wins[seq]++
				case !errors.Is(err, store.ErrConflict):
					t.Errorf("seq %d: %v, want nil or ErrConflict", seq, err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for seq := int64(1); seq <= n; seq++ {
		if wins[seq] != 1 {
			t.Errorf("seq %d written %d times, want 1", seq, wins[seq])
		}
	}
}

// testEventsReadWhileWriting reads a session's events while batches are
// appended to it and to others; every read is a gap-free prefix.
func testEventsReadWhileWriting(t *testing.T, st store.Store) {
	ctx := context.Background()
	createSessions(t, st, "s-1", "s-2")
	const batches, size = 40, 25
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(done)
		for b := 0; b < batches; b++ {
			var batch []store.Event
			for i := 1; i <= size; i++ {
				seq := int64(b*size + i)
				batch = append(batch, ev("s-1", seq), ev("s-2", seq))
			}
			if err := st.AppendEvents(ctx, store.Unfenced(), batch); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				evs, err := st.ReadEvents(ctx, "s-1", 0, 0)
				if err != nil {
					t.Error(err)
					return
				}
				if len(evs)%size != 0 {
					t.Errorf("read saw %d events: part of a batch", len(evs))
				}
				for i, e := range evs {
					if e.Seq != int64(i+1) {
						t.Errorf("read %d: seq %d, want %d", i, e.Seq, i+1)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	last, err := st.LastSeq(ctx, "s-1")
	must(t, err)
	if last != batches*size {
		t.Errorf("LastSeq = %d, want %d", last, batches*size)
	}
}

func rawList(ss ...string) []json.RawMessage {
	out := []json.RawMessage{}
	for _, s := range ss {
		out = append(out, raw(s))
	}
	return out
}

func sameHistory(t *testing.T, st store.Store, sessionID string, want []json.RawMessage) {
	t.Helper()
	got, err := st.LoadHistory(context.Background(), sessionID)
	must(t, err)
	if len(got) != len(want) {
		t.Fatalf("history of %s = %s, want %s", sessionID, got, want)
	}
	for i := range got {
		if !jsonEqual(got[i], want[i]) {
			t.Errorf("history of %s [%d] = %s, want %s", sessionID, i, got[i], want[i])
		}
	}
}

func testHistory(t *testing.T, st store.Store) {
	ctx := context.Background()
	createSessions(t, st, "s-1", "s-2")
	m1, m2, m3 := `{"role":"user","content":"hi"}`, `{"role":"assistant","content":"hello"}`, `{"role":"user","content":"more"}`
	steps := []struct {
		name    string
		do      func() error
		wantErr error
		want    []json.RawMessage
	}{
		{"empty", func() error { return nil }, nil, rawList()},
		{"append two", func() error { return st.AppendHistory(ctx, store.Unfenced(), "s-1", rawList(m1, m2)) }, nil, rawList(m1, m2)},
		{"append one", func() error { return st.AppendHistory(ctx, store.Unfenced(), "s-1", rawList(m3)) }, nil, rawList(m1, m2, m3)},
		{"append none", func() error { return st.AppendHistory(ctx, store.Unfenced(), "s-1", nil) }, nil, rawList(m1, m2, m3)},
		{"append bad JSON", func() error { return st.AppendHistory(ctx, store.Unfenced(), "s-1", rawList(m1, `{`)) }, store.ErrInvalid, rawList(m1, m2, m3)},
		{"replace", func() error { return st.ReplaceHistory(ctx, store.Unfenced(), "s-1", rawList(`{"summary":"s"}`, m3)) }, nil, rawList(`{"summary":"s"}`, m3)},
		{"append after replace", func() error { return st.AppendHistory(ctx, store.Unfenced(), "s-1", rawList(m1)) }, nil, rawList(`{"summary":"s"}`, m3, m1)},
		{"replace bad JSON", func() error { return st.ReplaceHistory(ctx, store.Unfenced(), "s-1", rawList(m1, "x")) }, store.ErrInvalid, rawList(`{"summary":"s"}`, m3, m1)},
		{"replace with nothing", func() error { return st.ReplaceHistory(ctx, store.Unfenced(), "s-1", nil) }, nil, rawList()},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			err := s.do()
			if s.wantErr == nil {
				must(t, err)
			} else {
				wantErr(t, err, s.wantErr)
			}
			sameHistory(t, st, "s-1", s.want)
		})
	}
	sameHistory(t, st, "s-2", rawList())
	sameHistory(t, st, "s-none", rawList())
	wantErr(t, st.AppendHistory(ctx, store.Unfenced(), "s-none", rawList(m1)), store.ErrNotFound)
	wantErr(t, st.AppendHistory(ctx, store.Unfenced(), "s-none", nil), store.ErrNotFound)
	wantErr(t, st.ReplaceHistory(ctx, store.Unfenced(), "s-none", rawList(m1)), store.ErrNotFound)
	wantErr(t, st.ReplaceHistory(ctx, store.Unfenced(), "s-none", nil), store.ErrNotFound)
}

// testHistoryAt pins the history journal: the history at an event is the
// one written while that event was the session's latest.
func testHistoryAt(t *testing.T, st store.Store) {
	ctx := context.Background()
	createSessions(t, st, "s-1", "s-old")
	m1, m2, m3 := `{"n":1}`, `{"n":2}`, `{"n":3}`
	at := func(id string, seq int64, want []json.RawMessage) {
		t.Helper()
		got, err := st.HistoryAt(ctx, id, seq)
		must(t, err)
		if len(got) != len(want) {
			t.Fatalf("HistoryAt(%s, %d) = %s, want %s", id, seq, got, want)
		}
		for i := range got {
			if !jsonEqual(got[i], want[i]) {
				t.Errorf("HistoryAt(%s, %d)[%d] = %s, want %s", id, seq, i, got[i], want[i])
			}
		}
	}
	at("s-1", 0, rawList())
	must(t, st.AppendEvents(ctx, store.Unfenced(), []store.Event{ev("s-1", 1)}))
	must(t, st.AppendHistory(ctx, store.Unfenced(), "s-1", rawList(m1, m2)))
	must(t, st.AppendEvents(ctx, store.Unfenced(), []store.Event{ev("s-1", 2), ev("s-1", 3)}))
	must(t, st.AppendHistory(ctx, store.Unfenced(), "s-1", rawList(m3)))
	must(t, st.AppendEvents(ctx, store.Unfenced(), []store.Event{ev("s-1", 4)}))
	must(t, st.ReplaceHistory(ctx, store.Unfenced(), "s-1", rawList(`{"summary":"s"}`)))
	must(t, st.AppendEvents(ctx, store.Unfenced(), []store.Event{ev("s-1", 5)}))
	must(t, st.AppendHistory(ctx, store.Unfenced(), "s-1", rawList(m1)))
	at("s-1", 0, rawList())
	at("s-1", 1, rawList(m1, m2))
	at("s-1", 2, rawList(m1, m2))
	at("s-1", 3, rawList(m1, m2, m3))
	at("s-1", 4, rawList(`{"summary":"s"}`))
	at("s-1", 5, rawList(`{"summary":"s"}`, m1))
	at("s-1", 9, rawList(`{"summary":"s"}`, m1))

	// A session whose first history comes after some events had none
	// before it.
	must(t, st.AppendEvents(ctx, store.Unfenced(), []store.Event{ev("s-old", 1), ev("s-old", 2)}))
	must(t, st.AppendHistory(ctx, store.Unfenced(), "s-old", rawList(m1)))
	at("s-old", 1, rawList())
	at("s-old", 2, rawList(m1))
	at("s-none", 1, rawList())
}

func testDeleteSessions(t *testing.T, st store.Store) {
	ctx := context.Background()
	createSessions(t, st, "s-1", "s-2", "s-3")
	for _, id := range []string{"s-1", "s-2", "s-3"} {
		must(t, st.AppendEvents(ctx, store.Unfenced(), []store.Event{ev(id, 1), ev(id, 2)}))
		must(t, st.AppendHistory(ctx, store.Unfenced(), id, rawList(`{"n":1}`)))
	}
	_, err := st.AppendAudit(ctx, store.AuditEntry{RequestID: "ap-1", SessionID: "s-1", Decision: "allow", At: t0})
	must(t, err)

	tests := []struct {
		name string
		ids  []string
		want int
	}{
		{"nothing", nil, 0},
		{"unknown only", []string{"s-none"}, 0},
		{"two, an unknown and a repeat", []string{"s-1", "s-none", "s-2", "s-1"}, 2},
		{"already deleted", []string{"s-1", "s-2"}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, err := st.DeleteSessions(ctx, store.Unfenced(), tc.ids)
			must(t, err)
			if n != tc.want {
				t.Errorf("DeleteSessions(%v) = %d, want %d", tc.ids, n, tc.want)
			}
		})
	}
	for _, id := range []string{"s-1", "s-2"} {
		_, err := st.GetSession(ctx, id)
		wantErr(t, err, store.ErrNotFound)
		evs, err := st.ReadEvents(ctx, id, 0, 0)
		must(t, err)
		last, err := st.LastSeq(ctx, id)
		must(t, err)
		if len(evs) != 0 || last != 0 {
			t.Errorf("%s: %d events (last seq %d) left after delete", id, len(evs), last)
		}
		sameHistory(t, st, id, rawList())
	}
	got, err := st.GetSession(ctx, "s-3")
	must(t, err)
	if got.LastSeq != 2 {
		t.Errorf("s-3 LastSeq = %d after deleting others, want 2", got.LastSeq)
	}
	sameHistory(t, st, "s-3", rawList(`{"n":1}`))
	audit, err := st.ListAudit(ctx, "s-1")
	must(t, err)
	if len(audit) != 1 {
		t.Errorf("audit of a deleted session has %d entries, want 1 (the log outlives sessions)", len(audit))
	}
	// A deleted session's id can be reused from scratch.
	createSessions(t, st, "s-1")
	must(t, st.AppendEvents(ctx, store.Unfenced(), []store.Event{ev("s-1", 1)}))
}

func patternIDs(ps []store.Pattern) []string {
	return idsOf(ps, func(p store.Pattern) string { return p.PatternID })
}

func testAllowlist(t *testing.T, st store.Store) {
	ctx := context.Background()
	ps := []store.Pattern{
		{PatternID: "p-1", Pattern: "shell(git status*)", Scope: store.ScopeProject, Workdir: "/one", CreatedAt: at(1)},
		{PatternID: "p-2", Pattern: "write_file(src/**)", Scope: store.ScopeSession, Workdir: "/one", SessionID: "s-1", CreatedAt: at(2),
			PrincipalID: "pr-1", PrincipalName: "ada"},
		{PatternID: "p-3", Pattern: "web_fetch", Scope: store.ScopeAlways, CreatedAt: at(3)},
		{PatternID: "p-4", Pattern: "shell(ls*)", Scope: store.ScopeProject, Workdir: "/two", CreatedAt: at(0)},
	}
	for _, p := range ps {
		id, err := st.AddPattern(ctx, p)
		must(t, err)
		if id != p.PatternID {
			t.Fatalf("AddPattern(%s) = %s, want its own id", p.PatternID, id)
		}
	}
	// The same entry again under another id, by someone else: the existing
	// entry's id, no second row, and who added it first stays.
	again := ps[1]
	again.PatternID, again.PrincipalID, again.PrincipalName = "p-again", "pr-2", "bob"
	if id, err := st.AddPattern(ctx, again); err != nil || id != "p-2" {
		t.Fatalf("AddPattern of an existing entry = %q, %v; want p-2", id, err)
	}
	adds := []struct {
		name string
		p    store.Pattern
		want error
	}{
		{"duplicate id", store.Pattern{PatternID: "p-1", Pattern: "x", Scope: store.ScopeAlways}, store.ErrConflict},
		{"empty id", store.Pattern{Pattern: "x", Scope: store.ScopeAlways}, store.ErrInvalid},
		{"empty pattern", store.Pattern{PatternID: "p-9", Scope: store.ScopeAlways}, store.ErrInvalid},
		{"unknown scope", store.Pattern{PatternID: "p-9", Pattern: "x", Scope: "once"}, store.ErrInvalid},
	}
	for _, tc := range adds {
		t.Run("add "+tc.name, func(t *testing.T) {
			_, err := st.AddPattern(ctx, tc.p)
			wantErr(t, err, tc.want)
		})
	}
	lists := []struct {
		name string
		f    store.PatternFilter
		want []string
	}{
		{"all, oldest first", store.PatternFilter{}, []string{"p-4", "p-1", "p-2", "p-3"}},
		{"scope", store.PatternFilter{Scope: store.ScopeProject}, []string{"p-4", "p-1"}},
		{"workdir", store.PatternFilter{Workdir: "/one"}, []string{"p-1", "p-2"}},
		{"scope and workdir", store.PatternFilter{Scope: store.ScopeProject, Workdir: "/two"}, []string{"p-4"}},
		{"session", store.PatternFilter{SessionID: "s-1"}, []string{"p-2"}},
		{"no match", store.PatternFilter{Scope: store.ScopeAlways, Workdir: "/one"}, []string{}},
	}
	for _, tc := range lists {
		t.Run("list "+tc.name, func(t *testing.T) {
			got, err := st.ListPatterns(ctx, tc.f)
			must(t, err)
			if !reflect.DeepEqual(patternIDs(got), tc.want) {
				t.Errorf("ListPatterns(%+v) = %v, want %v", tc.f, patternIDs(got), tc.want)
			}
		})
	}
	got, err := st.ListPatterns(ctx, store.PatternFilter{SessionID: "s-1"})
	must(t, err)
	if len(got) == 1 {
		g := got[0]
		if !g.CreatedAt.Equal(ps[1].CreatedAt) || g.CreatedAt.Location() != time.UTC {
			t.Errorf("CreatedAt = %v, want %v in UTC", g.CreatedAt, ps[1].CreatedAt)
		}
		g.CreatedAt = ps[1].CreatedAt
		if g != ps[1] {
			t.Errorf("pattern = %+v, want %+v", g, ps[1])
		}
	}
	// Concurrent additions of one entry under different ids: one row, and
	// every caller gets its id.
	const workers = 8
	ids := make([]string, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id, err := st.AddPattern(ctx, store.Pattern{PatternID: fmt.Sprintf("p-race-%d", w), Pattern: "shell(make*)", Scope: store.ScopeAlways, CreatedAt: at(5)})
			if err != nil {
				t.Error(err)
			}
			ids[w] = id
		}()
	}
	wg.Wait()
	race, err := st.ListPatterns(ctx, store.PatternFilter{Scope: store.ScopeAlways})
	must(t, err)
	if got := patternIDs(race); len(got) != 2 || got[0] != "p-3" || got[1] != ids[0] {
		t.Fatalf("after %d concurrent additions of one entry: %v (ids answered %v), want p-3 and one of them", workers, got, ids)
	}
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("concurrent additions of one entry answered ids %v, want one id", ids)
		}
	}
	must(t, st.RemovePattern(ctx, ids[0]))
	must(t, st.RemovePattern(ctx, "p-1"))
	wantErr(t, st.RemovePattern(ctx, "p-1"), store.ErrNotFound)
	wantErr(t, st.RemovePattern(ctx, "p-none"), store.ErrNotFound)
	all, err := st.ListPatterns(ctx, store.PatternFilter{})
	must(t, err)
	if want := []string{"p-4", "p-2", "p-3"}; !reflect.DeepEqual(patternIDs(all), want) {
		t.Errorf("after remove: %v, want %v", patternIDs(all), want)
	}
}

func testAudit(t *testing.T, st store.Store) {
	ctx := context.Background()
	entries := []store.AuditEntry{
		{RequestID: "ap-1", SessionID: "s-1", Tool: "shell", Args: raw(`{"command":"ls"}`), Decision: "allow",
			Scope: "once", By: "conn-1", Reason: "", At: at(1)},
		{RequestID: "ap-2", SessionID: "s-2", Tool: "write_file", Args: raw(`{"path":"a"}`), Decision: "deny",
			Scope: "once", By: "timeout", Reason: "nobody answered", At: at(2)},
		{RequestID: "ap-3", SessionID: "s-1", Tool: "web_fetch", Decision: "allow", Scope: "project", By: "c", At: at(3)},
	}
	var last int64
	for i := range entries {
		id, err := st.AppendAudit(ctx, entries[i])
		must(t, err)
		if id <= last {
			t.Errorf("AppendAudit id %d not above %d", id, last)
		}
		last = id
		entries[i].ID = id
	}
	_, err := st.AppendAudit(ctx, store.AuditEntry{RequestID: "ap-4", Args: raw(`[`)})
	wantErr(t, err, store.ErrInvalid)
	entries[2].Args = raw("null") // nil args are stored as null

	tests := []struct {
		session string
		want    []store.AuditEntry
	}{
		{"s-1", []store.AuditEntry{entries[0], entries[2]}},
		{"s-2", []store.AuditEntry{entries[1]}},
		{"", entries},
		{"s-none", nil},
	}
	for _, tc := range tests {
		t.Run("list "+tc.session, func(t *testing.T) {
			got, err := st.ListAudit(ctx, tc.session)
			must(t, err)
			if len(got) != len(tc.want) {
				t.Fatalf("ListAudit(%q) = %d entries, want %d", tc.session, len(got), len(tc.want))
			}
			for i := range got {
				g, w := got[i], tc.want[i]
				if !jsonEqual(g.Args, w.Args) || !g.At.Equal(w.At) || g.At.Location() != time.UTC {
					t.Errorf("entry %d: args/at = %s/%v, want %s/%v", i, g.Args, g.At, w.Args, w.At)
				}
				g.Args, w.Args, g.At, w.At = nil, nil, time.Time{}, time.Time{}
				if !reflect.DeepEqual(g, w) {
					t.Errorf("entry %d:\n got %+v\nwant %+v", i, g, w)
				}
			}
		})
	}
}

func testSettings(t *testing.T, st store.Store) {
	ctx := context.Background()
	must(t, st.PutSetting(ctx, store.Unfenced(), "providers", "openai", raw(`{"base_url":"http://x"}`)))
	must(t, st.PutSetting(ctx, store.Unfenced(), "providers", "anthropic", raw(`{"model":"m"}`)))
	must(t, st.PutSetting(ctx, store.Unfenced(), "other", "openai", raw(`1`)))
	must(t, st.PutSetting(ctx, store.Unfenced(), "providers", "openai", raw(`{"base_url":"http://y"}`))) // replaces

	gets := []struct {
		ns, key string
		want    json.RawMessage
		err     error
	}{
		{"providers", "openai", raw(`{"base_url":"http://y"}`), nil},
		{"other", "openai", raw(`1`), nil},
		{"providers", "none", nil, store.ErrNotFound},
		{"none", "openai", nil, store.ErrNotFound},
	}
	for _, tc := range gets {
		t.Run("get "+tc.ns+"/"+tc.key, func(t *testing.T) {
			got, err := st.GetSetting(ctx, tc.ns, tc.key)
			if tc.err != nil {
				wantErr(t, err, tc.err)
				return
			}
			must(t, err)
			if !jsonEqual(got, tc.want) {
				t.Errorf("GetSetting = %s, want %s", got, tc.want)
			}
		})
	}
	list, err := st.ListSettings(ctx, "providers")
	must(t, err)
	if len(list) != 2 || list[0].Key != "anthropic" || list[1].Key != "openai" ||
		list[0].Namespace != "providers" || !jsonEqual(list[1].Value, raw(`{"base_url":"http://y"}`)) {
		t.Errorf("ListSettings(providers) = %+v", list)
	}
	for _, bad := range []store.Setting{{Key: "k", Value: raw(`1`)}, {Namespace: "n", Value: raw(`1`)}, {Namespace: "n", Key: "k", Value: raw(`{`)}} {
		wantErr(t, st.PutSetting(ctx, store.Unfenced(), bad.Namespace, bad.Key, bad.Value), store.ErrInvalid)
	}
	must(t, st.DeleteSetting(ctx, store.Unfenced(), "providers", "openai"))
	wantErr(t, st.DeleteSetting(ctx, store.Unfenced(), "providers", "openai"), store.ErrNotFound)
	_, err = st.GetSetting(ctx, "providers", "openai")
	wantErr(t, err, store.ErrNotFound)
	if _, err := st.GetSetting(ctx, "other", "openai"); err != nil {
		t.Errorf("deleting providers/openai touched other/openai: %v", err)
	}
}
