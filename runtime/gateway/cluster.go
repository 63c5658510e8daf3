package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/trellis-run/trellis/runtime/store"
)

// The gateway on a store several daemons share (Deps.Leases and
// Options.Refresh): every daemon knows every binding (it reads them again
// every Refresh), and the inbound side of a binding that pulls its messages
// (a Telegram poller) runs on the one daemon holding the binding's lease,
// "gateway/<bindingId>", so that each message is taken once. When that
// daemon stops or dies, another one claims the lease once it is free or
// expired and polls on from the offset kept in the store. Webhook messages
// are pushed to whichever daemon's receiver the sender reaches, and run
// there, once; the reply is made under the lease of the session that
// answered (doc.go).

// leaseKey names a binding's lease.
func leaseKey(bindingID string) string { return "gateway/" + bindingID }

// loadLeased reads the value binding id keeps in namespace (the Telegram
// offset, the Discord session state) into v, which stays as it is when
// there is none or it does not parse.
func (s *Service) loadLeased(ctx context.Context, namespace, id string, v any) {
	if raw, err := s.deps.Settings.GetSetting(ctx, namespace, id); err == nil {
		_ = json.Unmarshal(raw, v)
	}
}

// saveLeased stores v as binding b's value in namespace (what names it in
// an error), under b's lease when daemons share the store: a deposed
// daemon's is refused, and the new holder's stays.
func (s *Service) saveLeased(ctx context.Context, b *binding, namespace, what string, v any) error {
	id := b.rec.BindingID
	w := store.Unfenced()
	if s.deps.Leases != nil {
		f, ok := s.deps.Leases.Fence(leaseKey(id))
		if !ok {
			return fmt.Errorf("save %s of binding %s: %w %s", what, id, errNotOwner, leaseKey(id))
		}
		w = store.Under(f)
	}
	raw, _ := json.Marshal(v)
	return s.deps.Settings.PutSetting(ctx, w, namespace, id, raw)
}

// claim runs b's poller here if this daemon gets (or has) b's lease.
func (s *Service) claim(ctx context.Context, b *binding) {
	if ctx.Err() != nil || !pulls(b) {
		return
	}
	b.mu.Lock()
	refused := b.refused
	b.mu.Unlock()
	if refused {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	got, err := s.deps.Leases.AcquireResource(cctx, leaseKey(b.rec.BindingID), func() { s.stopPoller(b) })
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("claim a gateway binding's lease", "bindingId", b.rec.BindingID, "err", err)
		}
		return
	}
	if !got {
		s.stopPoller(b) // another daemon polls it
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.bindings[b.rec.BindingID] != b {
		return
	}
	s.startPollerLocked(ctx, b)
}

// stopPoller ends b's poller here, if one runs.
func (s *Service) stopPoller(b *binding) {
	b.mu.Lock()
	stop := b.polling
	b.polling = nil
	b.mu.Unlock()
	if stop != nil {
		stop()
		s.log.Info("gateway binding's inbound channel left to another daemon", "bindingId", b.rec.BindingID)
	}
}

// release stops b's poller and gives its lease back.
func (s *Service) release(b *binding) {
	s.stopPoller(b)
	if s.deps.Leases != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.deps.Leases.Release(ctx, leaseKey(b.rec.BindingID))
	}
}

// refuse gives b's lease back once its platform refused the binding for
// good: no daemon holds a binding that cannot connect, and this one does
// not claim it again, so each daemon tries it at most once (another one
// may hold a credential that works) instead of all of them in turn at
// every refresh.
func (s *Service) refuse(b *binding) {
	b.mu.Lock()
	b.refused = true
	b.mu.Unlock()
	if s.deps.Leases != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.deps.Leases.Release(ctx, leaseKey(b.rec.BindingID))
	}
}

// refreshLoop reads the bindings again every Options.Refresh.
func (s *Service) refreshLoop() {
	t := time.NewTicker(s.opts.Refresh)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		s.refresh(s.ctx)
	}
}

// refresh starts the bindings made through other daemons, stops the ones
// removed, takes in the conversations other daemons remembered, and claims
// the leases of the pollers nobody runs.
func (s *Service) refresh(ctx context.Context) {
	recs, err := s.deps.Settings.ListSettings(ctx, Namespace)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("gateway: read the bindings again", "err", err)
		}
		return
	}
	seen := map[string]bool{}
	for _, st := range recs {
		seen[st.Key] = true
		s.mu.Lock()
		b := s.bindings[st.Key]
		s.mu.Unlock()
		if b == nil {
			if err := s.restore(st); err != nil {
				return // closing
			}
			s.log.Info("gateway binding made through another daemon started", "bindingId", st.Key)
			continue
		}
		var rec record
		if json.Unmarshal(st.Value, &rec) == nil {
			b.mu.Lock()
			b.rec.Conversations = rec.Conversations
			b.mu.Unlock()
		}
		if s.deps.Leases != nil {
			s.claim(b.ctx, b)
		}
	}
	s.mu.Lock()
	var gone []*binding
	for id, b := range s.bindings {
		if !seen[id] {
			delete(s.bindings, id)
			gone = append(gone, b)
		}
	}
	s.mu.Unlock()
	for _, b := range gone {
		if b.cancel != nil {
			b.cancel()
		}
		s.release(b)
		s.log.Info("gateway binding removed through another daemon stopped", "bindingId", b.rec.BindingID)
	}
}

// updateRecord changes a binding's stored record atomically when the store
// can (store.SettingUpdater: in one transaction holding the row, so that
// daemons changing one binding at once lose no change), else by a put.
func (s *Service) updateRecord(ctx context.Context, id string, fn func(*record)) error {
	if up, ok := s.deps.Settings.(store.SettingUpdater); ok {
		return up.UpdateSetting(ctx, store.Unfenced(), Namespace, id, func(old json.RawMessage) (json.RawMessage, error) {
			var rec record
			if err := json.Unmarshal(old, &rec); err != nil {
				return nil, err
			}
			fn(&rec)
			return json.Marshal(rec)
		})
	}
	raw, err := s.deps.Settings.GetSetting(ctx, Namespace, id)
	if err != nil {
		return err
	}
	var rec record
	if err := json.Unmarshal(raw, &rec); err != nil {
		return err
	}
	fn(&rec)
	return s.save(ctx, rec)
}
