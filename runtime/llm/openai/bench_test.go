package openai_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/trellis-run/trellis/runtime/llm"
	"github.com/trellis-run/trellis/runtime/llm/openai"
	"github.com/trellis-run/trellis/runtime/provider/providertest"
)

// BenchmarkStreamChunks measures the provider's CPU per streamed text
// chunk: one op is one chunk of a 10,000-chunk answer served at once.
func BenchmarkStreamChunks(b *testing.B) {
	const n = 10_000
	o := providertest.NewOpenAIStream("gpt-4o")
	for i := 0; i < n; i++ {
		o.Text("word ")
	}
	var body strings.Builder
	for _, ev := range o.Finish("stop").Usage(10, n).Reply().Events {
		body.WriteString("data: " + ev.Data + "\n\n")
	}
	payload := body.String()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, payload)
	}))
	defer srv.Close()
	p := openai.New(openai.Config{APIKey: testKey, BaseURL: srv.URL + "/v1", Model: "gpt-4o"})
	req := llm.Request{Model: "gpt-4o", Messages: []llm.Message{{Role: llm.RoleUser, Text: "hi"}}}
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += n {
		s, err := p.Stream(context.Background(), req)
		if err != nil {
			b.Fatal(err)
		}
		texts := 0
		for {
			c, err := s.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			if c.Kind == llm.ChunkText {
				texts++
			}
		}
		s.Close()
		if texts != n {
			b.Fatalf("%d text chunks, want %d", texts, n)
		}
	}
}
