package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"runtime"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/trellis-run/trellis/protocol/events"
)

// Result is what one bench measured: its parameters, its figures in the
// order they are best read, and its targets.
type Result struct {
	// Bench names the bench: fanout, append, conns, sessions, replay.
	Bench string
	// Title says in a few words what was measured.
	Title string
	// Date is when the bench finished.
	Date time.Time
	// Params are the bench's inputs (sizes, counts), in order.
	Params []Param
	// Figures are the measurements, in order.
	Figures []Figure
	// Targets are the thresholds the figures were asked to meet.
	Targets []Target
	// Notes say what a reader needs to interpret the figures.
	Notes []string
	// Load is the machine's 1-minute load average when the bench ended
	// (other work competes for the cores), -1 when unknown.
	Load float64
}

// Param is one input of a bench.
type Param struct {
	Name  string
	Value any
}

// Figure is one measurement.
type Figure struct {
	// Name is a snake_case key, also used in the JSON line.
	Name string
	// Value is the measurement in Unit.
	Value float64
	// Unit is e.g. "events/s", "ms", "bytes", "ratio".
	Unit string
	// Label says what the figure is, for the table.
	Label string
}

// Target is a threshold a figure was asked to meet.
type Target struct {
	// Figure names the figure it applies to.
	Figure string
	// Op is ">=", "<=", "<" or "==".
	Op string
	// Want is the threshold.
	Want float64
	// Got is the figure's value.
	Got float64
	// Met reports whether Got satisfies Op Want.
	Met bool
}

// Met reports whether every target was met.
func (r Result) Met() bool {
	for _, t := range r.Targets {
		if !t.Met {
			return false
		}
	}
	return true
}

// Figure returns the value of the named figure, NaN when there is none.
func (r Result) Figure(name string) float64 {
	for _, f := range r.Figures {
		if f.Name == name {
			return f.Value
		}
	}
	return math.NaN()
}

func (r *Result) param(name string, v any) { r.Params = append(r.Params, Param{name, v}) }

func (r *Result) figure(name string, v float64, unit, label string) {
	r.Figures = append(r.Figures, Figure{Name: name, Value: v, Unit: unit, Label: label})
}

func (r *Result) note(format string, args ...any) {
	r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
}

// target records a threshold on a figure already recorded.
func (r *Result) target(figure, op string, want float64) {
	got := r.Figure(figure)
	met := false
	switch op {
	case ">=":
		met = got >= want
	case "<=":
		met = got <= want
	case "<":
		met = got < want
	case "==":
		met = got == want
	}
	r.Targets = append(r.Targets, Target{Figure: figure, Op: op, Want: want, Got: got, Met: met})
}

// WriteTo writes the table, then the JSON line.
func (r Result) WriteTo(w io.Writer) (int64, error) {
	var b bytes.Buffer
	b.WriteString(r.Table())
	b.Write(r.JSON())
	b.WriteByte('\n')
	n, err := w.Write(b.Bytes())
	return int64(n), err
}

// Table renders the result for people.
func (r Result) Table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s\n", r.Bench, r.Title)
	if len(r.Params) > 0 {
		var ps []string
		for _, p := range r.Params {
			ps = append(ps, fmt.Sprintf("%s=%v", p.Name, p.Value))
		}
		fmt.Fprintf(&b, "  %s\n", strings.Join(ps, " "))
	}
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	for _, f := range r.Figures {
		label := f.Label
		if label == "" {
			label = f.Name
		}
		fmt.Fprintf(tw, "  %s\t%14s %s\n", label, human(f.Value), f.Unit)
	}
	tw.Flush()
	for _, t := range r.Targets {
		verdict := "met"
		if !t.Met {
			verdict = "MISSED"
		}
		fmt.Fprintf(&b, "  target %s %s %s: got %s, %s\n", t.Figure, t.Op, human(t.Want), human(t.Got), verdict)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "  note: %s\n", n)
	}
	fmt.Fprintf(&b, "  machine: %d cores, load average %.2f, %s\n", runtime.NumCPU(), r.Load, r.Date.UTC().Format("2006-01-02 15:04 UTC"))
	return b.String()
}

// human formats a figure with a precision that suits its size.
func human(v float64) string {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return strconv.FormatFloat(v, 'f', -1, 64)
	case v == math.Trunc(v) && math.Abs(v) < 1e15:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case math.Abs(v) >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case math.Abs(v) >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	default:
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
}

// JSON renders the result as one line: {"bench", "date", "machine",
// "params", "figures", "targets", "met", "notes"}, params and figures as
// objects in their recorded order.
func (r Result) JSON() []byte {
	var b bytes.Buffer
	b.WriteString(`{"bench":`)
	writeJSON(&b, r.Bench)
	b.WriteString(`,"date":`)
	writeJSON(&b, r.Date.UTC().Format(events.TimeFormat))
	b.WriteString(`,"machine":`)
	writeJSON(&b, map[string]any{"cpus": runtime.NumCPU(), "os": runtime.GOOS, "arch": runtime.GOARCH, "go": runtime.Version(), "load1": r.Load})
	b.WriteString(`,"params":{`)
	for i, p := range r.Params {
		writeKey(&b, i, p.Name)
		writeJSON(&b, p.Value)
	}
	b.WriteString(`},"figures":{`)
	for i, f := range r.Figures {
		writeKey(&b, i, f.Name)
		writeNumber(&b, f.Value)
	}
	b.WriteString(`},"targets":[`)
	for i, t := range r.Targets {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"figure":`)
		writeJSON(&b, t.Figure)
		b.WriteString(`,"op":`)
		writeJSON(&b, t.Op)
		b.WriteString(`,"want":`)
		writeNumber(&b, t.Want)
		b.WriteString(`,"got":`)
		writeNumber(&b, t.Got)
		b.WriteString(`,"met":`)
		writeJSON(&b, t.Met)
		b.WriteByte('}')
	}
	b.WriteString(`],"met":`)
	writeJSON(&b, r.Met())
	b.WriteString(`,"notes":`)
	notes := r.Notes
	if notes == nil {
		notes = []string{}
	}
	writeJSON(&b, notes)
	b.WriteByte('}')
	return b.Bytes()
}

// writeKey writes the key of an object's i-th member, after a comma
// unless it is the first.
func writeKey(b *bytes.Buffer, i int, key string) {
	if i > 0 {
		b.WriteByte(',')
	}
	writeJSON(b, key)
	b.WriteByte(':')
}

func writeJSON(b *bytes.Buffer, v any) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	if enc.Encode(v) != nil {
		_ = enc.Encode(fmt.Sprint(v))
	}
	b.Truncate(b.Len() - 1) // Encode's newline
}

// writeNumber writes v rounded to what a measurement can carry; NaN and
// infinities (which JSON cannot carry) become null.
func writeNumber(b *bytes.Buffer, v float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		b.WriteString("null")
		return
	}
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		b.WriteString(strconv.FormatFloat(v, 'f', 0, 64))
		return
	}
	b.WriteString(strconv.FormatFloat(v, 'g', 6, 64))
}

// finish stamps the result with the time and the machine's load.
func (r *Result) finish() {
	r.Date = time.Now()
	r.Load = loadAverage()
}

// orDefault sets an option left at zero (or below) to its default d.
func orDefault[T ~int | ~int64 | ~float64](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}
