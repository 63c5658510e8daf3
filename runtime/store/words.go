package store

import (
	"strings"
	"unicode"

	"golang.org/x/text/unicode/norm"
)

// MaxQueryWords bounds how many distinct words of a query SearchMemory
// looks for; the rest are ignored.
const MaxQueryWords = 64

// Words splits text into the lower-case words full-text search indexes and
// matches: maximal runs of letters and decimal digits, after Unicode NFC
// composition (so a decomposed "é" is the letter é) with the combining
// marks that remain dropped. Everything else separates words. Backends
// index and query these words rather than running their own parsers on
// raw text, so that SQLite and PostgreSQL find the same notes for a query.
func Words(text string) []string {
	lower := norm.NFC.String(strings.ToLower(norm.NFC.String(text)))
	unmarked := strings.Map(func(r rune) rune {
		if unicode.IsMark(r) {
			return -1
		}
		return r
	}, lower)
	words := strings.FieldsFunc(unmarked, func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	})
	if len(words) == 0 {
		return nil
	}
	return words
}

// QueryWords returns the distinct words of a search query in order of
// first appearance, at most MaxQueryWords of them.
func QueryWords(query string) []string {
	seen := map[string]bool{}
	var out []string
	for _, w := range Words(query) {
		if seen[w] {
			continue
		}
		seen[w] = true
		out = append(out, w)
		if len(out) == MaxQueryWords {
			break
		}
	}
	return out
}

// IndexText is the text a backend indexes for m: the words of its text and
// tags, space-separated, duplicates kept (they weigh in the ranking).
func IndexText(m Memory) string {
	words := Words(m.Text)
	for _, t := range m.Tags {
		words = append(words, Words(t)...)
	}
	return strings.Join(words, " ")
}
