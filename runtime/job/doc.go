// Package job runs prompts on schedules: it parses schedule specs, keeps job
// definitions, and fires each slot of a schedule exactly once through a River
// queue, each fire running the job's task in a new session of kind scheduled.
package job
