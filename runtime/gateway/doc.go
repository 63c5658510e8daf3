// Package gateway binds chat platforms (webhook, Telegram: telegram.go,
// Slack: slack.go, Discord: discord.go) to agents and sessions: a message arriving on a bound
// channel becomes a prompt of the binding's session and the turn's answer is
// posted back.
//
// Credentials are named by reference, never stored: "env:NAME" reads the
// daemon's environment, "secret:NAME" reads the file
// <home>/secrets/gateway/NAME, which the operator places with mode 0600
// (for example `install -m 0600 /dev/stdin ~/.trellis/secrets/gateway/NAME`).
// A bare "NAME" (snowpea's form, e.g. "telegram") is the first of the secret
// file NAME, the environment's TRELLIS_<NAME>_TOKEN and <NAME>_BOT_TOKEN;
// agent.bindChannel without a reference uses the platform's name.
// A credential's value never appears in a result, an event or a log line.
//
// Inbound webhook messages arrive on a small HTTP receiver the service runs
// on a loopback address (Addr): POST /v1/gateway/webhook/{bindingId} with the
// header X-Trellis-Signature: sha256=<hex HMAC-SHA256 of the body keyed by
// the binding's credential>.
//
// Slack and Telegram stream an answer through one answerStream
// (stream.go: post at the first text, edit at a bounded rate) and put a
// turn's approval requests to the chat with followApprovals.
//
// A Discord binding connects to Discord's Gateway WebSocket and posts
// through its REST API (discord.go: heartbeats, resume, the session state
// kept under the binding's lease; discord_turn.go: streamed replies and
// approval buttons; discord_rest.go: rate limits).
//
// Every outbound post is fenced, as a tool's tool.call event is stored
// before the tool runs: the post is first recorded in the store
// (PostsNamespace, one row per binding) under the lease it is made under,
// and is not made when that record is refused or cannot be stored. A
// Telegram reply is made under the binding's lease ("gateway/<bindingId>",
// held by the daemon that polls it), judged on this daemon's monotonic
// clock before and after the record and by the store in the record's
// transaction; the poller's update offset is saved under it too, and a
// poller whose offset is refused stops. A webhook reply (the HTTP answer,
// or the POST to the message's replyUrl) is made under the lease of the
// session whose turn answered, as it stood when the turn began: this
// daemon's (judged on its clock too) or, when the prompt was forwarded to
// the daemon serving the session, that daemon's as the store had it; a
// refused reply is an HTTP 409 (or no POST) and a gateway.event error.
// Post (a job's answer) is recorded under the store.Writer its caller
// passes (the lease of the run's session). A gateway.event reply is
// published only once its reply was made.
package gateway
