package codec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/events"
)

const sessionEventName protoreflect.FullName = "trellis.v1.SessionEvent"

// eventFields describes SessionEvent once: its plain fields and, for each
// member of the payload oneof, the (trellis.v1.event_kind) it stands for.
var eventFields = func() (ef struct {
	sessionID, seq, kind, ts protoreflect.FieldDescriptor
	unstored, retracted      protoreflect.FieldDescriptor // in the delivery oneof: present only when set
	payload                  protoreflect.OneofDescriptor
	kindOf                   map[protoreflect.FieldNumber]string
	memberOf                 map[string]protoreflect.FieldDescriptor
}) {
	md := (&trellisv1.SessionEvent{}).ProtoReflect().Descriptor()
	fields := md.Fields()
	ef.sessionID = fields.ByName("session_id")
	ef.seq = fields.ByName("seq")
	ef.kind = fields.ByName("kind")
	ef.ts = fields.ByName("ts")
	ef.unstored = fields.ByName("unstored")
	ef.retracted = fields.ByName("retracted")
	ef.payload = md.Oneofs().ByName("payload")
	ef.kindOf = map[protoreflect.FieldNumber]string{}
	ef.memberOf = map[string]protoreflect.FieldDescriptor{}
	members := ef.payload.Fields()
	for i := 0; i < members.Len(); i++ {
		fd := members.Get(i)
		kind, _ := proto.GetExtension(fd.Options(), trellisv1.E_EventKind).(string)
		if kind == "" {
			panic(fmt.Sprintf("codec: %s has no (trellis.v1.event_kind)", fd.FullName()))
		}
		ef.kindOf[fd.Number()] = kind
		ef.memberOf[kind] = fd
	}
	return ef
}()

// PayloadMember returns the member of SessionEvent.payload whose
// (trellis.v1.event_kind) is kind, or nil when events.proto declares none.
func PayloadMember(kind string) protoreflect.FieldDescriptor { return eventFields.memberOf[kind] }

// EventKind returns the event kind of ev: the (trellis.v1.event_kind) of its
// payload member, or its kind field when no payload is set.
func EventKind(ev *trellisv1.SessionEvent) string {
	return eventKind(ev.ProtoReflect())
}

func eventKind(m protoreflect.Message) string {
	if fd := m.WhichOneof(eventFields.payload); fd != nil {
		return eventFields.kindOf[fd.Number()]
	}
	return m.Get(eventFields.kind).String()
}

// appendEvent renders a SessionEvent as {sessionId, seq, kind, payload, ts}
// with the stored events' renderer: the set member of the payload oneof
// becomes payload (null when none is set), and kind is that member's event
// kind.
func appendEvent(b []byte, m protoreflect.Message) []byte {
	ef := &eventFields
	var payload []byte
	if fd := m.WhichOneof(ef.payload); fd != nil {
		payload = appendMessage(nil, m.Get(fd).Message())
	}
	r := StoredEvents{head: eventHead(m.Get(ef.sessionID).String())}
	b = appendString(r.appendHead(b, m.Get(ef.seq).Int(), eventKind(m), payload), m.Get(ef.ts).String())
	return appendTail(b, DeliveryOf(m.Get(ef.unstored).Bool(), m.Get(ef.retracted).Bool()))
}

// DecodeEvent decodes one session event in its wire form
// {sessionId, seq, kind, payload, ts}. An event of a kind this build does not
// know decodes with no payload member set (clients ignore such kinds);
// unknown fields are ignored, as a newer server may add some.
func DecodeEvent(data []byte) (*trellisv1.SessionEvent, error) {
	ev := &trellisv1.SessionEvent{}
	if err := Unmarshal(data, ev); err != nil {
		return nil, err
	}
	return ev, nil
}

// Unmarshal is the inverse of Marshal, for Go clients and tests: it decodes
// the protocol's JSON into m, understanding the SessionEvent rendering
// wherever a SessionEvent appears. It is lenient where Marshal's readers must
// be: unknown fields are ignored and null means unset.
func Unmarshal(data []byte, m proto.Message) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("codec: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("codec: trailing data after JSON value")
	}
	v = toProtoJSON(v, m.ProtoReflect().Descriptor())
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("codec: %w", err)
	}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(b, m); err != nil {
		return fmt.Errorf("codec: %w", err)
	}
	return nil
}

