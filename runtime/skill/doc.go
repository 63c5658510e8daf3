// Package skill installs, finds and loads skills: folders with a SKILL.md whose instructions a /name command runs.
//
// A SKILL.md starts with front matter naming the skill (name: [a-z0-9-]+)
// and saying what it does (description:); the rest is the instructions.
// The folder may hold any files the instructions use.
//
// Installed skills live in <home>/skills/<name>/. Each one adds a /<name>
// slash command whose prompt is the skill's instructions followed by the
// command's arguments (or with them in place of $ARGUMENTS, as in project
// commands).
//
// Install takes a local folder, a .tar.gz (.tgz) or .zip file, or a git
// URL (file://, https://, ssh:// or user@host:path, cloned with
// `git clone --depth 1`). Whatever the source, the skill is staged in a
// hidden folder under <home>/skills and checked there before it is moved
// into place: archive entries may not leave the folder (no absolute paths,
// no "..", no hard links or device files), symbolic links must resolve
// inside the skill, and a skill may hold at most Limits.MaxFiles entries
// and Limits.MaxBytes bytes. The SKILL.md may sit at the top of the source
// or in its only folder. Where a skill came from is kept in
// <home>/skills/<name>/.trellis-source, so that installing it again from
// the same source replaces it, while another source with the same name is
// refused.
//
// The catalog is what skill.search offers beyond the installed skills:
// every folder holding a SKILL.md directly under <home>/skill-catalog/,
// and under each folder of the TRELLIS_SKILL_CATALOG environment variable
// (a list separated like PATH; a listed folder that itself holds a SKILL.md
// is one entry). Catalog entries are read at each search, reported with
// installed false and their folder as source, and installed with
// skill.install({source: that folder}).
//
// Install, Remove and Reload publish an Event to every Watch
// (SkillService.WatchCommands, the commands.changed notification).
package skill
