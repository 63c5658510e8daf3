package bench

import "strconv"

// streamScript is a fake model script (runtime/llm/fake) with one step per
// scriptStep: a prompt containing its match streams its deltas model chunks
// (the fake model sends three words per chunk: "d<i> w w ", i counting from
// 0, so that a client finds each chunk in the text it receives however the
// daemon merged them into message.delta events), spread over its delaySec
// seconds (0: as fast as the daemon takes them). Anything else is answered
// "ok".
func streamScript(steps ...scriptStep) []byte {
	b := []byte(`{"steps":[`)
	for i, s := range steps {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"match":`...)
		b = appendQuoted(b, s.match)
		b = append(b, `,"text":"`...)
		for j := 0; j < s.deltas; j++ {
			b = append(strconv.AppendInt(append(b, 'd'), int64(j), 10), " w w "...)
		}
		b = append(b, '"')
		if s.delaySec > 0 {
			b = append(b, `,"delaySec":`...)
			b = append(b, []byte(formatFloat(s.delaySec))...)
		}
		b = append(b, '}')
	}
	if len(steps) > 0 {
		b = append(b, ',')
	}
	return append(b, `{"default":true,"text":"ok"}],"repeat":true}`...)
}

// scriptStep is one streaming step of a bench's fake model.
type scriptStep struct {
	match    string
	deltas   int
	delaySec float64
}

func appendQuoted(b []byte, s string) []byte {
	return append(append(append(b, '"'), s...), '"')
}

func formatFloat(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
