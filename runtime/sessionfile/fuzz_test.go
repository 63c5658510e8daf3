package sessionfile

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"testing"
)

// seedFile is a small valid file: the session, two events, a history
// message and its journal, one blob of one chunk and a checkpoint naming it.
func seedFile(t testing.TB) []byte {
	lines := []string{
		`{"format":"trellis-session","version":2}`,
		`{"t":"session","session":{"sessionId":"s-1","workdir":"/w","mode":"auto","kind":"chat","createdAt":"2026-12-06T17:00:00Z"}}`,
		`{"t":"event","seq":1,"kind":"turn.started","ts":"2026-12-06T17:00:01Z","payload":"{\"turnId\":\"t-1\"}"}`,
		`{"t":"event","seq":2,"kind":"turn.done","ts":"2026-12-06T17:00:02Z","payload":"{ \"reason\" : \"complete\" }"}`,
		`{"t":"history","message":"{\"role\":\"user\",\"content\":\"hi\"}"}`,
		`{"t":"journal","n":1,"op":"base","messages":"[]"}`,
		`{"t":"journal","n":2,"seq":1,"op":"append","messages":"[{\"role\":\"user\",\"content\":\"hi\"}]"}`,
		`{"t":"blob","hash":"m1","size":2,"stored":3}`,
		`{"t":"chunk","hash":"m1","data":"AAAA"}`,
		`{"t":"checkpoint","checkpoint":{"checkpointId":"c-1","seq":2,"reason":"turn","manifest":"m1","digest":"d","files":0,"bytes":0,"blobs":[],"createdAt":"2026-12-06T17:00:02Z"}}`,
	}
	var body bytes.Buffer
	for _, l := range lines {
		body.WriteString(l + "\n")
	}
	sum := sha256.Sum256(body.Bytes())
	end, err := json.Marshal(record{T: tEnd, Counts: &Counts{Events: 2, History: 1, Journal: 2, Blobs: 1, Chunks: 1, Checkpoints: 1},
		SHA256: hex.EncodeToString(sum[:])})
	if err != nil {
		t.Fatal(err)
	}
	return append(body.Bytes(), append(end, '\n')...)
}

// FuzzRead: the checker never panics and either accepts a file or refuses
// it as ErrCorrupt (reading from memory cannot fail otherwise); what it
// accepts hands on exactly the records its trailer counts.
func FuzzRead(f *testing.F) {
	seed := seedFile(f)
	if _, _, err := read(bytes.NewReader(seed), nil); err != nil {
		f.Fatalf("the seed file is refused: %v", err)
	}
	f.Add(seed)
	f.Add(seed[:len(seed)/2])
	f.Add(bytes.Replace(seed, []byte(`"version":2`), []byte(`"version":1`), 1))
	f.Add([]byte(`{"format":"trellis-session","version":1}` + "\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		records := 0
		_, n, err := read(bytes.NewReader(b), func(*record) error { records++; return nil })
		if err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("refused without ErrCorrupt: %v", err)
		}
		if err == nil && records != n.Events+n.History+n.Journal+n.Blobs+n.Chunks+n.Checkpoints {
			t.Fatalf("accepted %d records, the trailer counts %+v", records, n)
		}
	})
}