// toProtoJSON rewrites the protocol's JSON for md into protojson's form: a
// SessionEvent's payload moves under the JSON name of its oneof member.
func toProtoJSON(v any, md protoreflect.MessageDescriptor) any {
	obj, ok := v.(map[string]any)
	if !ok || md.ParentFile().Package() == "google.protobuf" {
		return v
	}
	if md.FullName() == sessionEventName {
		payload, has := obj["payload"]
		delete(obj, "payload")
		kind, _ := obj["kind"].(string)
		if fd := eventFields.memberOf[kind]; fd != nil && has && payload != nil {
			obj[fd.JSONName()] = payload
		}
	}
	fields := md.Fields()
	for k, fv := range obj {
		fd := fields.ByJSONName(k)
		if fd == nil {
			fd = fields.ByTextName(k)
		}
		if fd == nil {
			continue
		}
		var sub protoreflect.MessageDescriptor
		switch {
		case fd.IsMap():
			sub = fd.MapValue().Message()
		default:
			sub = fd.Message()
		}
		if sub == nil {
			continue
		}
		switch {
		case fd.IsList():
			if arr, ok := fv.([]any); ok {
				for i := range arr {
					arr[i] = toProtoJSON(arr[i], sub)
				}
			}
		case fd.IsMap():
			if mp, ok := fv.(map[string]any); ok {
				for mk := range mp {
					mp[mk] = toProtoJSON(mp[mk], sub)
				}
			}
		default:
			obj[k] = toProtoJSON(fv, sub)
		}
	}
	return obj
}

// AppendStoredEvent appends the protocol's JSON object of a stored event
// whose payload is already the protocol's JSON of its payload message: the
// same bytes as Marshal of the typed SessionEvent, without decoding the
// payload, with ts formatted as the protocol's timestamp (RFC 3339, UTC,
// milliseconds) straight into b. An empty payload renders as null.
func AppendStoredEvent(b []byte, sessionID string, seq int64, kind string, ts time.Time, payload []byte, d Delivery) []byte {
	return NewStoredEvents(sessionID).Append(b, seq, kind, ts, payload, d)
}

// The session.event notification frame around an event object: the one
// place such a frame is built, for live and replayed events alike.
const (
	eventFramePrefix = `{"jsonrpc":"2.0","method":"session.event","params":`
	eventFrameSuffix = `}`
)

// PageObjects appends the event objects of a page (trellisv1.EventPage) to
// objs, as slices of its JSON (no copy), after checking its shape: as many
// seqs as objects, each object a non-empty run of bytes ending within the
// JSON, one comma between two.
func PageObjects(page *trellisv1.EventPage, objs [][]byte) ([][]byte, error) {
	js, ends, seqs := page.GetJson(), page.GetEnds(), page.GetSeqs()
	if len(ends) != len(seqs) || len(ends) == 0 {
		return objs, fmt.Errorf("codec: an event page has %d objects and %d seqs", len(ends), len(seqs))
	}
	start := 0
	for i, e := range ends {
		if int(e) <= start || int(e) > len(js) || js[start] != '{' || js[e-1] != '}' || (i > 0 && js[start-1] != ',') {
			return objs, fmt.Errorf("codec: an event page has an object ending at %d after %d (JSON of %d bytes)", e, start, len(js))
		}
		objs = append(objs, js[start:e:e])
		start = int(e) + 1
	}
	return objs, nil
}

// AppendEventFrames appends the session.event frame of each object to buf
// (one buffer for them all) and the frames, slices of it, to frames.
func AppendEventFrames(buf []byte, frames, objs [][]byte) ([]byte, [][]byte) {
	if len(buf) == 0 {
		n := 0
		for _, o := range objs {
			n += len(o) + len(eventFramePrefix) + len(eventFrameSuffix)
		}
		buf = make([]byte, 0, n)
	}
	for _, o := range objs {
		at := len(buf)
		buf = append(append(append(buf, eventFramePrefix...), o...), eventFrameSuffix...)
		frames = append(frames, buf[at:len(buf):len(buf)])
	}
	return buf, frames
}

// StoredEvents renders stored events of one session exactly as
// AppendStoredEvent does, keeping from one event to the next what they
// share: the rendered session id, the last kind, and the date and clock
// of the last timestamp's second. A page of a session's events then
// formats its date once a second rather than once an event.
type StoredEvents struct {
	head  []byte // {"sessionId":"…","seq":
	kind  string // the last kind, and its rendering:
	kindJ []byte // ,"kind":"…","payload":
	sec   int64  // the Unix second of clock
	clock []byte // "2006-01-02T15:04:05. of sec (with the quote)
}

// NewStoredEvents returns a renderer of sessionID's stored events.
func NewStoredEvents(sessionID string) *StoredEvents {
	return &StoredEvents{head: eventHead(sessionID)}
}

