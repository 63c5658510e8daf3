package retention

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestSelect: which sessions a policy deletes, and the reason it gives,
// for sessions of several workdirs and agents, ages and states.
func TestSelect(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	sessions := []Session{
		{ID: "a1", Workdir: "/a", Agent: "coder", LastActivity: ago(40 * day)},
		{ID: "a2", Workdir: "/a", Agent: "coder", LastActivity: ago(20 * day)},
		{ID: "a3", Workdir: "/a", Agent: "", LastActivity: ago(2 * day)},
		{ID: "a4", Workdir: "/a", Agent: "", LastActivity: ago(time.Hour)},
		{ID: "b1", Workdir: "/b", Agent: "coder", LastActivity: ago(50 * day)},
		{ID: "b2", Workdir: "/b", Agent: "", LastActivity: ago(45 * day), Archived: true},
		{ID: "b3", Workdir: "/b", Agent: "", LastActivity: ago(60 * day), Busy: "a turn is running"},
		{ID: "m1", Workdir: "/w/m1", Managed: true, LastActivity: ago(30 * day)},
		{ID: "m2", Workdir: "/w/m2", Managed: true, LastActivity: ago(10 * day)},
	}
	cases := []struct {
		name   string
		policy Policy
		want   []string // deleted ids, oldest activity first
		reason map[string]string
	}{
		{name: "no rule deletes nothing", policy: Policy{}, want: nil},
		{name: "age alone", policy: Policy{Within: 30 * day},
			want:   []string{"b3", "b1", "a1"},
			reason: map[string]string{"a1": "last active 960h0m0s ago, past the 720h0m0s kept"}},
		{name: "age: activity exactly at the limit is kept", policy: Policy{Within: 40 * day},
			want: []string{"b3", "b1"}},
		{name: "keep latest per workdir: managed sessions rank together, the archived one is not counted",
			policy: Policy{Latest: 1},
			want:   []string{"b3", "a1", "m1", "a2", "a3"},
			reason: map[string]string{"m1": "not among the 1 latest of its workdir (managed)", "a3": "not among the 1 latest of its workdir /a"}},
		{name: "keep latest per agent", policy: Policy{Latest: 2, Per: PerAgent},
			want:   []string{"b3", "b1", "m1", "m2"},
			reason: map[string]string{"b1": "not among the 2 latest of its agent coder", "m1": "not among the 2 latest of its agent (default)"}},
		{name: "any rule keeps: age or latest", policy: Policy{Within: 30 * day, Latest: 1},
			want:   []string{"b3", "a1"},
			reason: map[string]string{"a1": "last active 960h0m0s ago, past the 720h0m0s kept; not among the 1 latest of its workdir /a"}},
		{name: "a busy session is ranked and selected (the caller skips it)", policy: Policy{Latest: 2},
			want: []string{"a1", "a2"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Select(c.policy, now, sessions)
			var ids []string
			for _, d := range got {
				ids = append(ids, d.Session.ID)
				if want, ok := c.reason[d.Session.ID]; ok && d.Reason != want {
					t.Errorf("%s: reason %q, want %q", d.Session.ID, d.Reason, want)
				}
				if d.Reason == "" {
					t.Errorf("%s: no reason", d.Session.ID)
				}
				if d.Session.Archived {
					t.Errorf("%s: an archived session was selected", d.Session.ID)
				}
			}
			if !slices.Equal(ids, c.want) {
				t.Fatalf("deleted %v, want %v", ids, c.want)
			}
		})
	}
	// The order the store lists sessions in does not change the choice.
	rev := slices.Clone(sessions)
	slices.Reverse(rev)
	if a, b := Select(Policy{Latest: 1}, now, sessions), Select(Policy{Latest: 1}, now, rev); !slices.Equal(a, b) {
		t.Fatalf("the choice depends on the listing order: %v and %v", a, b)
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		p    Policy
		want string // "" = valid
	}{
		{Policy{Within: time.Hour}, ""},
		{Policy{Latest: 3, Per: PerAgent}, ""},
		{Policy{Latest: 3, Per: PerWorkdir, Within: time.Hour}, ""},
		{Policy{}, "no retention rule"},
		{Policy{Per: PerAgent}, "no retention rule"},
		{Policy{Latest: -1}, "keep-latest -1"},
		{Policy{Within: -time.Second}, "keep-within -1s"},
		{Policy{Latest: 1, Per: "owner"}, `per "owner"`},
	} {
		err := c.p.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v: %v", c.p, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%+v: error %v, want one saying %q", c.p, err, c.want)
		}
	}
	if !errors.Is(Policy{}.Validate(), ErrNoRule) {
		t.Error("a policy without a rule is not ErrNoRule")
	}
}
