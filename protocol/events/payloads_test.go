package events_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/proto/trellis/v1/eventkind"
	"github.com/trellis-run/trellis/protocol/codec"
	"github.com/trellis-run/trellis/protocol/events"
)

// payloadTypes is the generated Go type of each event kind's payload.
var payloadTypes = map[string]any{
	eventkind.TurnStarted:       events.TurnStartedEvent{},
	eventkind.MessageUser:       events.MessageUserEvent{},
	eventkind.MessageReasoning:  events.MessageReasoningEvent{},
	eventkind.MessageDelta:      events.MessageDeltaEvent{},
	eventkind.MessageDone:       events.MessageDoneEvent{},
	eventkind.ToolCall:          events.ToolCallEvent{},
	eventkind.ToolProgress:      events.ToolProgressEvent{},
	eventkind.ToolResult:        events.ToolResultEvent{},
	eventkind.Diff:              events.DiffEvent{},
	eventkind.Usage:             events.UsageEvent{},
	eventkind.Context:           events.ContextEvent{},
	eventkind.Error:             events.ErrorEvent{},
	eventkind.TurnQueued:        events.TurnQueuedEvent{},
	eventkind.TurnDequeued:      events.TurnDequeuedEvent{},
	eventkind.TurnDone:          events.TurnDoneEvent{},
	eventkind.ModeChanged:       events.ModeChangedEvent{},
	eventkind.BackendChanged:    events.BackendChangedEvent{},
	eventkind.SubagentSpawn:     events.SubagentSpawnEvent{},
	eventkind.SubagentUpdate:    events.SubagentUpdateEvent{},
	eventkind.SubagentDone:      events.SubagentDoneEvent{},
	eventkind.TeamTaskUpdate:    events.TeamTaskUpdateEvent{},
	eventkind.CompactionStarted: events.CompactionStartedEvent{},
	eventkind.Compaction:        events.CompactionEvent{},
	eventkind.StepStarted:       events.StepStartedEvent{},
	eventkind.StepDone:          events.StepDoneEvent{},
	eventkind.TurnSteered:       events.TurnSteeredEvent{},
	eventkind.TurnRollback:      events.TurnRollbackEvent{},
	eventkind.ModelChanged:      events.ModelChangedEvent{},
	eventkind.ProviderRetry:     events.ProviderRetryEvent{},
	eventkind.TurnPaused:        events.TurnPausedEvent{},
	eventkind.TurnResumed:       events.TurnResumedEvent{},
	eventkind.Checkpoint:        events.CheckpointEvent{},
	eventkind.SessionRewound:    events.SessionRewoundEvent{},
}

// fill sets every field of v: scalars to a non-zero value, pointers to a
// filled value, slices to one filled element, JSON to a small object. With
// full false, pointers and JSON stay nil and slices are empty. Strings
// hold no <, > or &, which encoding/json escapes and the event log's
// rendering (codec.Marshal) writes as they are.
func fill(v reflect.Value, full bool) {
	switch v.Kind() {
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			fill(v.Field(i), full)
		}
	case reflect.Pointer:
		if full {
			v.Set(reflect.New(v.Type().Elem()))
			fill(v.Elem(), full)
		}
	case reflect.Slice:
		if v.Type() == reflect.TypeOf(json.RawMessage(nil)) {
			if full {
				v.SetBytes([]byte(`{"k":[1,"x"]}`))
			}
			return
		}
		s := reflect.MakeSlice(v.Type(), 0, 1)
		if full {
			e := reflect.New(v.Type().Elem()).Elem()
			fill(e, full)
			s = reflect.Append(s, e)
		}
		v.Set(s)
	case reflect.String:
		v.SetString("s \"q\" é")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		v.SetInt(-7)
	case reflect.Float64:
		v.SetFloat(12.5)
	}
}

// TestPayloadsRenderAsTheProtocol: each generated payload type, marshalled
// with encoding/json as the producers do, is byte for byte what the event
// log stores for it (its payload message as codec.Marshal renders it),
// with every field set and with none; a field with (omit_unset) is left out
// where the protocol has null.
func TestPayloadsRenderAsTheProtocol(t *testing.T) {
	for _, kind := range eventkind.All {
		zero, ok := payloadTypes[kind]
		if !ok {
			t.Errorf("%s: no generated payload type in the test's table", kind)
			continue
		}
		for _, full := range []bool{true, false} {
			v := reflect.New(reflect.TypeOf(zero)).Elem()
			fill(v, full)
			got, err := json.Marshal(v.Interface())
			if err != nil {
				t.Fatal(err)
			}
			msg := (&trellisv1.SessionEvent{}).ProtoReflect().NewField(codec.PayloadMember(kind)).Message().Interface()
			if err := protojson.Unmarshal(got, msg); err != nil {
				t.Errorf("%s: %s does not decode as its payload message: %v", kind, got, err)
				continue
			}
			want := string(codec.Marshal(msg))
			for i := 0; i < v.NumField(); i++ {
				name, opts, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ",")
				if opts == "omitempty" && v.Field(i).IsZero() {
					want = strings.Replace(want, `,"`+name+`":null`, "", 1)
				}
			}
			if string(got) != want {
				t.Errorf("%s (full %v):\n got %s\nwant %s", kind, full, got, want)
			}
		}
	}
}