// eventHead is the start of an event object up to its seq.
func eventHead(sessionID string) []byte {
	return append(appendString(append([]byte(nil), `{"sessionId":`...), sessionID), `,"seq":`...)
}

// Append appends the event's rendering to b (AppendStoredEvent's bytes).
func (r *StoredEvents) Append(b []byte, seq int64, kind string, ts time.Time, payload []byte, d Delivery) []byte {
	return appendTail(r.appendTS(r.appendHead(b, seq, kind, payload), ts), d)
}

// appendHead and appendTail are the one writer of an event object, around
// its ts: the session's head, seq, kind and payload (null when empty), then
// the delivery's member and the closing brace.
func (r *StoredEvents) appendHead(b []byte, seq int64, kind string, payload []byte) []byte {
	b = strconv.AppendInt(append(b, r.head...), seq, 10)
	if r.kindJ == nil || kind != r.kind {
		r.kind = kind
		r.kindJ = append(appendString(append(r.kindJ[:0], `,"kind":`...), kind), `,"payload":`...)
	}
	return append(appendPayload(append(b, r.kindJ...), payload), `,"ts":`...)
}

func appendTail(b []byte, d Delivery) []byte {
	switch d {
	case Unstored:
		// Sent from memory: the store could not take it yet.
		b = append(b, `,"unstored":true`...)
	case Retracted:
		b = append(b, retractedTail...)
	}
	return append(b, '}')
}

// appendTS appends ts as a quoted protocol timestamp, formatting its date
// and clock once a second.
func (r *StoredEvents) appendTS(b []byte, ts time.Time) []byte {
	if sec := ts.Unix(); r.clock != nil && sec == r.sec {
		ms := ts.Nanosecond() / 1e6
		return append(append(b, r.clock...), byte('0'+ms/100), byte('0'+ms/10%10), byte('0'+ms%10), 'Z', '"')
	}
	at := len(b)
	b = append(b, '"')
	b = AppendTimestamp(b, ts)
	b = append(b, '"')
	// The clock of this second, when the rendering has the usual shape
	// ("2006-01-02T15:04:05.000Z", years 0 to 9999).
	if t := b[at:]; len(t) == 26 && t[20] == '.' {
		r.sec, r.clock = ts.Unix(), append(r.clock[:0], t[:21]...)
	} else {
		r.clock = nil
	}
	return b
}

func appendPayload(b, payload []byte) []byte {
	if len(payload) > 0 {
		return append(b, payload...)
	}
	return append(b, "null"...)
}

// Delivery is how an event reaches its reader: the member of
// SessionEvent's delivery oneof that its object carries.
type Delivery uint8

const (
	// Stored is an event read from, or committed to, the store.
	Stored Delivery = iota
	// Unstored is sent from memory: the store could not take it yet
	// ("unstored": true).
	Unstored
	// Retracted is a lease_lost notice, never stored ("retracted": true).
	Retracted
)

// DeliveryOf is the delivery of an event with these flags.
func DeliveryOf(unstored, retracted bool) Delivery {
	switch {
	case retracted:
		return Retracted
	case unstored:
		return Unstored
	}
	return Stored
}

// retractedTail ends the object of a retracted notice.
const retractedTail = `,"retracted":true`

// IsRetracted reports whether an event object (AppendStoredEvent's bytes)
// is a retracted notice: its seq is one the log gives to another event,
// and the reader reads on after seq - 1.
func IsRetracted(object []byte) bool {
	return bytes.HasSuffix(object, []byte(retractedTail+"}"))
}

// AppendTimestamp appends t in UTC as events.TimeFormat renders it (no
// quotes), without going through time's layout interpreter for the years
// 0 to 9999.
func AppendTimestamp(b []byte, t time.Time) []byte {
	t = t.UTC()
	year, month, day := t.Date()
	if year < 0 || year > 9999 {
		return t.AppendFormat(b, events.TimeFormat)
	}
	hour, minute, sec := t.Clock()
	ms := t.Nanosecond() / 1e6
	return append(b,
		byte('0'+year/1000), byte('0'+year/100%10), byte('0'+year/10%10), byte('0'+year%10), '-',
		byte('0'+int(month)/10), byte('0'+int(month)%10), '-',
		byte('0'+day/10), byte('0'+day%10), 'T',
		byte('0'+hour/10), byte('0'+hour%10), ':',
		byte('0'+minute/10), byte('0'+minute%10), ':',
		byte('0'+sec/10), byte('0'+sec%10), '.',
		byte('0'+ms/100), byte('0'+ms/10%10), byte('0'+ms%10), 'Z')
}
