package skill

import (
	"strings"
	"testing"
)

func TestParseManifest(t *testing.T) {
	tests := []struct {
		name, in string
		want     Manifest
		err      string // substring of the parse or validation error
	}{
		{name: "plain", in: "---\nname: pdf-tools\ndescription: Work with PDF files\n---\n# Use\nRun it.\n",
			want: Manifest{Name: "pdf-tools", Description: "Work with PDF files", Instructions: "# Use\nRun it."}},
		{name: "CRLF, BOM, quotes, comments, other keys", in: "\uFEFF---\r\n# a comment\r\nname: \"x-1\"\r\ndescription: 'It''s good' \r\nlicense: MIT\r\nmetadata:\r\n  owner: me\r\n---\r\nbody\r\n",
			want: Manifest{Name: "x-1", Description: "It's good", Instructions: "body"}},
		{name: "plain continued, comment stripped", in: "---\nname: a\ndescription: one # not this\n  two\n---\nb",
			want: Manifest{Name: "a", Description: "one two", Instructions: "b"}},
		{name: "folded block", in: "---\nname: a\ndescription: >-\n  first line\n  second line\n\n  next para\n---\nb",
			want: Manifest{Name: "a", Description: "first line second line\nnext para", Instructions: "b"}},
		{name: "literal block", in: "---\nname: a\ndescription: |\n  l1\n    l2\n---\nb",
			want: Manifest{Name: "a", Description: "l1\n  l2", Instructions: "b"}},
		{name: "double-quoted escape", in: "---\nname: a\ndescription: \"say \\\"hi\\\"\"\n---\nb",
			want: Manifest{Name: "a", Description: `say "hi"`, Instructions: "b"}},
		{name: "closing dots", in: "---\nname: a\ndescription: d\n...\nb",
			want: Manifest{Name: "a", Description: "d", Instructions: "b"}},

		{name: "no front matter", in: "# Title\nname: a\n", err: "no front matter"},
		{name: "empty file", in: "", err: "no front matter"},
		{name: "not closed", in: "---\nname: a\ndescription: d\n", err: "not closed"},
		{name: "not key value", in: "---\nname a\n---\nb", err: "not key: value"},
		{name: "stray indent", in: "---\n  name: a\n---\nb", err: "indented"},
		{name: "duplicate key", in: "---\nname: a\nname: b\n---\nb", err: "twice"},
		{name: "unclosed quote", in: "---\nname: \"a\ndescription: d\n---\nb", err: "not closed"},
		{name: "no name", in: "---\ndescription: d\n---\nb", err: "no name"},
		{name: "bad name", in: "---\nname: My_Skill\ndescription: d\n---\nb", err: "[a-z0-9-]+"},
		{name: "long name", in: "---\nname: " + strings.Repeat("a", MaxNameLen+1) + "\ndescription: d\n---\nb", err: "longer than"},
		{name: "no description", in: "---\nname: a\ndescription: \"\"\n---\nb", err: "no description"},
		{name: "long description", in: "---\nname: a\ndescription: " + strings.Repeat("d", MaxDescriptionLen+1) + "\n---\nb", err: "longer than"},
		{name: "no instructions", in: "---\nname: a\ndescription: d\n---\n  \n", err: "no instructions"},
		{name: "not UTF-8", in: "---\nname: a\xff\n---\n", err: "UTF-8"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := ParseManifest([]byte(tc.in))
			if err == nil {
				err = m.Validate()
			}
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one mentioning %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if m != tc.want {
				t.Fatalf("got %+v\nwant %+v", m, tc.want)
			}
		})
	}
}

// FuzzParseManifest: the parser never panics, and a manifest that
// validates has a well-formed name and trimmed instructions.
func FuzzParseManifest(f *testing.F) {
	for _, s := range []string{
		"---\nname: a\ndescription: d\n---\nbody",
		"---\nname: a\ndescription: >\n  x\n\n  y\n---\n",
		"---\nname: 'a''b'\ndescription: \"\\u00e9\"\n---\n",
		"---\n\t\n---",
		"---\nk: |\n\tx\n ---\n---\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseManifest(b)
		if err != nil || m.Validate() != nil {
			return
		}
		if !namePattern.MatchString(m.Name) || m.Instructions != strings.TrimSpace(m.Instructions) {
			t.Fatalf("valid manifest %+v", m)
		}
	})
}
