package store

import (
	"reflect"
	"strings"
	"testing"
	"unicode"
)

func TestWords(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"  \t\n", nil},
		{"Hello, World!", []string{"hello", "world"}},
		{`"unbalanced AND (x OR y*) NEAR/2 col:z ^q -r +s`, []string{"unbalanced", "and", "x", "or", "y", "near", "2", "col", "z", "q", "r", "s"}},
		{"foo_bar foo-bar foo.bar", []string{"foo", "bar", "foo", "bar", "foo", "bar"}},
		{"v2 3.14 x²", []string{"v2", "3", "14", "x"}},
		{"Cafe\u0301 CAFÉ", []string{"café", "café"}},
		{"日本語 テキスト", []string{"日本語", "テキスト"}},
		{"İstanbul a\u20dd", []string{"istanbul", "a"}},
		{"'); DROP TABLE memories; --", []string{"drop", "table", "memories"}},
	}
	for _, tc := range tests {
		if got := Words(tc.in); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Words(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestQueryWords(t *testing.T) {
	if got, want := QueryWords("b a B c a"), []string{"b", "a", "c"}; !reflect.DeepEqual(got, want) {
		t.Errorf("QueryWords = %q, want %q", got, want)
	}
	var many []string
	for i := range 2 * MaxQueryWords {
		many = append(many, strings.Repeat("w", i+1))
	}
	if got := QueryWords(strings.Join(many, " ")); len(got) != MaxQueryWords {
		t.Errorf("QueryWords kept %d words, want %d", len(got), MaxQueryWords)
	}
}

func TestIndexText(t *testing.T) {
	got := IndexText(Memory{Text: "Deploy deploy!", Tags: []string{"ops-notes", "x"}})
	if want := "deploy deploy ops notes x"; got != want {
		t.Errorf("IndexText = %q, want %q", got, want)
	}
}

// FuzzWords pins what the backends rely on: every word is non-empty,
// lower-case, made of letters and digits only, and splitting the words
// joined by spaces gives them back.
func FuzzWords(f *testing.F) {
	for _, s := range []string{"", "Hello, World", `"a" OR b*`, "Cafe\u0301", "\x00\xff", "İstanbul ΣΑΣ"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		words := Words(s)
		for _, w := range words {
			if w == "" {
				t.Fatalf("empty word in %q", words)
			}
			for _, r := range w {
				if !unicode.IsLetter(r) && !unicode.IsDigit(r) {
					t.Fatalf("word %q holds %q", w, r)
				}
			}
		}
		if again := Words(strings.Join(words, " ")); !reflect.DeepEqual(again, words) && len(words) > 0 {
			t.Fatalf("Words(join(%q)) = %q", words, again)
		}
	})
}
