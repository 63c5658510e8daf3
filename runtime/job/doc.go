// Package job runs prompts on schedules: it parses schedule specs, keeps job
// definitions, and fires each slot of a schedule exactly once through a River
// queue, each fire running the job's task in a new session of kind scheduled.
//
// On a store several daemons share (Deps.Leases), a fire is worked under
// the job's lease ("job/<jobId>"): the daemon takes it, advances the slot
// with a write the store fences with it, and starts the run only if its own
// monotonic clock still says it holds it. A job.runNow run starts the same
// way, its fenced write a re-read of the job; refused, it is overloaded. A daemon that cannot take it or
// loses it before the start starts nothing and puts the fire back in the
// queue (the advanced slot is remembered in Def.Advanced, so the attempt
// that runs it does not skip it). The run's start is recorded under the
// lease, which is then given back: the run goes on under its session's
// lease, and its answer is posted to the job's channel only under that
// session's fence.
package job
