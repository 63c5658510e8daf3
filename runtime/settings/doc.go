// Package settings is the settings document of snowpea 1.7's settings.get,
// settings.set and system.reloadSettings.
//
// The document is one JSON object. Its "providers" section is the provider
// configuration itself (runtime/provider): reading it shows each vendor's
// effective settings, writing it configures the vendor as
// provider.configure does. Every other section is kept as written, in the
// store (shared by the daemons of a cluster), for clients to read back;
// the daemon does not act on it. Credentials are kept only by the provider
// configuration: a field named like one (api_key, token, refresh_token,
// password) is refused outside "providers" and masked as "***" in every
// answer. Each Set or Reload that changed a top-level section tells the
// watchers which (Service.Watch: the settings.changed notification).
package settings
