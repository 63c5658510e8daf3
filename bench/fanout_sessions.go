package bench

import (
	"context"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
)

// fanoutSessions is Fanout with Sessions sessions of one client each (the
// other shape of issue 12's fan-out target): every session streams its
// share of Events at once, first to one direct gRPC Subscribe stream per
// session (one gRPC connection each), then to one WebSocket client per
// session that resumed it. Throughput is the model chunks delivered to all
// clients per second, from the first prompt to the last turn.done.
func fanoutSessions(ctx context.Context, opts FanoutOptions) (Result, error) {
	perSession := max(opts.Events/opts.Sessions, 1000)
	r := Result{Bench: "fanout", Title: fmt.Sprintf("WebSocket facade vs direct gRPC, %d streaming sessions × 1 client", opts.Sessions),
		Params: []Param{{"sessions", opts.Sessions}, {"clients_per_session", 1},
			{"events_per_session", perSession}, {"rounds", opts.Rounds}}}
	h, driver, err := opts.Daemon.startDriven(ctx, &r, streamScript(scriptStep{match: "fanout", deltas: perSession}))
	if err != nil {
		return r, err
	}
	defer h.close()
	sids := make([]string, opts.Sessions)
	for i := range sids {
		if sids[i], err = h.createSession(ctx, driver); err != nil {
			return r, err
		}
	}
	if err := runTurn(ctx, h, driver, sids[0], "warm up"); err != nil {
		return r, err
	}
	d, f, err := alternateRounds(h, opts.Rounds,
		fmt.Sprintf("%d sessions, one direct gRPC subscriber each", opts.Sessions), fmt.Sprintf("%d sessions, one WebSocket client each", opts.Sessions),
		func(viaWS bool) (phaseResult, error) { return sessionsPhase(ctx, h, driver, sids, perSession, viaWS) })
	if err != nil {
		return r, err
	}
	r.figure("direct_deltas_per_s", d.rate, "deltas/s", "direct gRPC, all sessions")
	r.figure("facade_deltas_per_s", f.rate, "deltas/s", "WebSocket facade, all sessions")
	r.figure("ratio", ratio(f.rate, d.rate), "facade/direct", "facade / direct")
	r.figure("direct_cpu_cores", d.cores, "cores", cpuLabel(h)+", direct")
	r.figure("facade_cpu_cores", f.cores, "cores", cpuLabel(h)+", facade")
	if d.rate > 0 && f.rate > 0 && d.cores > 0 && f.cores > 0 {
		// CPU per delivered event, from the same run: steadier than the
		// rates on a shared machine.
		r.figure("direct_cpu_us_per_delta", d.cores/d.rate*1e6, "µs", cpuLabel(h)+" per model chunk, direct")
		r.figure("facade_cpu_us_per_delta", f.cores/f.rate*1e6, "µs", cpuLabel(h)+" per model chunk, facade")
	}
	r.figure("lost", float64(d.lost+f.lost), "deltas", "model chunks lost or duplicated")
	r.target("ratio", ">=", 0.9)
	r.target("lost", "==", 0)
	r.finish()
	return r, nil
}

// sessionsPhase subscribes one client of one kind to each session, then
// prompts every session at once and waits for every turn.done.
func sessionsPhase(ctx context.Context, h *daemonHandle, driver *grpc.ClientConn, sids []string, perSession int, viaWS bool) (phaseResult, error) {
	var out phaseResult
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	epoch := time.Now()
	recs := make([]*turnRecorder, len(sids))
	bases := make([]int64, len(sids))
	for i, sid := range sids {
		base, err := lastSeq(ctx, driver, sid)
		if err != nil {
			return out, err
		}
		bases[i] = base
		recs[i] = newTurnRecorder(base, perSession, epoch)
		slot := newSlot(recs[i])
		if viaWS {
			c, err := h.subscribeWS(ctx, sid, base, slot)
			if err != nil {
				return out, err
			}
			defer c.close()
			continue
		}
		conn, err := h.dialGRPC()
		if err != nil {
			return out, err
		}
		defer conn.Close()
		if err := subscribeGRPC(ctx, conn, sid, base, slot); err != nil {
			return out, err
		}
	}
	cpu0, _ := procCPU(h.pid)
	own0, _ := procCPU(os.Getpid())
	start := time.Now()
	for _, sid := range sids {
		if _, err := prompt(ctx, driver, sid, "fanout"); err != nil {
			return out, err
		}
	}
	if err := waitAll(ctx, recs); err != nil {
		return out, err
	}
	cpu1, _ := procCPU(h.pid)
	own1, _ := procCPU(os.Getpid())
	var end, delivered int64
	for _, rec := range recs {
		end = max(end, rec.doneAt.Load())
		delivered += rec.received.Load()
		out.lost += rec.missing() + rec.dups.Load()
	}
	took := epoch.Add(time.Duration(end)).Sub(start)
	out.rate = rate(delivered, took)
	out.cores = ratio((cpu1 - cpu0).Seconds(), took.Seconds())
	out.clientCores = ratio((own1 - own0).Seconds(), took.Seconds())
	return out, nil
}
