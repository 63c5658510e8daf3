package transcript

import (
	"testing"

	"golang.org/x/tools/txtar"
)

func TestParseAndFormatRoundTrip(t *testing.T) {
	src := "Pins: something.\n-- client --\n{\"a\":1}\n\n{\"b\":2}\n-- server --\n-- client --\nx\n-- server --\n{\"r\":1}\n"
	ar := txtar.Parse([]byte(src))
	steps, err := parseSteps(ar)
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 2 || len(steps[0].client) != 2 || len(steps[0].server) != 0 || steps[1].server[0] != `{"r":1}` {
		t.Fatalf("steps %+v", steps)
	}
	want := "Pins: something.\n-- client --\n{\"a\":1}\n{\"b\":2}\n-- server --\n-- client --\nx\n-- server --\n{\"r\":1}\n"
	if got := string(format(ar.Comment, steps)); got != want {
		t.Fatalf("format:\n%s", got)
	}
}

func TestParseRejects(t *testing.T) {
	for _, src := range []string{
		"c\n-- server --\n{}\n",
		"c\n-- client --\n{}\n-- server --\n-- server --\n",
		"c\n-- request --\n{}\n",
		"c\n",
	} {
		if _, err := parseSteps(txtar.Parse([]byte(src))); err == nil {
			t.Errorf("accepted %q", src)
		}
	}
}

func TestRedact(t *testing.T) {
	c := &config{redact: []string{"errorId", "connectionId", "startedAt"}}
	in := `{"a":"x","errorId":"e-9f\"3","n":{"connectionId":42,"startedAt":null}}`
	want := `{"a":"x","errorId":"<errorId>","n":{"connectionId":"<connectionId>","startedAt":"<startedAt>"}}`
	if got := c.normalize(in); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	if got := c.normalize("{ \"a\" : 1 }"); got != `{"a":1}` {
		t.Fatalf("not compacted: %s", got)
	}
}
