/** The protocol version these types describe (semver). */
export declare const PROTOCOL_VERSION = "1.0.0";
/** AddAllowlistPatternRequest are the params of permission.allowlist.add. */
export interface AddAllowlistPatternRequest {
    /** `tool` or `tool(glob)`. */
    pattern: string;
    /** Default: `"project"`. */
    scope?: "session" | "project" | "always" | "site";
    /** Omitted: the subject (workdir for project, sessionId for session) is taken from the caller's session when the caller has exactly one. */
    workdir?: string;
    sessionId?: string;
}
/** AddAllowlistPatternResponse is the result of permission.allowlist.add. */
export interface AddAllowlistPatternResponse {
    patternId: string;
}
/** AddMcpServerRequest are the params of mcp.add. */
export interface AddMcpServerRequest {
    /** Server name: 1-40 letters, digits, _ or -. */
    name: string;
    /** Arguments, argv style. */
    args?: string[];
    /** Executable of a stdio server. */
    command?: string;
    cwd?: string;
    /** Keep the entry but never start the server. */
    disabled?: boolean;
    /** Environment of the child process. */
    env?: Record<string, string>;
    /** HTTP headers sent with every request. */
    headers?: Record<string, string>;
    /** snowpea's permission tag of the server's tools: unsupported (Trellis tags MCP tools by their annotations). */
    permission?: "read" | "write" | "exec" | "network" | "send" | "config" | "delegate" | "secret";
    /** Startup cap, in seconds. */
    timeoutSec?: number;
    /** Per-call cap, in seconds. */
    toolTimeoutSec?: number;
    /** Unsupported: every tool of a server is registered. */
    toolsExclude?: string[];
    toolsInclude?: string[];
    /** Force a transport instead of inferring it. */
    type?: "stdio" | "http" | "sse";
    /** Endpoint of an http or sse server. */
    url?: string;
    /** Replace an existing entry. */
    force?: boolean;
    /** snowpea's catalog preset: unsupported (Trellis ships no catalog). */
    preset?: string;
    /** "global" (<home>/mcp.json) only: Trellis has no project MCP files. Default: `"global"`. */
    scope?: "project" | "global";
    /** A session (not_found otherwise); narrows nothing. */
    sessionId?: string;
    /** Probe the server before saving; nothing is written if it fails. */
    test?: boolean;
    /** An existing directory (not_found otherwise); narrows nothing. */
    workdir?: string;
}
/** AddMcpServerResponse is the result of mcp.add. */
export interface AddMcpServerResponse {
    /** True when the entry was written. */
    ok: boolean;
    /** The file written (<home>/mcp.json). */
    path: string;
    /** The server's state once it started or failed (at most its startup cap): stopped (disabled), starting, ready or error. */
    state: "stopped" | "starting" | "ready" | "error";
    error: string | null;
    tools: McpToolInfo[];
    /** Always empty: Trellis runs no security review of an entry. */
    warnings: string[];
}
/** Agent is a definition or a running sub-agent. */
export interface Agent {
    name: string;
    description: string;
    kind: "definition" | "subagent";
    source: string;
    path: string | null;
    agentId: string | null;
    status: string | null;
    task: string | null;
    sessionId: string | null;
    parentSessionId: string | null;
    channels: string[];
}
/** AllowlistPattern is one allowlist entry. */
export interface AllowlistPattern {
    patternId: string;
    pattern: string;
    scope: "session" | "project" | "always";
    workdir: string | null;
    createdAt: string;
    /** Who added the entry (with permission.allowlist.add, or by answering an approval with a scope wider than once), its name then; null when no principal was recorded (entries older than principals). */
    principal: PrincipalRef | null;
}
/** ApiKey describes one API key; its secret is never shown again. */
export interface ApiKey {
    keyId: string;
    principalId: string;
    name: string;
    /** The secret's first characters, to tell keys apart. */
    prefix: string;
    createdAt: string;
    expiresAt: string | null;
    revokedAt: string | null;
    /** Most calls per second the key may make (absent = no limit). */
    ratePerSecond: number | null;
    /** Most sessions the key's prompts may keep running at once (absent = no limit). */
    maxRunningSessions: number | null;
}
/** ApprovalPending is the approval.pending notification. */
export interface ApprovalPending {
    request: ApprovalRequest;
}
/** ApprovalReply is the result of the approval.request server → client request. */
export interface ApprovalReply {
    decision: "allow" | "deny";
    /** once | session | project | always | site (site = the whole daemon, as always). An unknown scope never changes the decision: an allow with one takes effect once and says so in the resolution's reason. Default: `"once"`. */
    scope?: string;
    reason?: string;
}
/** ApprovalRequest asks a person to allow one tool call. It is the params of the approval.request server → client request. On a WebSocket connection that receives the session's events, it comes after the session.event notifications of every event stored before it (the turn's turn.started, message.user and the model's answer that made the call). */
export interface ApprovalRequest {
    requestId: string;
    sessionId: string;
    turnId: string;
    callId: string;
    tool: string;
    args: Record<string, unknown>;
    permissionTag: "read" | "write" | "exec" | "network" | "send" | "config" | "delegate" | "secret";
    risk: "low" | "medium" | "high";
    /** Default: `300`. */
    timeoutSec: number;
    /** The suggested scope of an allow (the scope enum of ApprovalReply). */
    scopeHint: "once" | "session" | "project" | "always" | "site";
    note: string;
    /** The allowlist pattern an answer with a scope wider than once adds. */
    pattern: string;
    /** In approval.list's answer with includeInteractive: true for a request put to its session's own client, which alone answers it. Absent elsewhere. */
    interactive: boolean | null;
}
/** ApprovalResolved is the approval.resolved notification. */
export interface ApprovalResolved {
    requestId: string;
    decision: "allow" | "deny";
    /** Who decided: the answering origin (a connection or client id, "grpc" for a gRPC caller without one), or "timeout", "interrupt", "disconnect", "shutdown" when nobody answered. `principal` says who. */
    by: string;
    /** The principal who answered (whichever daemon it answered through); null when nobody did. */
    principal: PrincipalRef | null;
}
/** ArchiveSessionRequest are the params of session.archive. */
export interface ArchiveSessionRequest {
    sessionId: string;
}
/** ArchiveSessionResponse is the result of session.archive. */
export type ArchiveSessionResponse = Record<string, never>;
/** Artifact is one file under a session's artifacts/ directory. */
export interface Artifact {
    /** Its path relative to artifacts/. */
    name: string;
    /** Its absolute path. */
    path: string;
    size: number;
    /** RFC3339 UTC with milliseconds. */
    modifiedAt: string;
    /** From the file's extension; null when unknown. */
    mimeType: string | null;
}
/** Attachment is a file, image or text given with a prompt (at most 20 MB decoded). */
export interface Attachment {
    kind: "file" | "image" | "text";
    name?: string;
    path?: string;
    /** Base64. */
    data?: string;
    mimeType?: string;
    text?: string;
}
/** AttachmentRef names an attachment of a user message. */
export interface AttachmentRef {
    kind: "file" | "image" | "text";
    name: string | null;
}
/** BackendChangedEvent reports backend.set: {kind, ...public config}. */
export interface BackendChangedEvent {
    backend: Record<string, unknown>;
}
/** BindChannelRequest are the params of agent.bindChannel. */
export interface BindChannelRequest {
    name: string;
    channel: string;
    /** As gateway.bind's; default: the platform's name (telegram: the secret file telegram, else TRELLIS_TELEGRAM_TOKEN, else TELEGRAM_BOT_TOKEN). */
    credentialsRef?: string;
}
/** BindChannelResponse is Ok. */
export interface BindChannelResponse {
    ok: boolean;
}
/** BindRequest are the params of gateway.bind. */
export interface BindRequest {
    platform: "telegram" | "slack" | "discord" | "webhook";
    /** env:NAME, secret:NAME, or NAME (snowpea's form): the secret file NAME, else the daemon's environment's TRELLIS_<NAME>_TOKEN, else <NAME>_BOT_TOKEN. */
    credentialsRef: string;
    target: BindingTarget;
    channelId?: string;
    userId?: string;
    /** A slack binding's inbound side: socket (Socket Mode: the daemon opens a WebSocket with the app-level token) or events (the Events API: Slack POSTs signed requests to the gateway receiver's /v1/gateway/slack/{bindingId}). Absent: socket when the credential has an app-level token, events otherwise. Other platforms take none. */
    mode?: "socket" | "events";
}
/** BindResponse is the result of gateway.bind. */
export interface BindResponse {
    bindingId: string;
}
/** Binding describes one gateway binding. */
export interface Binding {
    bindingId: string;
    platform: string;
    target: string;
    channelId: string | null;
    userId: string | null;
    state: "active" | "error";
    lastError: string | null;
    /** The principal that made the binding and owns the sessions its conversations create (its name then); null for the daemon token. */
    owner: PrincipalRef | null;
}
/** BindingTarget is {agent: name} | {session: id} | {newSession: {workdir, mode}}. */
export type BindingTarget = ({
    agent: string;
    session?: never;
    newSession?: never;
} | {
    agent?: never;
    session: string;
    newSession?: never;
} | {
    agent?: never;
    session?: never;
    newSession: NewSessionTarget;
});
/** Budget is a spending limit of a session's model calls: its total cost in millionths of a US dollar, its total tokens (input + output), or both. An absent limit is no limit. */
export interface Budget {
    maxCostMicroUsd: number | null;
    maxTokens: number | null;
    /** Where the limits come from: the session's own (session.setBudget, or the job that ran it), its agent definition's, or the daemon's default (--budget-default-cost-micro-usd, --budget-default-tokens); none when nothing limits the session. principal: the budget of the principal that created the session (principal.setBudget), which every session of that principal spends together; it binds when it is reached, or when the session has no budget of its own. */
    source: "session" | "agent" | "default" | "principal" | "none";
    /** The principal whose budget it is; only with source principal. */
    principalId: string | null;
}
/** BudgetSpent is what a session's model calls spent so far, as its stored usage events total it (for a budget of source principal, what every session of that principal spent). */
export interface BudgetSpent {
    costMicroUsd: number;
    /** Input + output tokens. */
    tokens: number;
}
/** CancelJobRequest are the params of job.cancel. */
export interface CancelJobRequest {
    jobId: string;
}
/** CancelJobResponse is Ok. */
export interface CancelJobResponse {
    ok: boolean;
}
/** Checkpoint is one recorded state of a session's workdir. */
export interface Checkpoint {
    checkpointId: string;
    /** The seq of the checkpoint event that announced it. */
    seq: number;
    /** tool: right before a tool that may change the workdir ran; turn: at the end of a turn that ran one; restore: after checkpoint.restore; materialise: a daemon put the latest checkpoint back into a managed workdir that was missing or behind it, before a turn. */
    reason: "tool" | "turn" | "restore" | "materialise";
    /** The turn that recorded it; null for a restore's. */
    turnId: string | null;
    /** The tool and call a tool checkpoint was recorded before. */
    tool: string | null;
    callId: string | null;
    /** Files and symlinks recorded, and the files' total size in bytes. */
    files: number;
    bytes: number;
    skipped: CheckpointSkip[];
    /** RFC3339 UTC with milliseconds. */
    createdAt: string;
}
/** CheckpointChange is one path that differs. */
export interface CheckpointChange {
    path: string;
    status: "added" | "deleted" | "modified";
    /** The path's kind after the change (before it, for a deleted path). */
    kind: "file" | "dir" | "symlink";
}
/** CheckpointEvent announces a checkpoint of the session's workdir (docs/workspaces.md, checkpoint.list): recorded right before a tool that may change the workdir runs (write_file, edit_file, shell, MCP tools tagged write or exec), at the end of a turn that ran such a tool (before its message.done), after checkpoint.restore, and when a daemon put the latest checkpoint back into a managed workdir before a turn (reason materialise, restoredFrom that checkpoint). Otherwise a state equal to the session's latest checkpoint is not recorded again. The checkpoint's seq is this event's. */
export interface CheckpointEvent {
    checkpointId: string;
    reason: "tool" | "turn" | "restore" | "materialise";
    turnId: string | null;
    tool: string | null;
    callId: string | null;
    files: number;
    bytes: number;
    skipped: CheckpointSkip[];
    /** A restore's or a materialise's: the checkpoint put back. */
    restoredFrom: string | null;
}
/** CheckpointSkip is a path a checkpoint did not record, and why: an ignore rule matches it (ignored: a directory is listed once, not what it holds), it is larger than --checkpoint-max-file (too_large), it is not a file, a directory or a symlink (special), or it could not be read (unreadable). */
export interface CheckpointSkip {
    path: string;
    reason: "ignored" | "too_large" | "special" | "unreadable";
    /** A too_large file's size in bytes (0 otherwise). */
    size: number;
}
/** ClearQueueRequest are the params of session.queue.clear. */
export interface ClearQueueRequest {
    sessionId: string;
}
/** ClearQueueResponse counts the prompts removed. */
export interface ClearQueueResponse {
    removed: number;
}
/** CloseSessionRequest are the params of session.close. */
export interface CloseSessionRequest {
    sessionId: string;
}
/** CloseSessionResponse is Ok. */
export interface CloseSessionResponse {
    ok: boolean;
}
/** Command describes one slash command. */
export interface Command {
    name: string;
    summary: string;
    argsSchema: Record<string, unknown>;
    source: "builtin" | "project" | "skill";
}
/** CommandsChanged is the commands.changed notification. */
export interface CommandsChanged {
    commands: Command[];
    reason: string;
}
/** CompactRequest are the params of session.compact. */
export interface CompactRequest {
    sessionId: string;
    instructions?: string;
}
/** CompactResponse reports token estimates before and after. */
export interface CompactResponse {
    before: number;
    after: number;
    summaryChars: number;
}
/** CompactionEvent closes a compaction. */
export interface CompactionEvent {
    before: number;
    after: number;
    summaryChars: number;
    auto: boolean;
    /** The summary text ("" when nothing needed summarising); pi's compaction_end result carries it. */
    summary: string;
}
/** CompactionStartedEvent opens a compaction. */
export interface CompactionStartedEvent {
    reason: "manual" | "auto";
    before: number;
}
/** CompleteFileRequest are the params of file.complete. */
export interface CompleteFileRequest {
    /** The session whose workdir to complete in; or give workdir. */
    sessionId?: string;
    /** Completed in when no session is given. */
    workdir?: string;
    /** A partial path relative to the workdir: its directory part is listed and its last element matched as a case-insensitive prefix first, then as a substring. Default: `""`. */
    query?: string;
    /** Default: `30`. */
    limit?: number;
}
/** CompleteFileResponse is the result of file.complete. */
export interface CompleteFileResponse {
    entries: FileEntry[];
    /** More entries matched than limit. */
    truncated: boolean;
}
/** ConfigureProviderRequest are the params of provider.configure. */
export interface ConfigureProviderRequest {
    /** openai, anthropic or fake; another vendor is not_found. */
    vendor: string;
    config: ProviderConfig;
}
/** ConfigureProviderResponse is Ok. */
export interface ConfigureProviderResponse {
    ok: boolean;
}
/** ContentBlock is one block of a tool result's content. */
export interface ContentBlock {
    type: "text" | "image";
    text: string | null;
    /** Base64 bytes of an image block. */
    data: string | null;
    mediaType: string | null;
    contentRef: string | null;
}
/** ContextEvent reports how full the context window is, just before turn.done. */
export interface ContextEvent {
    used: number;
    window: number | null;
    percent: number | null;
}
/** Counters are live counts kept by the daemon. */
export interface Counters {
    sessions: number;
    runningTurns: number;
    jobs: number;
    gatewayBindings: number;
    connections: number;
}
/** CreateAgentRequest are the params of agent.create. */
export interface CreateAgentRequest {
    /** "" = generated from the description (a slug of its first words). */
    name: string;
    description: string;
    instructions?: string;
    tools?: string[];
    model?: string;
    /** Protocol 1.x: false asks for a generated name (name must then be empty); true (the default) keeps name as given. Default: `true`. */
    named?: boolean;
    /** The budget of each session of the agent that has none of its own: cost in micro-US-dollars and/or input + output tokens, each at least 0 (docs/budgets.md). A Trellis addition. */
    maxCostMicroUsd?: number;
    maxTokens?: number;
}
/** CreateAgentResponse is the result of agent.create. */
export interface CreateAgentResponse {
    name: string;
    path: string;
}
/** CreateKeyRequest are the params of key.create. */
export interface CreateKeyRequest {
    principalId: string;
    /** A label for the key (e.g. the machine or the service using it). */
    name?: string;
    /** RFC 3339 time after which the key is refused; absent = never. Must be in the future. */
    expiresAt?: string;
    /** Most calls per second the key may make, 1 to 10000 (a burst of one second's worth); more answer rate_limited. Absent = no limit. */
    ratePerSecond?: number;
    /** Most sessions the key's prompts (session.prompt, command.run) may keep running at once on one daemon, 1 to 1000: a prompt that would start a turn on one more idle session answers rate_limited (data.retryAfterMs) until one of them ends its turn. Prompts queued behind a running turn do not count. Absent = no limit. */
    maxRunningSessions?: number;
}
/** CreateKeyResponse is the result of key.create. */
export interface CreateKeyResponse {
    key: ApiKey;
    /** The key itself: send it as hello's token, as `Authorization: Bearer` on REST, or as gRPC `authorization: Bearer` metadata. Shown only here (and to a repeat of the call with its operation id and credential). */
    secret: string;
}
/** CreatePrincipalRequest are the params of principal.create. */
export interface CreatePrincipalRequest {
    /** Unique among principals. */
    name: string;
    role: "admin" | "operator" | "member" | "approver" | "viewer";
    /** Default: `"human"`. */
    kind?: "human" | "service";
    /** Limits a service principal to these agents ("default" is the agent of a session created without one); at most 64. Only for kind service. */
    agents?: string[];
    /** Limits a service principal to these workdirs and what is below them: absolute paths, at most 64. Only for kind service. */
    workdirs?: string[];
}
/** CreatePrincipalResponse is the result of principal.create. */
export interface CreatePrincipalResponse {
    principal: Principal;
}
/** CreateSessionRequest are the params of session.create. */
export interface CreateSessionRequest {
    /** Must exist: absolute, or relative to the daemon's cwd. Absent: the daemon makes a managed workspace for the session under its workspace root, which follows the session to whichever daemon runs it (docs/workspaces.md). */
    workdir: string;
    /** Default: `"accept"`. */
    mode?: "plan" | "accept" | "auto";
    provider?: string;
    model?: string;
    /** An agent definition (agent.list kind "definition"): its instructions, model and tools list apply to the session; unknown → not_found. */
    agent?: string;
    /** Reasoning effort asked of the model (protocol 1.x): passed to providers that take one (OpenAI reasoning_effort, Anthropic thinking budget). */
    effort?: "minimal" | "low" | "medium" | "high" | "max";
    /** The session runs no exec tools (protocol 1.x): a call to one is denied (mode_denied) without asking anyone, whatever the mode and allowlist. Kept with the session. Default: `false`. */
    denyExec?: boolean;
}
/** CreateSessionResponse is the result of session.create. */
export interface CreateSessionResponse {
    sessionId: string;
}
/** CreateSkillRequest are the params of skill.create. */
export interface CreateSkillRequest {
    name: string;
    /** The whole SKILL.md, written verbatim. Required: generating one from a description is not supported (docs/compat.md). */
    content?: string;
    description?: string;
    /** Overwrite the SKILL.md of an existing skill of that name. */
    force?: boolean;
    /** "global" only: Trellis has no project-scoped skills. Default: `"global"`. */
    scope?: "project" | "global";
    /** Ignored, as in snowpea when content is given. */
    sessionId?: string;
    /** As in skill.read. */
    workdir?: string;
}
/** CreateSkillResponse is the result of skill.create. */
export interface CreateSkillResponse {
    name: string | null;
    path: string | null;
    /** Never set: Trellis runs no generating turn. */
    sessionId: string | null;
    turnId: string | null;
}
/** DeleteAgentRequest are the params of agent.delete. */
export interface DeleteAgentRequest {
    name: string;
}
/** DeleteAgentResponse is Ok. */
export interface DeleteAgentResponse {
    ok: boolean;
}
/** DeleteCheckpointRequest are the params of checkpoint.delete. */
export interface DeleteCheckpointRequest {
    sessionId: string;
    checkpointId: string;
}
/** DeleteCheckpointResponse is Ok. */
export interface DeleteCheckpointResponse {
    ok: boolean;
}
/** DeleteMemoryRequest are the params of memory.delete. */
export interface DeleteMemoryRequest {
    /** The note to forget (memory.write's id). */
    id?: string;
    /** snowpea's "browser" source: Trellis keeps no browsing memories, so it is unsupported. */
    source?: "browser";
    url?: string;
    before?: string;
}
/** DeleteMemoryResponse is Ok. */
export interface DeleteMemoryResponse {
    ok: boolean;
}
/** DeletePrincipalRequest are the params of principal.delete. */
export interface DeletePrincipalRequest {
    principalId: string;
}
/** DeletePrincipalResponse is the result of principal.delete. */
export interface DeletePrincipalResponse {
    deleted: boolean;
}
/** DeleteSavedRequest selects saved sessions to delete: exactly one selector. */
export interface DeleteSavedRequest {
    sessionId?: string;
    workdir?: string;
    /** Default: `false`. */
    all?: boolean;
    /** Also remove the workspaces the daemon made for the deleted sessions (team worktrees under the daemon home); a user's own workdir is never removed (protocol 1.x). A managed workdir (a session created without one) goes with its session either way, on every daemon that keeps a copy. Default: `false`. */
    deleteWorkspace?: boolean;
}
/** DeleteSavedResponse counts the deleted sessions. */
export interface DeleteSavedResponse {
    deleted: number;
    /** Workspaces removed because of delete_workspace. */
    workspacesDeleted: number;
}
/** DiffCheckpointsRequest are the params of checkpoint.diff. */
export interface DiffCheckpointsRequest {
    sessionId: string;
    /** The checkpoint diffed from. */
    from: string;
    /** The checkpoint diffed to; absent: the session's current files. */
    to?: string;
}
/** DiffCheckpointsResponse is the result of checkpoint.diff. */
export interface DiffCheckpointsResponse {
    /** The unified diff in git's form (binary files are named, not shown). */
    diff: string;
    /** The paths that differ, sorted. */
    files: CheckpointChange[];
    /** The diff was cut at 8 MiB; files still lists every path. */
    truncated: boolean;
}
/** DiffEvent is the unified diff of a file a tool changed. */
export interface DiffEvent {
    path: string;
    patch: string;
}
/** ErrorEvent reports a failure inside a turn with a protocol error code. */
export interface ErrorEvent {
    code: string;
    message: string;
}
/** FileEntry is one completion. */
export interface FileEntry {
    kind: "file" | "dir";
    /** Relative to the workdir; a directory's ends with "/". */
    path: string;
    /** Bytes, for a file; null for a directory. */
    size: number | null;
}
/** ForkSessionRequest are the params of session.fork. */
export interface ForkSessionRequest {
    sessionId: string;
    /** The seq of the last event the fork keeps: from 0 (none) to the session's latest. */
    atSeq: number;
    /** The new session's workdir, empty or missing; by default a new directory beside the original's. */
    workdir?: string;
}
/** ForkSessionResponse names the new session. */
export interface ForkSessionResponse {
    sessionId: string;
    workdir: string;
    /** The checkpoint whose files the new workdir holds; absent when none was recorded at or before at_seq (the workdir is then left empty). */
    checkpointId: string | null;
    /** How many model-history messages the original had at at_seq; a tool call among them without its result yet then gets an error result saying why. */
    messages: number;
}
/** GatewayEvent is the gateway.event notification. */
export interface GatewayEvent {
    bindingId: string;
    kind: "message" | "reply" | "error";
    payload: Record<string, unknown>;
}
/** GetSettingsRequest are the params of settings.get. */
export interface GetSettingsRequest {
    /** "global" only: Trellis has no project settings. Default: `"global"`. */
    scope?: "global" | "project";
    /** Accepted with scope global, where it narrows nothing; an existing directory (not_found otherwise). */
    workdir?: string;
}
/** GetSettingsResponse is the result of settings.get and settings.set. */
export interface GetSettingsResponse {
    /** The document: "providers" (each vendor's effective configuration) and the sections clients wrote. Fields named api_key, token, refresh_token or password are masked as "***". */
    settings: Record<string, unknown>;
}
/** HealthRequest takes no parameters. */
export type HealthRequest = Record<string, never>;
/** HealthResponse is {status: "ok"}. */
export interface HealthResponse {
    status: "ok";
}
/** HelloRequest opens a connection. */
export interface HelloRequest {
    /** The daemon's auth token (the `token` file in the home directory: the built-in admin) or an API key (key.create). */
    token: string;
    /** The client's own version. */
    clientVersion: string;
    /** The protocol version the client speaks (semver); the major must match. */
    protocolVersion: string;
    /** What kind of client this is (tui, ide, web, sdk, ...). */
    clientKind?: string;
    /** Stable across reconnects of one client: sessions it originated are re-bound to this connection. */
    clientId?: string;
    /** Accepted for compatibility with clients of this protocol family. */
    instanceId?: string;
    /** Accepted for compatibility; the daemon never exits on idle. */
    keepAlive?: boolean;
}
/** HelloResponse is the result of system.hello. */
export interface HelloResponse {
    protocolVersion: string;
    serverVersion: string;
    capabilities: string[];
    limits: Limits;
    connectionId: string;
    /** Who the token or key of this hello belongs to (its role decides which methods the connection may call: docs/roles.md). */
    principal: Principal;
}
/** InfoRequest takes no parameters. */
export type InfoRequest = Record<string, never>;
/** InfoResponse is the result of system.info. */
export interface InfoResponse {
    version: string;
    protocolVersion: string;
    pid: number;
    port: number;
    grpcPort: number;
    /** RFC3339 UTC with milliseconds. */
    startedAt: string;
    home: string;
    counters: Counters;
    store: "sqlite" | "postgres";
}
/** InstallSkillRequest are the params of skill.install. */
export interface InstallSkillRequest {
    source: string;
}
/** InstallSkillResponse is Ok. */
export interface InstallSkillResponse {
    ok: boolean;
}
/** InterruptRequest are the params of session.interrupt. */
export interface InterruptRequest {
    sessionId: string;
}
/** InterruptResponse is Ok. */
export interface InterruptResponse {
    ok: boolean;
}
/** Job describes one scheduled job. */
export interface Job {
    jobId: string;
    spec: string;
    task: string;
    mode: "plan" | "accept" | "auto";
    /** "" = each run's session has a managed workdir of its own. */
    workdir: string;
    kind: "cron" | "once" | "interval";
    state: "scheduled" | "running" | "cancelled" | "done";
    enabled: boolean;
    nextRunAt: string | null;
    lastRunAt: string | null;
    lastStatus: "ok" | "error" | "denied_by_timeout" | "budget_reached" | null;
    lastSessionId: string | null;
    /** The principal that scheduled the job and owns its runs' sessions (its name then); null for the daemon token. */
    owner: PrincipalRef | null;
}
/** JobEvent is the job.event notification. */
export interface JobEvent {
    jobId: string;
    kind: "started" | "finished" | "failed" | "denied";
    payload: Record<string, unknown>;
}
/** LentTool is one tool a client lends (tool.register). */
export interface LentTool {
    /** 1-64 letters, digits, _ or -; not a built-in's, an MCP tool's or another connection's lent tool of the session (unless replace). */
    name: string;
    /** What the tool does and when to use it, for the model. */
    description: string;
    /** The JSON Schema (draft 2020-12) of the arguments object; absent: any object. It must compile, and its type, when given, must be object. */
    inputSchema: Record<string, unknown>;
    /** The permission tag the session's mode and approvals decide on, as for the built-ins. */
    permission: "read" | "write" | "exec" | "network";
    /** Take the place of the built-in of the same name for the session (an editor serving read_file from its unsaved buffers); without it a built-in's name is refused. Default: `false`. */
    replace?: boolean;
    /** How long a call waits for the client's answer before it fails. Default: `120`. */
    timeoutSec?: number;
}
/** Limits are advertised in the hello result. */
export interface Limits {
    /** Largest frame accepted, in bytes. */
    maxFrameBytes: number;
    /** Most requests in flight per connection. */
    maxInFlight: number;
    /** Most entries in one batch. */
    maxBatch: number;
    /** Most authenticated connections the server accepts at once. */
    maxConnections: number;
    /** Most sessions one connection receives session.event for at once. */
    maxWatchedSessions: number;
    /** How long a new connection may take to complete system.hello before the server closes it (1008), in milliseconds (trellisd --hello-timeout). */
    helloTimeoutMs: number;
    /** Most connections that have not completed system.hello yet; more are refused with HTTP 503 before the upgrade (trellisd --max-unauthenticated). */
    maxUnauthenticated: number;
    /** Most calls per second this connection's API key may make (0 = no limit); past it calls answer rate_limited with data.retryAfterMs. */
    keyRatePerSecond: number;
    /** Most sessions this connection's API key may keep running at once (0 = no limit); past it a prompt that would start a turn on one more idle session answers rate_limited. */
    keyMaxRunningSessions: number;
    /** How long the daemon keeps the receipt of a call made with an operation id, in milliseconds (trellisd --operation-window): a repeat within it answers the first call's outcome, a repeat after it acts again (docs/protocol.md, "Operation ids"). */
    operationWindowMs: number;
}
/** ListAgentsRequest takes no parameters. */
export type ListAgentsRequest = Record<string, never>;
/** ListAgentsResponse is the result of agent.list. */
export interface ListAgentsResponse {
    agents: Agent[];
}
/** ListAllowlistPatternsRequest are the params of permission.allowlist.list. */
export interface ListAllowlistPatternsRequest {
    scope?: "session" | "project" | "always";
    workdir?: string;
}
/** ListAllowlistPatternsResponse is the result of permission.allowlist.list. */
export interface ListAllowlistPatternsResponse {
    patterns: AllowlistPattern[];
}
/** ListApprovalsRequest are the params of approval.list. */
export interface ListApprovalsRequest {
    sessionId?: string;
    /** Also list the requests put to a session's own client (approval.request), which only that client answers: each is marked interactive. Without it the list is what the caller may answer (the unattended queue and its own connection's requests). Default: `false`. */
    includeInteractive?: boolean;
}
/** ListApprovalsResponse is the result of approval.list. */
export interface ListApprovalsResponse {
    requests: ApprovalRequest[];
}
/** ListArtifactsRequest are the params of session.artifacts. */
export interface ListArtifactsRequest {
    sessionId: string;
}
/** ListArtifactsResponse is the result of session.artifacts. */
export interface ListArtifactsResponse {
    artifacts: Artifact[];
    /** The session's workdir, whose artifacts/ was listed. */
    workspaceDir: string;
}
/** ListBindingsRequest takes no parameters. */
export type ListBindingsRequest = Record<string, never>;
/** ListBindingsResponse is the result of gateway.list. */
export interface ListBindingsResponse {
    bindings: Binding[];
}
/** ListCheckpointsRequest are the params of checkpoint.list. */
export interface ListCheckpointsRequest {
    sessionId: string;
}
/** ListCheckpointsResponse is the result of checkpoint.list. */
export interface ListCheckpointsResponse {
    checkpoints: Checkpoint[];
}
/** ListCommandsRequest are the params of command.list. */
export interface ListCommandsRequest {
    sessionId?: string;
}
/** ListCommandsResponse is the result of command.list. */
export interface ListCommandsResponse {
    commands: Command[];
}
/** ListJobsRequest takes no parameters. */
export type ListJobsRequest = Record<string, never>;
/** ListJobsResponse is the result of job.list. */
export interface ListJobsResponse {
    jobs: Job[];
}
/** ListKeysRequest are the params of key.list. */
export interface ListKeysRequest {
    /** Only this principal's keys; absent = every principal's. */
    principalId?: string;
}
/** ListKeysResponse is the result of key.list. */
export interface ListKeysResponse {
    keys: ApiKey[];
}
/** ListMcpServersRequest are the params of mcp.list. */
export interface ListMcpServersRequest {
    /** Only the servers whose tools that session can use: the daemon's and those of its agent definition (unknown session → not_found). */
    sessionId?: string;
}
/** ListMcpServersResponse is the result of mcp.list. */
export interface ListMcpServersResponse {
    servers: McpServer[];
}
/** ListMemoryRequest are the params of memory.list. Trellis notes live in namespaces, not in snowpea's project and agent scopes: every note is "global" (docs/compat.md). */
export interface ListMemoryRequest {
    /** Default: `10`. */
    limit?: number;
    /** Free-text filter: only notes holding a word of it, most relevant first; absent lists newest first. */
    query?: string;
    /** "all" (every namespace) or "global" (the "default" namespace); the project and agent scopes of snowpea are unsupported. Default: `"all"`. */
    scope?: "project" | "global" | "agent" | "all";
    /** A session the caller may see (not_found otherwise); Trellis notes are not per project, so it narrows nothing. */
    sessionId?: string;
    /** Accepted for snowpea clients; Trellis notes are not per project, so it narrows nothing. */
    project?: string;
    /** Only this namespace (a Trellis addition; overrides scope). */
    namespace?: string;
}
/** ListMemoryResponse is the result of memory.list. */
export interface ListMemoryResponse {
    entries: MemoryEntry[];
}
/** ListModelsRequest are the params of provider.models. */
export interface ListModelsRequest {
    /** openai, anthropic or fake (another is not_found); absent: the default. */
    vendor?: string;
}
/** ListModelsResponse is the result of provider.models. */
export interface ListModelsResponse {
    vendor: string;
    models: string[];
    /** The model the vendor uses when a session names none. */
    current: string;
    /** live (the vendor's endpoint), settings (the configured models) or curated (the models this build knows). */
    source: "live" | "settings" | "cache" | "curated";
    detail: string;
    /** Which models take images, where known; Trellis knows none, so it is empty (unknown, not text-only). */
    vision: Record<string, boolean>;
}
/** ListPrincipalsRequest takes no parameters. */
export type ListPrincipalsRequest = Record<string, never>;
/** ListPrincipalsResponse is the result of principal.list. */
export interface ListPrincipalsResponse {
    principals: Principal[];
}
/** ListProvidersRequest takes no parameters. */
export type ListProvidersRequest = Record<string, never>;
/** ListProvidersResponse is the result of provider.list. */
export interface ListProvidersResponse {
    providers: Provider[];
}
/** ListQuestionsRequest are the params of question.list. */
export interface ListQuestionsRequest {
    sessionId?: string;
}
/** ListQuestionsResponse is the result of question.list. */
export interface ListQuestionsResponse {
    questions: QuestionRequest[];
}
/** ListQueueRequest are the params of session.queue.list. */
export interface ListQueueRequest {
    sessionId: string;
}
/** ListQueueResponse is the result of session.queue.list. */
export interface ListQueueResponse {
    /** In the order they run; empty when nothing waits. */
    prompts: QueuedPrompt[];
}
/** ListSecurityEventsRequest are the params of audit.list. */
export interface ListSecurityEventsRequest {
    principalId?: string;
    method?: string;
    /** Only events older than this id (the previous page's nextBeforeId). */
    beforeId?: number;
    /** Default: `100`. */
    limit?: number;
}
/** ListSecurityEventsResponse is the result of audit.list. */
export interface ListSecurityEventsResponse {
    events: SecurityEvent[];
    /** Pass as beforeId for the next (older) page; absent on the last page. */
    nextBeforeId: number | null;
}
/** ListSessionsRequest are the params of session.list. */
export interface ListSessionsRequest {
    /** Default: `false`. */
    includeClosed?: boolean;
    workdir?: string;
    /** Lists the archived sessions only (session.archive); without it they are left out. Default: `false`. */
    archived?: boolean;
}
/** ListSessionsResponse is the result of session.list. */
export interface ListSessionsResponse {
    sessions: SessionSummary[];
}
/** ListSkillsRequest takes no parameters. */
export type ListSkillsRequest = Record<string, never>;
/** ListSkillsResponse is the result of skill.list. */
export interface ListSkillsResponse {
    skills: Skill[];
}
/** ListToolsRequest are the params of tool.list. */
export interface ListToolsRequest {
    sessionId?: string;
}
/** ListToolsResponse is the result of tool.list. */
export interface ListToolsResponse {
    tools: Tool[];
}
/** LoginWebRequest are the params of provider.loginWeb. */
export interface LoginWebRequest {
    vendor: string;
    method: string;
}
/** LoginWebResponse carries where to continue a web login. */
export interface LoginWebResponse {
    url: string;
}
/** McpChanged is the mcp.changed notification: a server changed state or its tool list changed. */
export interface McpChanged {
    server: McpServer;
}
/** McpServer is the state of one configured MCP server. */
export interface McpServer {
    name: string;
    /** "" for the daemon's servers (mcp.json, --mcp-config), "agent:NAME" for the servers of an agent definition. */
    scope: string;
    transport: "stdio" | "http" | "sse";
    /** Servers start lazily (idle until a turn or tool.list needs their tools); a crashed server is failed, then starting again (restart with backoff). */
    state: "idle" | "starting" | "ready" | "failed";
    /** Why the server failed ("" otherwise). */
    reason: string;
    toolCount: number;
    restarts: number;
}
/** McpServerPatch is what mcp.update changes: fields absent are kept (an empty list or map counts as absent). */
export interface McpServerPatch {
    /** Arguments, argv style. */
    args?: string[];
    /** Executable of a stdio server. */
    command?: string;
    cwd?: string;
    /** Keep the entry but never start the server. */
    disabled?: boolean;
    /** Environment of the child process. */
    env?: Record<string, string>;
    /** HTTP headers sent with every request. */
    headers?: Record<string, string>;
    /** snowpea's permission tag of the server's tools: unsupported (Trellis tags MCP tools by their annotations). */
    permission?: "read" | "write" | "exec" | "network" | "send" | "config" | "delegate" | "secret";
    /** Startup cap, in seconds. */
    timeoutSec?: number;
    /** Per-call cap, in seconds. */
    toolTimeoutSec?: number;
    /** Unsupported: every tool of a server is registered. */
    toolsExclude?: string[];
    toolsInclude?: string[];
    /** Force a transport instead of inferring it. */
    type?: "stdio" | "http" | "sse";
    /** Endpoint of an http or sse server. */
    url?: string;
}
/** McpToolInfo is one tool of an MCP server, by the server's own name. */
export interface McpToolInfo {
    name: string;
    description: string;
}
/** MemoryEntry is one stored note as memory.list shows it. */
export interface MemoryEntry {
    id: string;
    text: string;
    tags: string[];
    /** UTC RFC 3339 time the note was written. */
    createdAt: string;
    /** Always "global": Trellis notes have no project or agent scope. */
    scope: "project" | "global" | "agent" | "all";
    namespace: string;
}
/** MemoryHit is one search result. */
export interface MemoryHit {
    id: string;
    text: string;
    tags: string[];
    score: number;
    namespace: string;
}
/** MessageDeltaEvent is a chunk of the answer. Model chunks that come faster than the daemon commits are merged: consecutive chunks that arrive while the first still waits for its commit are one event (up to --merge-deltas bytes, default 16384; 0 = one event per model chunk). The concatenated text, the order of events and the seqs are unchanged. */
export interface MessageDeltaEvent {
    text: string;
}
/** MessageDoneEvent is the whole answer of the turn. */
export interface MessageDoneEvent {
    text: string;
    role: "assistant";
}
/** MessageReasoningEvent is a chunk of the model's reasoning (merged like message.delta). */
export interface MessageReasoningEvent {
    text: string;
}
/** MessageUserEvent is the user's prompt as the model sees it. */
export interface MessageUserEvent {
    text: string;
    attachments: AttachmentRef[];
    /** Who sent the prompt (through whichever daemon); null on prompts no principal sent (a job's, a turn the daemon starts itself). */
    principal: PrincipalRef | null;
}
/** ModeChangedEvent reports session.setMode. */
export interface ModeChangedEvent {
    mode: "plan" | "accept" | "auto";
    /** Who changed the mode; null when no principal did. */
    principal: PrincipalRef | null;
}
/** ModelChangedEvent reports session.setModel, session.setEffort and the /model command: the model and effort the session's next turn uses. */
export interface ModelChangedEvent {
    model: string | null;
    provider: string | null;
    /** null: the provider's default. */
    effort: "minimal" | "low" | "medium" | "high" | "max" | null;
    /** session: the session's pin decided the effort; default: none is pinned. */
    effortSource: "session" | "default";
    /** Who changed it; null when no principal did. */
    principal: PrincipalRef | null;
}
/** ModelPrice is one model's price in US dollars per million tokens, at most six decimals; cache and reasoning prices default to the input and output prices. */
export interface ModelPrice {
    input: number;
    output: number;
    cache_read?: number;
    cache_write?: number;
    reasoning?: number;
}
/** NewSessionTarget asks for a new session per conversation. */
export interface NewSessionTarget {
    /** The sessions' workdir, an existing directory (unmanaged); "" = each conversation's session gets a managed workdir of its own, which follows it to the daemon taking it over (docs/workspaces.md). */
    workdir: string;
    mode: "plan" | "accept" | "auto";
}
/** NoticeRequest are the params of session.notice. */
export interface NoticeRequest {
    sessionId: string;
    /** Something that happened outside a tool call; not empty, at most 64 KiB. */
    text: string;
}
/** NoticeResponse is the result of session.notice. */
export interface NoticeResponse {
    ok: boolean;
}
/** Principal is a caller the daemon knows: a person or a service, with one role. */
export interface Principal {
    principalId: string;
    name: string;
    kind: "human" | "service";
    role: "admin" | "operator" | "member" | "approver" | "viewer";
    /** Absent for the built-in admin. */
    createdAt: string | null;
    /** The daemon token's built-in admin: it cannot be changed or deleted, and has no keys (rotate the token file instead). */
    builtin: boolean;
    /** A service principal's limits (docs/security.md): the only agents its sessions, jobs and bindings may run, and the only workdirs (each with what is below it) they may use. Empty = no limit. */
    agents: string[];
    workdirs: string[];
    /** The principal's budget (principal.setBudget); absent when it has none. Only principal.list carries it. */
    budget: Budget | null;
}
/** PrincipalRef names the principal who acted: its id and its name at the time (docs/security.md). */
export interface PrincipalRef {
    id: string;
    name: string;
}
/** PromptRequest are the params of session.prompt. */
export interface PromptRequest {
    sessionId: string;
    /** A text starting with "/" runs a command. */
    text: string;
    attachments?: Attachment[];
    /** What to do when a turn is running: enqueue the prompt behind it (turn.queued; "queue" is the protocol 1.x name of the same policy); reject it with session_busy; interrupt the running turn (as session.interrupt) and run this one next; rollback: interrupt, drop the interrupted turn from the model's history (turn.rollback; its events stay in the log), then run this one; or steer it into the running turn as session.steer does (the answer names the running turn). A session with no running turn runs the prompt whatever the policy. Default: `"enqueue"`. */
    whenBusy?: "enqueue" | "queue" | "reject" | "interrupt" | "rollback" | "steer";
}
/** PromptResponse is the result of session.prompt. */
export interface PromptResponse {
    turnId: string;
}
/** Provider describes one configured or known provider. */
export interface Provider {
    vendor: "openai" | "anthropic" | "fake";
    label: string;
    defaultModel: string;
    models: string[];
    configured: boolean;
    default: boolean;
    baseUrl: string;
    authMethods: string[];
}
/** ProviderConfig is a provider's configuration (snake_case on the wire). Other keys (snowpea 1.7 clients send their own provider settings) are accepted and not used. */
export interface ProviderConfig {
    api_key?: string;
    base_url?: string;
    model?: string;
    models?: string[];
    default?: boolean;
    /** The model's context window in tokens, for models the daemon does not know (the usage and context events use it); 0 = back to the known value. */
    context_window?: number;
    /** Protocol 1.x names of the credential: the same secret as api_key (giving two different values is invalid_params). */
    token?: string;
    access_token?: string;
    /** This provider's prices by model, in US dollars per million tokens: each replaces the entry of the daemon's price table (built in, or the --prices file) for that model, for the cost of usage events and for budgets (docs/operations.md, "Prices"). Given, it replaces the provider's prices whole. A Trellis addition. */
    prices?: Record<string, ModelPrice>;
    /** Removes the provider's prices: the price table applies again. Not with prices. */
    clear_prices?: boolean;
    /** Other keys are accepted and ignored. */
    [key: string]: unknown;
}
/** ProviderRetryEvent is a progress event: a model call failed before its first token with an error worth another try (a rate limit, an overloaded or failing server, a dropped connection), and the daemon tries again after waitMs. It is emitted before the wait, once per retry; the turn goes on (message.delta and the rest) if a later try succeeds, and ends with error{provider_error} if none does. The wait honours the server's Retry-After (or retry-after-ms) header, else backs off exponentially with jitter. */
export interface ProviderRetryEvent {
    turnId: string;
    /** The try that failed, from 1; the next try is attempt + 1. */
    attempt: number;
    /** How long the daemon waits before the next try, in milliseconds. */
    waitMs: number;
    /** Why: rate_limited (HTTP 429), overloaded (503, 529), server_error (another 5xx), timeout (408), conflict (409), connection (no HTTP answer), else the HTTP status. */
    reason: string;
    /** The HTTP status of the failed try; 0 when there was none. */
    status: number;
    provider: string;
    model: string;
    /** The provider's error message, without credentials. */
    message: string;
}
/** PruneSessionsRequest are the params of session.prune. An omitted rule is the daemon's; a rule given as 0 is off for this call. */
export interface PruneSessionsRequest {
    /** Keep the sessions whose last activity (their last turn's start, else their creation) is at most this old: a duration such as "30d" (days), "2w" (weeks), "720h" or "90m"; "0" = no age rule. */
    olderThan?: string;
    /** Keep this many most recently active sessions of each group (per); 0 = no such rule. */
    keepLatest?: number;
    /** How keep_latest groups sessions: by workdir (the sessions whose workspace the daemon manages, each in its own directory, form one group) or by agent definition. Unset: the daemon's, by default workdir. */
    per?: "workdir" | "agent";
    /** List what would be deleted, and delete nothing. Default: `false`. */
    dryRun?: boolean;
}
/** PruneSessionsResponse is the result of session.prune. */
export interface PruneSessionsResponse {
    /** The age rule applied ("" = none), as a duration such as "720h0m0s". */
    olderThan: string;
    /** The keep-latest rule applied (0 = none) and its grouping. */
    keepLatest: number;
    per: "workdir" | "agent";
    dryRun: boolean;
    /** The sessions the policy keeps none of, the least recently active first: deleted (or, in a dry run, to be deleted) unless held. */
    sessions: PrunedSession[];
    /** How many were deleted (0 in a dry run). */
    deleted: number;
    /** The bytes the deleted sessions' checkpoint blobs took in the store, as stored (compressed); in a dry run, those of the sessions that would be deleted. */
    checkpointBytes: number;
}
/** PrunedSession is a session a retention policy keeps none of. */
export interface PrunedSession {
    sessionId: string;
    workdir: string;
    /** Its agent definition; absent for the default agent. */
    agent: string | null;
    /** Its last turn's start, else its creation (RFC 3339). */
    lastActivityAt: string;
    /** Why no rule keeps it, e.g. "last active 900h0m0s ago, past the 720h0m0s kept; not among the 3 latest of its workdir /src/app". */
    reason: string;
    /** Why it was kept all the same (a turn is running, an approval is pending, live on another daemon, already deleted by another daemon); absent when it was deleted, or would be in a dry run. */
    held: string | null;
}
/** QuestionAnswer answers one question: the labels of the options chosen (one unless the question is multiple), or the person's own words. */
export interface QuestionAnswer {
    values?: string[];
}
/** QuestionItem is one question of a QuestionRequest. */
export interface QuestionItem {
    /** The question, a full sentence. */
    question: string;
    /** A short label for it (a tab or a chip), at most 12 characters. */
    header: string | null;
    /** The answers it offers; a person may also answer in their own words. */
    options: QuestionOption[];
    /** Several options may be chosen. Default: `false`. */
    multiple: boolean | null;
}
/** QuestionOption is one answer a question offers. */
export interface QuestionOption {
    /** The answer as it is given back (QuestionAnswer.values). */
    label: string;
    /** What choosing it means. */
    description: string | null;
}
/** QuestionPending is the question.pending notification: a question waits in the unattended queue. */
export interface QuestionPending {
    question: QuestionRequest;
}
/** QuestionReply is the result of the question.request server → client request: an answer per question, in order, or declined. */
export interface QuestionReply {
    answers?: QuestionAnswer[];
    /** The person will not answer: the agent is told so and goes on. Default: `false`. */
    declined?: boolean;
    reason?: string;
}
/** QuestionRequest is a question the agent asks a person with the ask_user tool (one to four questions, each with options). It is the params of the question.request server → client request, sent to the session's own client when it is connected (it alone answers it), and of question.pending otherwise (anyone who may approve answers it with question.respond). The turn waits for the answer. */
export interface QuestionRequest {
    questionId: string;
    sessionId: string;
    turnId: string;
    /** The ask_user call that asks. */
    callId: string;
    questions: QuestionItem[];
    /** How long the agent waits before it goes on without an answer. Default: `300`. */
    timeoutSec: number;
    /** In question.list's answer: true for a question put to its session's own client, which alone answers it. */
    interactive: boolean | null;
}
/** QuestionResolved is the question.resolved notification, sent for every question, those put to a session's own client included. */
export interface QuestionResolved {
    questionId: string;
    /** answered, or declined (by a person, or because nobody answered: `by` says timeout, interrupt, disconnect or shutdown). */
    outcome: "answered" | "declined";
    /** Who answered: as ApprovalResolved.by. */
    by: string;
    principal: PrincipalRef | null;
}
/** QueuedPrompt is a prompt waiting behind the running turn. */
export interface QueuedPrompt {
    /** The turn it will run as (turn.queued named it). */
    turnId: string;
    /** 1 for the prompt that runs next. */
    position: number;
    prompt: string;
    attachments: number;
}
/** ReadSkillRequest are the params of skill.read. */
export interface ReadSkillRequest {
    name: string;
    /** snowpea's project directory: Trellis skills are the daemon's, not a project's, so it narrows nothing, but it must be an existing directory (not_found otherwise). */
    workdir?: string;
}
/** ReadSkillResponse is the result of skill.read. */
export interface ReadSkillResponse {
    content: string;
    path: string;
    /** Always "global": Trellis skills are installed for the daemon. */
    scope: "project" | "global";
}
/** RegisterToolsRequest are the params of tool.register. */
export interface RegisterToolsRequest {
    /** The session to lend to; absent: every session this connection is the origin of, now and later (session.create, session.resume, prompts). */
    sessionId?: string;
    /** 1 to 64 tools. Registering a name this connection already lent to the same target replaces its definition. */
    tools?: LentTool[];
}
/** RegisterToolsResponse is the result of tool.register. */
export interface RegisterToolsResponse {
    /** The names now lent, sorted. */
    names: string[];
}
/** ReloadMcpServersRequest are the params of mcp.reload. */
export interface ReloadMcpServersRequest {
    /** The server to restart; absent: every one. */
    name?: string;
    sessionId?: string;
    workdir?: string;
}
/** ReloadMcpServersResponse is the result of mcp.reload. */
export interface ReloadMcpServersResponse {
    ok: boolean;
    servers: string[];
}
/** ReloadSettingsRequest takes no parameters. */
export type ReloadSettingsRequest = Record<string, never>;
/** ReloadSettingsResponse is the result of system.reloadSettings. */
export interface ReloadSettingsResponse {
    /** True when the stored settings differed from what the daemon held. */
    reloaded: boolean;
    /** The top-level sections that changed, e.g. ["providers"]. */
    changedKeys: string[];
}
/** ReloadSkillsRequest takes no parameters. */
export type ReloadSkillsRequest = Record<string, never>;
/** ReloadSkillsResponse is Ok. */
export interface ReloadSkillsResponse {
    ok: boolean;
}
/** RemoveAllowlistPatternRequest are the params of permission.allowlist.remove. */
export interface RemoveAllowlistPatternRequest {
    patternId: string;
}
/** RemoveAllowlistPatternResponse is Ok. */
export interface RemoveAllowlistPatternResponse {
    ok: boolean;
}
/** RemoveMcpServerRequest are the params of mcp.remove. */
export interface RemoveMcpServerRequest {
    name: string;
    /** Default: `"global"`. */
    scope?: "project" | "global";
    sessionId?: string;
    workdir?: string;
}
/** RemoveMcpServerResponse is Ok. */
export interface RemoveMcpServerResponse {
    ok: boolean;
}
/** RemoveProviderRequest are the params of provider.remove. */
export interface RemoveProviderRequest {
    /** openai or anthropic (another is not_found; fake has nothing to forget). */
    vendor: string;
}
/** RemoveProviderResponse is Ok. */
export interface RemoveProviderResponse {
    ok: boolean;
}
/** RemoveQueuedRequest are the params of session.queue.remove. */
export interface RemoveQueuedRequest {
    sessionId: string;
    /** A queued prompt's turn id (session.queue.list, turn.queued). */
    turnId: string;
}
/** RemoveQueuedResponse is Ok. */
export interface RemoveQueuedResponse {
    ok: boolean;
}
/** RemoveSkillRequest are the params of skill.remove. */
export interface RemoveSkillRequest {
    name: string;
}
/** RemoveSkillResponse is Ok. */
export interface RemoveSkillResponse {
    ok: boolean;
}
/** RenameRequest are the params of session.rename. */
export interface RenameRequest {
    sessionId: string;
    /** At most 200 characters; empty clears the title. */
    title: string;
}
/** RenameResponse is the result of session.rename. */
export interface RenameResponse {
    ok: boolean;
}
/** RespondApprovalRequest are the params of approval.respond. */
export interface RespondApprovalRequest {
    requestId: string;
    decision: "allow" | "deny";
    /** site = the whole daemon, as always. Default: `"once"`. */
    scope?: "once" | "session" | "project" | "always" | "site";
    reason?: string;
}
/** RespondApprovalResponse is Ok. */
export interface RespondApprovalResponse {
    ok: boolean;
}
/** RespondQuestionRequest are the params of question.respond: an answer per question, in order, or declined. */
export interface RespondQuestionRequest {
    questionId: string;
    answers?: QuestionAnswer[];
    /** Default: `false`. */
    declined?: boolean;
    reason?: string;
}
/** RespondQuestionResponse is Ok. */
export interface RespondQuestionResponse {
    ok: boolean;
}
/** RestoreCheckpointRequest are the params of checkpoint.restore. */
export interface RestoreCheckpointRequest {
    sessionId: string;
    checkpointId: string;
    /** Restore even though files changed since the session's latest checkpoint (those changes are lost). Default: `false`. */
    force?: boolean;
}
/** RestoreCheckpointResponse is the result of checkpoint.restore. */
export interface RestoreCheckpointResponse {
    /** The checkpoint recorded after the restore (reason restore). */
    checkpointId: string;
    /** Files, symlinks and directories written; paths removed. */
    written: number;
    removed: number;
    /** The paths the restored checkpoint skipped: left as they are. */
    kept: CheckpointSkip[];
}
/** ResumeSessionRequest are the params of session.resume. */
export interface ResumeSessionRequest {
    sessionId: string;
    /** Default: `0`. */
    afterSeq?: number;
}
/** ResumeSessionResponse is the result of session.resume. */
export interface ResumeSessionResponse {
    sessionId: string;
    mode: "plan" | "accept" | "auto";
    provider: string;
    model: string;
    /** The stored events after afterSeq, in seq order (over gRPC an EventPage; empty when the request says typed). */
    events: SessionEvent[];
    /** True when events stop before the session's last stored event, so that one answer stays bounded (in bytes and in events). Over gRPC, resume again with afterSeq = the seq of the last event returned; over the WebSocket, the rest follows as session.event notifications. */
    more: boolean;
}
/** RevokeKeyRequest are the params of key.revoke. */
export interface RevokeKeyRequest {
    keyId: string;
}
/** RevokeKeyResponse is the result of key.revoke. */
export interface RevokeKeyResponse {
    key: ApiKey;
}
/** RewindSessionRequest are the params of session.rewind. */
export interface RewindSessionRequest {
    sessionId: string;
    /** The seq of the event to go back to: from 0 (before the first) to the session's latest. */
    atSeq: number;
    /** Rewind even though files changed since the session's latest checkpoint other than by its tools (those changes are lost). Default: `false`. */
    force?: boolean;
}
/** RewindSessionResponse says what the rewind put back. */
export interface RewindSessionResponse {
    /** The seq of the session.rewound event. */
    seq: number;
    /** The checkpoint whose files were put back; absent when none was recorded at or before at_seq (the files are then left as they are). */
    checkpointId: string | null;
    /** How many model-history messages the session had at at_seq and has again (plus an error result for a tool call that had none yet). */
    messages: number;
}
/** RunCommandRequest are the params of command.run. */
export interface RunCommandRequest {
    sessionId: string;
    /** A leading "/" is ignored. */
    name: string;
    /** Default: `""`. */
    args?: string;
}
/** RunCommandResponse is the result of command.run. */
export interface RunCommandResponse {
    turnId: string;
}
/** RunJobNowRequest are the params of job.runNow. */
export interface RunJobNowRequest {
    jobId: string;
}
/** RunJobNowResponse is the finished run. */
export interface RunJobNowResponse {
    sessionId: string;
    status: "ok" | "error" | "denied_by_timeout" | "budget_reached";
    /** Always true: the run happened (its own outcome is status). */
    ok: boolean;
}
/** ScheduleJobRequest are the params of job.schedule. */
export interface ScheduleJobRequest {
    spec: string;
    task: string;
    /** Default: `"accept"`. */
    mode?: "plan" | "accept" | "auto";
    /** "" = the daemon's default workdir (trellisd --workdir) when it has one, else each run's session gets a managed workdir of its own (docs/workspaces.md); never the daemon's cwd. */
    workdir?: string;
    /** An agent definition whose instructions, model and tools apply to each run; unknown → not_found. */
    agent?: string;
    /** Protocol 1.x: a gateway binding id (or "platform:channelId" of one) that receives each run's final answer. Operators and admins only (bindings are theirs): below, forbidden. */
    channel?: string;
    /** The budget of each run's session (session.setBudget): cost in micro-US-dollars and/or tokens, each at least 0. A run whose turn reaches it stops, recorded with lastStatus budget_reached; its session stays paused (session.setBudget resumes it). A Trellis addition. */
    maxCostMicroUsd?: number;
    maxTokens?: number;
}
/** ScheduleJobResponse is the result of job.schedule. */
export interface ScheduleJobResponse {
    jobId: string;
    nextRunAt: string | null;
}
/** SearchMemoryRequest are the params of memory.search. */
export interface SearchMemoryRequest {
    query: string;
    /** Default: `10`. */
    limit?: number;
    namespace?: string;
}
/** SearchMemoryResponse is the result of memory.search. */
export interface SearchMemoryResponse {
    hits: MemoryHit[];
}
/** SearchSkillsRequest are the params of skill.search. */
export interface SearchSkillsRequest {
    query: string;
}
/** SearchSkillsResponse is the result of skill.search. */
export interface SearchSkillsResponse {
    skills: Skill[];
}
/** SecurityEvent is one call of an audited method. */
export interface SecurityEvent {
    id: number;
    at: string;
    /** The caller ("" when its token or key was refused). */
    principalId: string;
    principalName: string;
    /** The JSON-RPC method. */
    method: string;
    /** The request's scalar fields (strings cut at 256 bytes); nested objects such as a provider's configuration are left out. */
    request: Record<string, unknown>;
    /** "ok", or the error code that answered the call. */
    outcome: string;
}
/** SessionEvent is one entry of a session's event log, sent as the session.event notification. On JSON-RPC it renders as {sessionId, seq, kind, payload, ts}: the set member of the payload oneof becomes `payload`, and `kind` names it. */
export type SessionEvent = {
    sessionId: string;
    seq: number;
    kind: "turn.started";
    payload: TurnStartedEvent;
    ts: string;
    unstored?: boolean;
    retracted?: boolean;
} | {
    sessionId: string;
    seq: number;
    kind: "message.user";
    payload: MessageUserEvent;
    ts: string;
    unstored?: boolean;
    retracted?: boolean;
} | {
    sessionId: string;
    seq: number;
    kind: "message.reasoning";
    payload: MessageReasoningEvent;
    ts: string;
    unstored?: boolean;
    retracted?: boolean;
} | {
    sessionId: string;
    seq: number;
    kind: "message.delta";
    payload: MessageDeltaEvent;
    ts: string;
    unstored?: boolean;
    retracted?: boolean;
} | {
    sessionId: string;
    seq: number;
    kind: "message.done";
    payload: MessageDoneEvent;
    ts: string;
    unstored?: boolean;
    retracted?: boolean;
} | {
    sessionId: string;
    seq: number;
    kind: "tool.call";
    payload: ToolCallEvent;
    ts: string;
    unstored?: boolean;
    retracted?: boolean;
} | {
    sessionId: string;
    seq: number;
    kind: "tool.progress";
    payload: ToolProgressEvent;
    ts: string;
    unstored?: boolean;
    retracted?: boolean;
} | {
    sessionId: string;
    seq: number;
    kind: "tool.result";
    payload: ToolResultEvent;
    ts: string;
    unstored?: boolean;
    retracted?: boolean;
} | {
    sessionId: string;
    seq: number;
    kind: "diff";
    payload: DiffEvent;
    ts: string;
    unstored?: boolean;
    retracted?: boolean;
} | {
    sessionId: string;
    seq: number;
    kind: "usage";
    payload: UsageEvent;
    ts: string;
    unstored?: boolean;
    retracted?: boolean;
} | {
    sessionId: string;
    seq: number;
    kind: "context";
    payload: ContextEvent;
    ts: string;
    unstored?: boolean;
    retracted?: boolean;
} | {
    sessionId: string;
    seq: number;
    kind: "error";
    payload: ErrorEvent;
    ts: string;
    unstored?: boolean;
    retracted?: boolean;
} | {
    sessionId: string;
    seq: number;
    kind: "turn.queued";
    payload: TurnQueuedEvent;
    ts: string;
    unstored?: boolean;
    retracted?: boolean;
} | {
    sessionId: string;
    seq: number;
    kind: "turn.dequeued";
    payload: TurnDequeuedEvent;
    ts: string;
    unstored?: boolean;
    retracted?: boolean;
} | {
    sessionId: string;
    seq: number;
    kind: "turn.done";
    payload: TurnDoneEvent;
    ts: string;
    unstored?: boolean;
    retracted?: boolean;
} | {
    sessionId: string;
    seq: number;
    kind: "mode.changed";
    payload: ModeChangedEvent;
    ts: string;
    unstored?: boolean;
    retracted?: boolean;
} | {
    sessionId: string;
    seq: number;
    kind: "backend.changed";
    payload: BackendChangedEvent;
    ts: string;
    unstored?: boolean;
    retracted?: boolean;
} | {
    sessionId: string;
    seq: number;
    kind: "subagent.spawn";
    payload: SubagentSpawnEvent;
    ts: string;
    unstored?: boolean;
    retracted?: boolean;
} | {
    sessionId: string;
    seq: number;
    kind: "subagent.update";
    payload: SubagentUpdateEvent;
    ts: string;
    unstored?: boolean;
    retracted?: boolean;
} | {
    sessionId: string;
    seq: number;
    kind: "subagent.done";
    payload: SubagentDoneEvent;
    ts: string;
    unstored?: boolean;
    retracted?: boolean;
} | {
    sessionId: string;
    seq: number;
    kind: "team.task.update";
    payload: TeamTaskUpdateEvent;
    ts: string;
    unstored?: boolean;
    retracted?: boolean;
} | {
    sessionId: string;
    seq: number;
    kind: "compaction.started";
    payload: CompactionStartedEvent;
    ts: string;
    unstored?: boolean;
    retracted?: boolean;
} | {
    sessionId: string;
    seq: number;
    kind: "compaction";
    payload: CompactionEvent;
    ts: string;
    unstored?: boolean;
    retracted?: boolean;
} | {
    sessionId: string;
    seq: number;
    kind: "step.started";
    payload: StepStartedEvent;
    ts: string;
    unstored?: boolean;
    retracted?: boolean;
} | {
    sessionId: string;
    seq: number;
    kind: "step.done";
    payload: StepDoneEvent;
    ts: string;
    unstored?: boolean;
    retracted?: boolean;
} | {
    sessionId: string;
    seq: number;
    kind: "turn.steered";
    payload: TurnSteeredEvent;
    ts: string;
    unstored?: boolean;
    retracted?: boolean;
} | {
    sessionId: string;
    seq: number;
    kind: "turn.rollback";
    payload: TurnRollbackEvent;
    ts: string;
    unstored?: boolean;
    retracted?: boolean;
} | {
    sessionId: string;
    seq: number;
    kind: "model.changed";
    payload: ModelChangedEvent;
    ts: string;
    unstored?: boolean;
    retracted?: boolean;
} | {
    sessionId: string;
    seq: number;
    kind: "provider.retry";
    payload: ProviderRetryEvent;
    ts: string;
    unstored?: boolean;
    retracted?: boolean;
} | {
    sessionId: string;
    seq: number;
    kind: "turn.paused";
    payload: TurnPausedEvent;
    ts: string;
    unstored?: boolean;
    retracted?: boolean;
} | {
    sessionId: string;
    seq: number;
    kind: "turn.resumed";
    payload: TurnResumedEvent;
    ts: string;
    unstored?: boolean;
    retracted?: boolean;
} | {
    sessionId: string;
    seq: number;
    kind: "checkpoint";
    payload: CheckpointEvent;
    ts: string;
    unstored?: boolean;
    retracted?: boolean;
} | {
    sessionId: string;
    seq: number;
    kind: "session.rewound";
    payload: SessionRewoundEvent;
    ts: string;
    unstored?: boolean;
    retracted?: boolean;
};
/** SessionGrant is one principal's access to a session it does not own. */
export interface SessionGrant {
    principalId: string;
    role: "controller" | "approver" | "viewer";
    grantedAt: string;
}
/** SessionRewoundEvent says that session.rewind put the session's model history, and its files when a checkpoint held them, back as they were at event to_seq: the events from to_seq+1 to from_seq stay in the log, but the model no longer reads what they said or did. */
export interface SessionRewoundEvent {
    toSeq: number;
    /** The seq of the session's latest event before the rewind. */
    fromSeq: number;
    /** The checkpoint whose files were put back; absent when none was recorded at or before to_seq. */
    checkpointId: string | null;
    /** How many model-history messages the session has now. */
    messages: number;
}
/** SessionSummary describes one session. */
export interface SessionSummary {
    sessionId: string;
    workdir: string;
    mode: "plan" | "accept" | "auto";
    provider: string | null;
    model: string | null;
    createdAt: string;
    /** The latest event seq. */
    seq: number;
    kind: "chat" | "scheduled" | "subagent";
    parentSessionId: string | null;
    jobId: string | null;
    agent: string | null;
    status: "idle" | "running" | "awaiting_approval" | "paused" | "closed";
    running: boolean;
    title: string | null;
    lastPrompt: string | null;
    lastActivityAt: string | null;
    pendingApprovals: number;
    /** managed: the daemon made the workdir (session.create without one) and each daemon running the session rebuilds it from the session's checkpoints; unmanaged: the workdir the creator named, which must exist on the daemon running the session (docs/workspaces.md). */
    workspace: "managed" | "unmanaged";
}
/** SessionUsageRequest are the params of session.usage. */
export interface SessionUsageRequest {
    sessionId: string;
}
/** SessionUsageResponse is the result of session.usage: the session's totals, and one row per turn. */
export interface SessionUsageResponse {
    sessionId: string;
    /** How many provider calls (usage events) the session made. */
    calls: number;
    /** The input (prompt) tokens of its calls. */
    inputTokens: number;
    /** The output tokens of its calls. */
    outputTokens: number;
    /** Of outputTokens, those the models spent reasoning. */
    reasoningTokens: number;
    /** Of inputTokens, those read from the providers' prompt caches. */
    cacheReadTokens: number;
    /** Of inputTokens, those written to the providers' prompt caches. */
    cacheWriteTokens: number;
    /** What its calls cost, in millionths of a US dollar. */
    costMicroUsd: number;
    /** Of calls, those of models the price table did not price. */
    unpricedCalls: number;
    /** One per turn that made a provider call, oldest first; key is the turn's id ("" for the calls of events stored before usage events named their turn). */
    turns: UsageRow[];
}
/** SetBackendRequest are the params of backend.set. */
export interface SetBackendRequest {
    sessionId: string;
    kind: "local" | "ssh" | "docker";
    /** ssh: {host, port?, user, keyPath?, knownHostsPath?, workdir}; docker: {image, cpus?, memoryMb?, pids?, network? (none|bridge), user?}. Default: `{}`. */
    config?: Record<string, unknown>;
}
/** SetBackendResponse is Ok. */
export interface SetBackendResponse {
    ok: boolean;
}
/** SetBrowserProviderRequest are the params of session.setBrowserProvider. */
export interface SetBrowserProviderRequest {
    sessionId: string;
    provider: "local" | "host" | "none";
}
/** SetBrowserProviderResponse is the provider now in force. */
export interface SetBrowserProviderResponse {
    provider: "local" | "host" | "none";
}
/** SetBudgetRequest are the params of session.setBudget. */
export interface SetBudgetRequest {
    sessionId: string;
    /** At least 0 (0: no model call may start). */
    maxCostMicroUsd?: number;
    /** At least 0; input + output tokens. */
    maxTokens?: number;
}
/** SetBudgetResponse is the result of session.setBudget: the budget now in force, what the session spent, and whether its turn is paused. */
export interface SetBudgetResponse {
    budget: Budget;
    spent: BudgetSpent;
    /** True when the session's turn is still paused (the new budget is reached too); a paused turn the new budget lets go on was resumed. */
    paused: boolean;
}
/** SetEffortRequest are the params of session.setEffort. */
export interface SetEffortRequest {
    sessionId: string;
    /** Null clears the pin. */
    effort?: "minimal" | "low" | "medium" | "high" | "max";
}
/** SetEffortResponse is the effort now in effect. */
export interface SetEffortResponse {
    sessionId: string;
    /** The effort the next model call asks for; null: the provider's default. */
    effort: "minimal" | "low" | "medium" | "high" | "max" | null;
    /** session: the session's pin decided it; default: nothing is pinned. */
    effortSource: "session" | "default";
    /** The efforts this daemon passes to providers, weakest first. */
    efforts: string[];
    /** The session's own pin; null when it has none. */
    pinned: "minimal" | "low" | "medium" | "high" | "max" | null;
}
/** SetModeRequest are the params of session.setMode. */
export interface SetModeRequest {
    sessionId: string;
    mode: "plan" | "accept" | "auto";
}
/** SetModeResponse is the mode now in force. */
export interface SetModeResponse {
    mode: "plan" | "accept" | "auto";
}
/** SetModelRequest are the params of session.setModel. */
export interface SetModelRequest {
    sessionId: string;
    /** A model id of the session's provider, "vendor:model", a bare vendor, or null / "inherit" to clear the pin. */
    model?: string;
}
/** SetModelResponse is the model now in effect. */
export interface SetModelResponse {
    model: string | null;
    /** False when the pin was cleared. */
    pinned: boolean;
    provider: string | null;
}
/** SetPrincipalBudgetRequest are the params of principal.setBudget. */
export interface SetPrincipalBudgetRequest {
    principalId: string;
    /** At least 0 (0: none of the principal's sessions may start a model call). */
    maxCostMicroUsd?: number;
    /** At least 0; input + output tokens. */
    maxTokens?: number;
}
/** SetPrincipalBudgetResponse is the result of principal.setBudget: the principal's budget (source principal, or none once cleared), what its sessions spent together, and whether that reaches the budget (their next model calls pause; turns paused by it stay paused). */
export interface SetPrincipalBudgetResponse {
    budget: Budget;
    spent: BudgetSpent;
    reached: boolean;
}
/** SetSettingsRequest are the params of settings.set. */
export interface SetSettingsRequest {
    /** Fields to deep-merge (null removes one). providers.VENDOR takes provider.configure's keys; credentials are refused elsewhere. */
    patch: Record<string, unknown>;
    /** Default: `"global"`. */
    scope?: "global" | "project";
    workdir?: string;
}
/** SetSettingsResponse is the document after the change. */
export interface SetSettingsResponse {
    settings: Record<string, unknown>;
}
/** SettingsChanged is the settings.changed notification, sent to every connection when settings.set or system.reloadSettings changed a section. */
export interface SettingsChanged {
    /** The top-level sections that changed, e.g. ["providers"], sorted. */
    keys: string[];
    /** The document that changed: always "global" (Trellis has no project settings). */
    scope: string;
}
/** ShareSessionRequest are the params of session.share. */
export interface ShareSessionRequest {
    sessionId: string;
    principalId: string;
    /** controller: everything a member may do with the session; approver: watch it and answer its approvals; viewer: watch and read it. */
    role: "controller" | "approver" | "viewer";
}
/** ShareSessionResponse is the result of session.share: the session's grants. */
export interface ShareSessionResponse {
    grants: SessionGrant[];
}
/** ShutdownRequest takes no parameters. */
export type ShutdownRequest = Record<string, never>;
/** ShutdownResponse is Ok. */
export interface ShutdownResponse {
    ok: boolean;
}
/** Skill describes one skill. */
export interface Skill {
    name: string;
    description: string;
    source: string;
    path: string;
    installed: boolean;
}
/** SpawnAgentRequest are the params of agent.spawn. */
export interface SpawnAgentRequest {
    /** "" = the default agent. */
    name: string;
    task: string;
    sessionId?: string;
    model?: string;
}
/** SpawnAgentResponse is the result of agent.spawn. */
export interface SpawnAgentResponse {
    agentId: string;
}
/** StartTeamRequest are the params of team.start. */
export interface StartTeamRequest {
    sessionId: string;
    n: number;
    task: string;
}
/** StartTeamResponse is the result of team.start. */
export interface StartTeamResponse {
    teamId: string;
}
/** SteerRequest are the params of session.steer. */
export interface SteerRequest {
    sessionId: string;
    /** The user message to send into the running turn; not empty. */
    text: string;
}
/** SteerResponse is the result of session.steer. */
export interface SteerResponse {
    ok: boolean;
    /** True when the session had no turn to steer (idle, or its turn was already ending) and the text became a prompt of its own: it started a turn, or queued one behind the turn that was ending. */
    started: boolean;
    /** The turn the text went into, or the one it started. */
    turnId: string;
}
/** StepDoneEvent closes one provider call with everything it produced. */
export interface StepDoneEvent {
    step: number;
    /** The concatenation of the call's message.delta chunks. */
    text: string;
    /** The concatenation of the call's message.reasoning chunks. */
    reasoning: string;
    /** The calls the turn goes on to handle, each answered by one tool.result. */
    toolCalls: StepToolCall[];
    /** Null when the call failed. */
    usage: TokenUsage;
    stopReason: "stop" | "tool_use" | "length" | "error" | "aborted";
    provider: string;
    model: string;
}
/** StepStartedEvent opens one provider call of a turn (an addition to PROTOCOL.md §7 that the wire and json renderings need; WIRE-FORMATS.md). */
export interface StepStartedEvent {
    /** Counts the turn's provider calls from 0. */
    step: number;
}
/** StepToolCall is one tool call a provider call asked for. */
export interface StepToolCall {
    id: string;
    name: string;
    args: Record<string, unknown>;
}
/** SubagentDoneEvent reports a child agent's end. */
export interface SubagentDoneEvent {
    agentId: string;
    name: string;
    status: "done" | "error" | "interrupted";
    ok: boolean;
    summary: string;
    sessionId: string;
    usage: TokenUsage;
}
/** SubagentSpawnEvent reports a child agent queued by this session. */
export interface SubagentSpawnEvent {
    agentId: string;
    name: string;
    task: string;
    status: "queued";
    sessionId: string;
}
/** SubagentUpdateEvent reports a child agent's progress. */
export interface SubagentUpdateEvent {
    agentId: string;
    name: string;
    status: "queued" | "running" | "done" | "error" | "interrupted";
    text: string;
}
/** TeamStatusRequest are the params of team.status. */
export interface TeamStatusRequest {
    /** Default: `""`. */
    teamId?: string;
}
/** TeamStatusResponse is the result of team.status. */
export interface TeamStatusResponse {
    teamId: string;
    state: "running" | "done" | "failed" | "interrupted";
    task: string;
    tasks: TeamTask[];
}
/** TeamTask is one subtask of a team. */
export interface TeamTask {
    taskId: string;
    title: string;
    status: "queued" | "running" | "done" | "conflict" | "merged" | "failed";
    assignee: string | null;
    retries: number;
}
/** TeamTaskUpdateEvent reports a team subtask's progress. */
export interface TeamTaskUpdateEvent {
    teamId: string;
    taskId: string;
    status: "queued" | "running" | "done" | "conflict" | "merged" | "failed";
    assignee: string | null;
    retries: number;
}
/** TestMcpServerRequest are the params of mcp.test: the configured server name, or a draft given by the fields (then name only names it). */
export interface TestMcpServerRequest {
    name?: string;
    /** Arguments, argv style. */
    args?: string[];
    /** Executable of a stdio server. */
    command?: string;
    cwd?: string;
    /** Keep the entry but never start the server. */
    disabled?: boolean;
    /** Environment of the child process. */
    env?: Record<string, string>;
    /** HTTP headers sent with every request. */
    headers?: Record<string, string>;
    /** snowpea's permission tag of the server's tools: unsupported (Trellis tags MCP tools by their annotations). */
    permission?: "read" | "write" | "exec" | "network" | "send" | "config" | "delegate" | "secret";
    /** Startup cap, in seconds. */
    timeoutSec?: number;
    /** Per-call cap, in seconds. */
    toolTimeoutSec?: number;
    /** Unsupported: every tool of a server is registered. */
    toolsExclude?: string[];
    toolsInclude?: string[];
    /** Force a transport instead of inferring it. */
    type?: "stdio" | "http" | "sse";
    /** Endpoint of an http or sse server. */
    url?: string;
    scope?: "project" | "global" | "plugin" | "settings";
    sessionId?: string;
    workdir?: string;
}
/** TestMcpServerResponse is the result of mcp.test. */
export interface TestMcpServerResponse {
    /** True when the server answered tools/list. */
    ok: boolean;
    state: "stopped" | "starting" | "ready" | "error";
    error: string | null;
    tools: McpToolInfo[];
    elapsedMs: number;
}
/** TestProviderRequest are the params of provider.test. */
export interface TestProviderRequest {
    /** The vendor: openai, anthropic or fake (another is not_found). */
    provider: string;
    /** Absent: the vendor's default model. */
    model?: string;
}
/** TestProviderResponse is the result of provider.test: a vendor that could not be called is ok false with the reason in error, not a call error. */
export interface TestProviderResponse {
    ok: boolean;
    provider: string;
    model: string;
    latencyMs: number;
    reply: string | null;
    error: string | null;
    /** The model the server named in its answer; Trellis's providers do not report it, so it is absent. */
    modelEcho: string | null;
}
/** TokenUsage counts tokens. */
export interface TokenUsage {
    inputTokens: number;
    outputTokens: number;
}
/** Tool describes one tool. */
export interface Tool {
    name: string;
    description: string;
    permissionTag: "read" | "write" | "exec" | "network" | "send" | "config" | "delegate" | "secret";
    state: "active" | "inactive";
    reason: string;
    /** client: lent by a connection (tool.register). */
    source: "builtin" | "mcp" | "client";
    /** The MCP server's name; for a lent tool, the lending connection's id. */
    server: string;
    inputSchema: Record<string, unknown>;
}
/** ToolCallEvent is emitted after a call was allowed, before it runs. */
export interface ToolCallEvent {
    callId: string;
    name: string;
    args: Record<string, unknown>;
}
/** ToolCallReply is the result of the tool.call server → client request. A JSON-RPC error reply counts as a failed call whose output is the error's message. */
export interface ToolCallReply {
    /** The text the model sees (content is accepted for output). */
    output?: string;
    content?: string;
    /** The call failed (tool.result ok:false). Default: `false`. */
    isError?: boolean;
}
/** ToolCallRequest is the params of the tool.call server → client request: the model called a tool this connection lent. It comes after the session.event notifications of the turn's tool.call event. */
export interface ToolCallRequest {
    sessionId: string;
    turnId: string;
    callId: string;
    name: string;
    arguments: Record<string, unknown>;
}
/** ToolContentRequest are the params of session.toolContent. */
export interface ToolContentRequest {
    sessionId: string;
    /** The tool.result's callId. */
    callId: string;
}
/** ToolContentResponse is the result of session.toolContent. */
export interface ToolContentResponse {
    callId: string;
    content: ContentBlock[];
}
/** ToolProgressEvent is a chunk of a running tool's output. */
export interface ToolProgressEvent {
    callId: string;
    name: string;
    stream: "stdout" | "stderr";
    chunk: string;
    truncated: boolean;
}
/** ToolResultEvent is a tool call's outcome; a failed tool is data, not an RPC error. */
export interface ToolResultEvent {
    callId: string;
    name: string;
    ok: boolean;
    output: string;
    error: string | null;
}
/** TurnDequeuedEvent reports a queued prompt leaving the queue: its turn started, the queue was dropped (session.interrupt, whenBusy interrupt or rollback; or the daemon running the session stopped: the daemon that runs it next drops the queue, each prompt's turn.done interrupted and synthetic), or it was removed (session.queue.remove, session.queue.clear). */
export interface TurnDequeuedEvent {
    turnId: string;
    reason: "started" | "dropped" | "removed";
}
/** TurnDoneEvent closes a turn. */
export interface TurnDoneEvent {
    turnId: string;
    reason: "complete" | "interrupted" | "error" | "denied" | "budget";
    /** True when written at shutdown, or for a turn left open by a crash: by the daemon at its next start, or by the daemon of the cluster that took the session over. */
    synthetic: boolean;
    /** Who interrupted the turn (session.interrupt, or session.close of a running session), through whichever daemon; absent on other turns and when no principal did (shutdown, a lost lease). */
    principal: PrincipalRef | null;
}
/** TurnPausedEvent says that the turn stopped, right before a model call, because the session's budget is reached: what the session spent plus the estimated input of the next call would pass a limit. Nothing runs until session.setBudget raises the budget (principal.setBudget, for a budget of source principal), which resumes the turn where it stopped (turn.resumed), or session.interrupt ends it (turn.done{interrupted}). A request in the unattended approval queue (tool "budget") asks a person meanwhile: its allow raises the budget to its args.raiseTo, its deny ends the turn. The pause is kept in the store: a restarted daemon, or the one that takes the session over, finds the turn still paused. Prompts sent meanwhile queue behind it. */
export interface TurnPausedEvent {
    turnId: string;
    reason: "budget_reached";
    budget: Budget;
    spent: BudgetSpent;
}
/** TurnQueuedEvent reports a prompt queued behind the running turn. */
export interface TurnQueuedEvent {
    turnId: string;
    position: number;
    /** The queued prompt's text (pi's queue_update lists it). */
    prompt: string;
    /** How many prompts wait behind the running turn now, this one included (snowpea 1.7's field). */
    queued: number;
}
/** TurnResumedEvent says that a paused turn goes on: its budget was raised. */
export interface TurnResumedEvent {
    turnId: string;
    budget: Budget;
    spent: BudgetSpent;
}
/** TurnRollbackEvent says that an interrupted turn was dropped from the model's history (session.prompt with whenBusy rollback): the turn's events stay in the log, but the model no longer reads what it said or did. */
export interface TurnRollbackEvent {
    turnId: string;
    /** How many history messages were dropped (the prompt, the model's answers, the tool results). */
    messages: number;
    /** Who asked for it; null when no principal did. */
    principal: PrincipalRef | null;
}
/** TurnStartedEvent opens a turn. */
export interface TurnStartedEvent {
    turnId: string;
    prompt: string;
    /** True when the prompt waited in the queue. */
    queued: boolean;
}
/** TurnSteeredEvent is a user message sent into the running turn (session.steer, or session.prompt with whenBusy steer), emitted when the model reads it: right before the turn's next model call. */
export interface TurnSteeredEvent {
    turnId: string;
    text: string;
    /** Who sent it; null when no principal did. */
    principal: PrincipalRef | null;
}
/** UnarchiveSessionRequest are the params of session.unarchive. */
export interface UnarchiveSessionRequest {
    sessionId: string;
}
/** UnarchiveSessionResponse is the result of session.unarchive. */
export type UnarchiveSessionResponse = Record<string, never>;
/** UnbindRequest are the params of gateway.unbind. */
export interface UnbindRequest {
    bindingId: string;
}
/** UnbindResponse is Ok. */
export interface UnbindResponse {
    ok: boolean;
}
/** UnregisterToolsRequest are the params of tool.unregister. */
export interface UnregisterToolsRequest {
    /** As tool.register's: the session, or absent for the connection's tools lent to every session it originates. */
    sessionId?: string;
    /** The names to take back; absent or empty: all of them. */
    names?: string[];
}
/** UnregisterToolsResponse is the result of tool.unregister. */
export interface UnregisterToolsResponse {
    /** The names that were lent and no longer are, sorted. */
    removed: string[];
}
/** UnshareSessionRequest are the params of session.unshare. */
export interface UnshareSessionRequest {
    sessionId: string;
    principalId: string;
}
/** UnshareSessionResponse is the result of session.unshare: the session's grants left. */
export interface UnshareSessionResponse {
    grants: SessionGrant[];
}
/** UpdateMcpServerRequest are the params of mcp.update. */
export interface UpdateMcpServerRequest {
    name: string;
    patch: McpServerPatch;
    /** Default: `"global"`. */
    scope?: "project" | "global";
    sessionId?: string;
    workdir?: string;
}
/** UpdateMcpServerResponse is Ok. */
export interface UpdateMcpServerResponse {
    ok: boolean;
}
/** UpdatePrincipalRequest are the params of principal.update; absent fields stay. */
export interface UpdatePrincipalRequest {
    principalId: string;
    name?: string;
    role?: "admin" | "operator" | "member" | "approver" | "viewer";
    /** Replaces a service principal's agent limits (empty = unchanged; see clearAgents). */
    agents?: string[];
    /** Replaces a service principal's workdir limits (empty = unchanged; see clearWorkdirs). */
    workdirs?: string[];
    /** Removes the agent limits: any agent. Not with agents. */
    clearAgents: boolean;
    /** Removes the workdir limits: any workdir. Not with workdirs. */
    clearWorkdirs: boolean;
}
/** UpdatePrincipalResponse is the result of principal.update. */
export interface UpdatePrincipalResponse {
    principal: Principal;
}
/** UsageEvent reports one provider call's token usage. */
export interface UsageEvent {
    inputTokens: number;
    outputTokens: number;
    provider: string;
    model: string;
    /** Of outputTokens, those the model spent reasoning (0 when the provider does not report them). */
    reasoningTokens: number;
    /** Of inputTokens, those read from the provider's prompt cache (0 when the provider does not report them). */
    cacheReadTokens: number;
    /** Of inputTokens, those written to the provider's prompt cache (Anthropic reports them; OpenAI's cache costs nothing to write and reports none). */
    cacheWriteTokens: number;
    /** What the call cost, in millionths of a US dollar (an integer, so that sums are exact), from the daemon's price table (docs/operations.md, "Prices"); 0 when the table does not price the model. */
    costMicroUsd: number;
    /** Whether the price table prices the model: false means the cost is unknown (costMicroUsd 0), not that the call was free. */
    priced: boolean;
    /** The turn the call belongs to. */
    turnId: string;
}
/** UsageRow is the total of one group of usage.summary, or of one turn of session.usage. */
export interface UsageRow {
    /** The provider, model, session id, day ("YYYY-MM-DD", UTC), agent, job id or principal id of the group; the turn id of a turn. */
    key: string;
    /** How many provider calls (usage events) the group holds. */
    calls: number;
    /** The input (prompt) tokens of the group's calls. */
    inputTokens: number;
    /** The output tokens of the group's calls. */
    outputTokens: number;
    /** Of outputTokens, those the model spent reasoning (a Trellis addition). */
    reasoningTokens: number;
    /** Of inputTokens, those read from the providers' prompt caches (a Trellis addition). */
    cacheReadTokens: number;
    /** Of inputTokens, those written to the providers' prompt caches (a Trellis addition). */
    cacheWriteTokens: number;
    /** What the group's calls cost, in millionths of a US dollar, as their usage events priced them (a Trellis addition). */
    costMicroUsd: number;
    /** Of calls, those of models the price table did not price: their cost is unknown and counts as 0 (a Trellis addition). */
    unpricedCalls: number;
}
/** UsageSummaryRequest are the params of usage.summary. */
export interface UsageSummaryRequest {
    /** What a row totals: a provider, a model, a session (its id), a UTC day ("YYYY-MM-DD"), or what the call's session records: its agent definition's name, the id of the scheduled job that ran it, the id of the principal that created it (Trellis additions; "" for none). Default: `"model"`. */
    groupBy?: "provider" | "model" | "session" | "day" | "agent" | "job" | "principal";
    /** Counts the events stored at or after this time (RFC 3339, e.g. "2026-12-01T00:00:00Z"); absent: from the first. */
    since?: string;
    /** Counts the events stored before this time (RFC 3339); absent: to the last. Must not be before since. */
    until?: string;
}
/** UsageSummaryResponse is the result of usage.summary. */
export interface UsageSummaryResponse {
    /** The grouping the rows follow (the request's, or "model"). */
    groupBy: "provider" | "model" | "session" | "day" | "agent" | "job" | "principal";
    /** The input (prompt) tokens of every row. */
    inputTokens: number;
    /** The output tokens of every row. */
    outputTokens: number;
    /** Of outputTokens, those the models spent reasoning (a Trellis addition). */
    reasoningTokens: number;
    /** One per group, largest (inputTokens + outputTokens) first, ties by key. */
    rows: UsageRow[];
    /** Of inputTokens, those read from the providers' prompt caches (a Trellis addition). */
    cacheReadTokens: number;
    /** Of inputTokens, those written to the providers' prompt caches (a Trellis addition). */
    cacheWriteTokens: number;
    /** What every row cost, in millionths of a US dollar (a Trellis addition). */
    costMicroUsd: number;
    /** The calls of every row (a Trellis addition). */
    calls: number;
    /** Of calls, those of models the price table did not price (a Trellis addition). */
    unpricedCalls: number;
}
/** WriteMemoryRequest are the params of memory.write. */
export interface WriteMemoryRequest {
    /** Non-empty. */
    text: string;
    tags?: string[];
    namespace?: string;
}
/** WriteMemoryResponse is the result of memory.write. */
export interface WriteMemoryResponse {
    id: string;
}
/** WriteSkillRequest are the params of skill.write. */
export interface WriteSkillRequest {
    /** An installed skill (not_found otherwise). */
    name: string;
    /** The whole SKILL.md; its front matter must name the skill. */
    content: string;
    /** "global" only: Trellis has no project-scoped skills. Default: `"global"`. */
    scope?: "project" | "global";
    /** As in skill.read. */
    workdir?: string;
}
/** WriteSkillResponse is Ok. */
export interface WriteSkillResponse {
    ok: boolean;
}
/** Every client → server method: its params and its result. */
export interface Methods {
    /** Binds a channel to an agent (a gateway binding whose target is that agent). */
    "agent.bindChannel": {
        params: BindChannelRequest & OperationParams;
        result: BindChannelResponse;
    };
    /** Writes a markdown agent definition into <home>/agents/. */
    "agent.create": {
        params: CreateAgentRequest & OperationParams;
        result: CreateAgentResponse;
    };
    /** Deletes an agent definition. */
    "agent.delete": {
        params: DeleteAgentRequest & OperationParams;
        result: DeleteAgentResponse;
    };
    /** Lists agent definitions and the sub-agents queued or running now. */
    "agent.list": {
        params: ListAgentsRequest;
        result: ListAgentsResponse;
    };
    /** Queues a sub-agent; answers as soon as it is queued. */
    "agent.spawn": {
        params: SpawnAgentRequest & OperationParams;
        result: SpawnAgentResponse;
    };
    /** Lists the unattended queue plus the caller's own interactive requests. */
    "approval.list": {
        params: ListApprovalsRequest;
        result: ListApprovalsResponse;
    };
    /** Answers a pending request; the first answer wins. */
    "approval.respond": {
        params: RespondApprovalRequest & OperationParams;
        result: RespondApprovalResponse;
    };
    /** Lists the security audit log, newest first: every call of the methods docs/roles.md marks Audit, allowed or refused, with its principal. */
    "audit.list": {
        params: ListSecurityEventsRequest;
        result: ListSecurityEventsResponse;
    };
    /** Sets the session's tool backend; emits backend.changed. */
    "backend.set": {
        params: SetBackendRequest & OperationParams;
        result: SetBackendResponse;
    };
    /** Deletes one checkpoint and the contents no other checkpoint of the session holds. */
    "checkpoint.delete": {
        params: DeleteCheckpointRequest & OperationParams;
        result: DeleteCheckpointResponse;
    };
    /** Returns the unified diff from one checkpoint to another, or to the session's current files. */
    "checkpoint.diff": {
        params: DiffCheckpointsRequest;
        result: DiffCheckpointsResponse;
    };
    /** Lists the session's checkpoints, oldest first. */
    "checkpoint.list": {
        params: ListCheckpointsRequest;
        result: ListCheckpointsResponse;
    };
    /** Puts a checkpoint back into the session's workdir (the session must be idle: session_busy otherwise). Files changed since the session's latest checkpoint make it refuse with workspace_changed unless force. Records a checkpoint of the result (reason restore). */
    "checkpoint.restore": {
        params: RestoreCheckpointRequest & OperationParams;
        result: RestoreCheckpointResponse;
    };
    /** Lists the commands available (built-ins, project commands, skills). */
    "command.list": {
        params: ListCommandsRequest;
        result: ListCommandsResponse;
    };
    /** Runs a command in a session as a turn. */
    "command.run": {
        params: RunCommandRequest & OperationParams;
        result: RunCommandResponse;
    };
    /** Completes a partial path to the files and directories under a session's workdir (or, without a session, under workdir, which the caller must be allowed to open a session in). snowpea 1.7's method. */
    "file.complete": {
        params: CompleteFileRequest;
        result: CompleteFileResponse;
    };
    /** Binds a channel: its messages become prompts and answers are posted back. */
    "gateway.bind": {
        params: BindRequest & OperationParams;
        result: BindResponse;
    };
    /** Lists bindings; never shows a credential. */
    "gateway.list": {
        params: ListBindingsRequest;
        result: ListBindingsResponse;
    };
    /** Removes a binding. */
    "gateway.unbind": {
        params: UnbindRequest & OperationParams;
        result: UnbindResponse;
    };
    /** Disables future fires and interrupts a running run; history is kept. */
    "job.cancel": {
        params: CancelJobRequest & OperationParams;
        result: CancelJobResponse;
    };
    /** Lists the jobs the caller may see with their last run. */
    "job.list": {
        params: ListJobsRequest;
        result: ListJobsResponse;
    };
    /** Runs a job now and answers after that run ends. */
    "job.runNow": {
        params: RunJobNowRequest & OperationParams;
        result: RunJobNowResponse;
    };
    /** Schedules a job: cron, @every, @hourly/@daily/@weekly, or once <RFC3339>. */
    "job.schedule": {
        params: ScheduleJobRequest & OperationParams;
        result: ScheduleJobResponse;
    };
    /** Makes an API key for a principal; the secret is in this answer only. */
    "key.create": {
        params: CreateKeyRequest & OperationParams;
        result: CreateKeyResponse;
    };
    /** Lists API keys without their secrets, oldest first. */
    "key.list": {
        params: ListKeysRequest;
        result: ListKeysResponse;
    };
    /** Revokes an API key: its next call is refused (unauthorized). */
    "key.revoke": {
        params: RevokeKeyRequest & OperationParams;
        result: RevokeKeyResponse;
    };
    /** Writes an MCP server into <home>/mcp.json and starts it. */
    "mcp.add": {
        params: AddMcpServerRequest & OperationParams;
        result: AddMcpServerResponse;
    };
    /** Lists the configured MCP servers with their state. */
    "mcp.list": {
        params: ListMcpServersRequest;
        result: ListMcpServersResponse;
    };
    /** Reads the MCP configuration again and restarts one server, or all. */
    "mcp.reload": {
        params: ReloadMcpServersRequest & OperationParams;
        result: ReloadMcpServersResponse;
    };
    /** Deletes an MCP server from <home>/mcp.json and stops it. */
    "mcp.remove": {
        params: RemoveMcpServerRequest & OperationParams;
        result: RemoveMcpServerResponse;
    };
    /** Probes a configured MCP server or an unsaved draft and reports its tools. */
    "mcp.test": {
        params: TestMcpServerRequest;
        result: TestMcpServerResponse;
    };
    /** Merges a patch into an MCP server of <home>/mcp.json and restarts it. */
    "mcp.update": {
        params: UpdateMcpServerRequest & OperationParams;
        result: UpdateMcpServerResponse;
    };
    /** Forgets one stored note; an unknown id is not_found. */
    "memory.delete": {
        params: DeleteMemoryRequest & OperationParams;
        result: DeleteMemoryResponse;
    };
    /** Lists stored notes, newest first (snowpea 1.7's memory.list). */
    "memory.list": {
        params: ListMemoryRequest;
        result: ListMemoryResponse;
    };
    /** Searches notes, best first. */
    "memory.search": {
        params: SearchMemoryRequest;
        result: SearchMemoryResponse;
    };
    /** Stores a note. */
    "memory.write": {
        params: WriteMemoryRequest & OperationParams;
        result: WriteMemoryResponse;
    };
    /** Adds an allowlist pattern such as `shell(git status*)`. */
    "permission.allowlist.add": {
        params: AddAllowlistPatternRequest & OperationParams;
        result: AddAllowlistPatternResponse;
    };
    /** Lists allowlist patterns. */
    "permission.allowlist.list": {
        params: ListAllowlistPatternsRequest;
        result: ListAllowlistPatternsResponse;
    };
    /** Removes an allowlist pattern. */
    "permission.allowlist.remove": {
        params: RemoveAllowlistPatternRequest & OperationParams;
        result: RemoveAllowlistPatternResponse;
    };
    /** Creates a principal. */
    "principal.create": {
        params: CreatePrincipalRequest & OperationParams;
        result: CreatePrincipalResponse;
    };
    /** Deletes a principal and its keys; the last admin cannot be deleted. */
    "principal.delete": {
        params: DeletePrincipalRequest & OperationParams;
        result: DeletePrincipalResponse;
    };
    /** Lists every principal by name, the daemon token's built-in admin first. */
    "principal.list": {
        params: ListPrincipalsRequest;
        result: ListPrincipalsResponse;
    };
    /** Removes a principal's grant on a session; only the owner or an admin may. Sets a principal's budget: the most that every session the principal created (its jobs' and gateway bindings' sessions included) may spend together, in micro-US-dollars, tokens, or both; neither clears it. Checked right before each model call of those sessions, besides the session's own budget: at the limit the turn pauses (turn.paused with budget.source principal); a budget that lets the paused turns go on resumes them. Kept in the store (docs/budgets.md). A Trellis addition. */
    "principal.setBudget": {
        params: SetPrincipalBudgetRequest & OperationParams;
        result: SetPrincipalBudgetResponse;
    };
    /** Renames a principal, changes its role or a service principal's limits; the last admin keeps its role. */
    "principal.update": {
        params: UpdatePrincipalRequest & OperationParams;
        result: UpdatePrincipalResponse;
    };
    /** Configures a provider; secrets are stored mode 0600 and never returned. */
    "provider.configure": {
        params: ConfigureProviderRequest & OperationParams;
        result: ConfigureProviderResponse;
    };
    /** Lists the providers; never returns a secret. */
    "provider.list": {
        params: ListProvidersRequest;
        result: ListProvidersResponse;
    };
    /** Starts a web login; login_unsupported for vendors without one. */
    "provider.loginWeb": {
        params: LoginWebRequest;
        result: LoginWebResponse;
    };
    /** Lists a vendor's models, asking its endpoint when it is configured. */
    "provider.models": {
        params: ListModelsRequest;
        result: ListModelsResponse;
    };
    /** Forgets a vendor's configured key, settings and default choice. */
    "provider.remove": {
        params: RemoveProviderRequest & OperationParams;
        result: RemoveProviderResponse;
    };
    /** Sends one short completion to check a vendor and model. */
    "provider.test": {
        params: TestProviderRequest;
        result: TestProviderResponse;
    };
    /** Lists the questions the agent asked (ask_user) that still wait for an answer: those in the unattended queue plus the caller's own connection's, as approval.list lists approval requests. */
    "question.list": {
        params: ListQuestionsRequest;
        result: ListQuestionsResponse;
    };
    /** Answers (or declines) a pending question; the first answer wins. */
    "question.respond": {
        params: RespondQuestionRequest & OperationParams;
        result: RespondQuestionResponse;
    };
    /** Makes the session read-only (docs/export.md): a running turn is interrupted, and prompts, steers and other changes are refused with session_archived. session.list leaves it out unless archived: true. */
    "session.archive": {
        params: ArchiveSessionRequest & OperationParams;
        result: ArchiveSessionResponse;
    };
    /** Lists the files under the session workdir's artifacts/ directory (and its subdirectories), newest first, at most 1000. snowpea 1.7's method. */
    "session.artifacts": {
        params: ListArtifactsRequest;
        result: ListArtifactsResponse;
    };
    /** Interrupts a running turn and marks the session closed (still resumable for replay). */
    "session.close": {
        params: CloseSessionRequest & OperationParams;
        result: CloseSessionResponse;
    };
    /** Summarises older history through the provider; session_busy while a turn runs. */
    "session.compact": {
        params: CompactRequest & OperationParams;
        result: CompactResponse;
    };
    /** Creates a session in a working directory; the caller becomes its origin. */
    "session.create": {
        params: CreateSessionRequest & OperationParams;
        result: CreateSessionResponse;
    };
    /** Deletes saved, non-live sessions in one transaction. */
    "session.deleteSaved": {
        params: DeleteSavedRequest & OperationParams;
        result: DeleteSavedResponse;
    };
    /** Makes a new session from another one as it was at one of its events: the new session's log holds a copy of the events up to at_seq, its model history is the one the original had then, and its workdir holds the files of the original's latest checkpoint at or before at_seq; it then records its own checkpoint of them (docs/workspaces.md). The caller becomes the new session's origin and owner. An unknown session is not_found; an at_seq outside the log or a workdir that is not empty invalid_params. */
    "session.fork": {
        params: ForkSessionRequest & OperationParams;
        result: ForkSessionResponse;
    };
    /** Stops the running turn, drops queued prompts, denies pending approvals. It acts at once: an interrupt never waits in the queue. */
    "session.interrupt": {
        params: InterruptRequest & OperationParams;
        result: InterruptResponse;
    };
    /** Lists sessions, newest first. */
    "session.list": {
        params: ListSessionsRequest;
        result: ListSessionsResponse;
    };
    /** Queues a line for the model: right before its next call (of the running turn, else of the next one) it reads "[system] " + text as a message of the conversation. Starts no turn. Kept in the daemon's memory until then (a restart drops it). snowpea 1.7's method. */
    "session.notice": {
        params: NoticeRequest & OperationParams;
        result: NoticeResponse;
    };
    /** Starts a turn, or does what when_busy says while one runs (queue it behind the running turn by default); output arrives as events. */
    "session.prompt": {
        params: PromptRequest & OperationParams;
        result: PromptResponse;
    };
    /** Deletes the saved sessions a retention policy keeps none of, each with its events, history, checkpoints and their blobs, and its workdir when the daemon made it; with dry_run it lists them and deletes nothing (docs/export.md, "Retention"). A session is kept when any rule keeps it: it was active within older_than, or it is among the keep_latest most recently active of its group. A rule the request leaves out is the daemon's (trellisd --retain, --retain-latest, --retain-per); a policy with no rule at all is invalid_params. Archived sessions are never deleted nor counted; sessions running a turn, with prompts queued, paused for their budget, waiting for an approval, or live on another daemon are listed with held and kept. Every principal's sessions are concerned, hence the operator role. */
    "session.prune": {
        params: PruneSessionsRequest & OperationParams;
        result: PruneSessionsResponse;
    };
    /** Removes every queued prompt (each as session.queue.remove does); the running turn goes on. */
    "session.queue.clear": {
        params: ClearQueueRequest & OperationParams;
        result: ClearQueueResponse;
    };
    /** Lists the prompts queued behind the running turn, in the order they run. */
    "session.queue.list": {
        params: ListQueueRequest;
        result: ListQueueResponse;
    };
    /** Removes one queued prompt: turn.dequeued{removed} and its turn.done{interrupted}; not_found when no queued prompt has that turn id. */
    "session.queue.remove": {
        params: RemoveQueuedRequest & OperationParams;
        result: RemoveQueuedResponse;
    };
    /** Sets the session's title (session.list); empty clears it, and the next prompt names the session again. snowpea 1.7's method. */
    "session.rename": {
        params: RenameRequest & OperationParams;
        result: RenameResponse;
    };
    /** Returns the stored events after afterSeq and subscribes the caller from there, with no gap. */
    "session.resume": {
        params: ResumeSessionRequest;
        result: ResumeSessionResponse;
    };
    /** Puts an idle session's files and model history back as they were at one of its events; the events after it stay in the log, marked by a session.rewound event (docs/workspaces.md). A running turn makes it session_busy; files changed since the latest checkpoint other than by the session's tools workspace_changed, unless force; an unknown session not_found; an at_seq outside the log invalid_params. */
    "session.rewind": {
        params: RewindSessionRequest & OperationParams;
        result: RewindSessionResponse;
    };
    /** Chooses the provider of the session's browser tool: "local" (headless Chromium on the daemon's machine), "host" (the browser a client lent the session with tool.register, a tool named browser: while none is lent, browser calls fail with browser_provider_unavailable) or "none". Changing it ends the session's browser. Kept in the daemon's memory (a restart returns to the daemon's browser-provider). snowpea 1.7's method. */
    "session.setBrowserProvider": {
        params: SetBrowserProviderRequest & OperationParams;
        result: SetBrowserProviderResponse;
    };
    /** Sets the session's own budget (cost in micro-US-dollars, tokens, or both; neither clears it, and the agent definition's or the daemon's default applies again). Checked right before every model call: at the limit the turn pauses (turn.paused); a budget that lets the paused turn go on resumes it (turn.resumed). Kept in the store. A Trellis addition. */
    "session.setBudget": {
        params: SetBudgetRequest & OperationParams;
        result: SetBudgetResponse;
    };
    /** Pins the reasoning effort of the session's model calls, or clears the pin (null: the provider's default). Kept with the session; the next turn uses it. snowpea 1.7's method. */
    "session.setEffort": {
        params: SetEffortRequest & OperationParams;
        result: SetEffortResponse;
    };
    /** Changes the session's mode (persisted; emits mode.changed). */
    "session.setMode": {
        params: SetModeRequest & OperationParams;
        result: SetModeResponse;
    };
    /** Pins the session to a model: a model id of its provider, a "vendor:model" pair, or a bare vendor (its default model). Null or "inherit" clears the pin: the daemon's default provider and its default model (the agent definition's model, if the session has one). The next turn uses it. snowpea 1.7's method. */
    "session.setModel": {
        params: SetModelRequest & OperationParams;
        result: SetModelResponse;
    };
    /** Grants a principal controller, approver or viewer access to a session (replacing its grant); only the session's owner or an admin may. */
    "session.share": {
        params: ShareSessionRequest & OperationParams;
        result: ShareSessionResponse;
    };
    /** Sends text into the running turn as a user message: the model reads it at its next call, once the tool calls under way finished (turn.steered right before that call), and an answer that would end the turn gets one more call instead. On a session with no turn to steer (idle, compacting, or its turn already ending) the text is a prompt of its own (started). Text the turn never gave its model (it failed, ran out of rounds, or ran a command) becomes the next prompt (turn.queued); an interrupt drops it, as it drops the queue. snowpea 1.7's method. */
    "session.steer": {
        params: SteerRequest & OperationParams;
        result: SteerResponse;
    };
    /** Returns the content of a recent tool call's result (among the session's last 10,000 events) as content blocks. Trellis's tools answer text only: one text block with the output (or the error). snowpea 1.7's method. */
    "session.toolContent": {
        params: ToolContentRequest;
        result: ToolContentResponse;
    };
    /** Makes an archived session writable again. */
    "session.unarchive": {
        params: UnarchiveSessionRequest & OperationParams;
        result: UnarchiveSessionResponse;
    };
    "session.unshare": {
        params: UnshareSessionRequest & OperationParams;
        result: UnshareSessionResponse;
    };
    /** Totals the tokens and the cost of a session's provider calls (its stored usage events), and of each of its turns, oldest first. A Trellis addition (usage.summary spans every session). */
    "session.usage": {
        params: SessionUsageRequest;
        result: SessionUsageResponse;
    };
    /** Reads the settings document, secrets masked (docs/compat.md). */
    "settings.get": {
        params: GetSettingsRequest;
        result: GetSettingsResponse;
    };
    /** Deep-merges a patch into the settings document and persists it. */
    "settings.set": {
        params: SetSettingsRequest & OperationParams;
        result: SetSettingsResponse;
    };
    /** Writes a new skill from a SKILL.md given verbatim; emits commands.changed. */
    "skill.create": {
        params: CreateSkillRequest & OperationParams;
        result: CreateSkillResponse;
    };
    /** Installs a skill from a folder, a .tar.gz/.zip path, or a git URL. */
    "skill.install": {
        params: InstallSkillRequest & OperationParams;
        result: InstallSkillResponse;
    };
    /** Lists installed skills. */
    "skill.list": {
        params: ListSkillsRequest;
        result: ListSkillsResponse;
    };
    /** Reads an installed skill's SKILL.md. */
    "skill.read": {
        params: ReadSkillRequest;
        result: ReadSkillResponse;
    };
    /** Reloads skills from disk; emits commands.changed. */
    "skill.reload": {
        params: ReloadSkillsRequest & OperationParams;
        result: ReloadSkillsResponse;
    };
    /** Removes an installed skill. */
    "skill.remove": {
        params: RemoveSkillRequest & OperationParams;
        result: RemoveSkillResponse;
    };
    /** Searches installed skills and the local catalog. */
    "skill.search": {
        params: SearchSkillsRequest;
        result: SearchSkillsResponse;
    };
    /** Replaces an installed skill's SKILL.md verbatim; emits commands.changed. */
    "skill.write": {
        params: WriteSkillRequest & OperationParams;
        result: WriteSkillResponse;
    };
    /** Answers {status: "ok"} while the daemon serves. */
    "system.health": {
        params: HealthRequest;
        result: HealthResponse;
    };
    /** Opens a connection: checks the protocol major version, then the token. */
    "system.hello": {
        params: HelloRequest;
        result: HelloResponse;
    };
    /** Describes the running daemon. */
    "system.info": {
        params: InfoRequest;
        result: InfoResponse;
    };
    /** Reads the settings and the provider configuration again from the store. */
    "system.reloadSettings": {
        params: ReloadSettingsRequest;
        result: ReloadSettingsResponse;
    };
    /** Answers, then stops the daemon gracefully (open turns end interrupted). It takes no operation id: a daemon whose store cannot write (a full disk) must still stop, and a receipt is a write. */
    "system.shutdown": {
        params: ShutdownRequest;
        result: ShutdownResponse;
    };
    /** Splits a task into subtasks run by parallel sub-agents. */
    "team.start": {
        params: StartTeamRequest & OperationParams;
        result: StartTeamResponse;
    };
    /** Reports a team's state ("" = the latest team). */
    "team.status": {
        params: TeamStatusRequest;
        result: TeamStatusResponse;
    };
    /** Lists the tools with their state. */
    "tool.list": {
        params: ListToolsRequest;
        result: ListToolsResponse;
    };
    /** Lends the caller's own tools to a session, or to every session the caller's connection originates: the model sees them as it sees the built-ins, and a call of one goes to the lending connection as the tool.call server → client request. Only a WebSocket connection can lend (REST and plain gRPC answer unsupported, data.field "transport"); a connection's lent tools vanish when it closes. */
    "tool.register": {
        params: RegisterToolsRequest;
        result: RegisterToolsResponse;
    };
    /** Takes back tools the caller's connection lent. */
    "tool.unregister": {
        params: UnregisterToolsRequest;
        result: UnregisterToolsResponse;
    };
    /** Totals the tokens and the cost of the stored usage events (one per provider call), grouped by provider, model, session or day (UTC), largest first. Events of deleted sessions are gone and count for nothing. Usage across every session is an operator's view: principals below operator are forbidden (docs/compat.md). */
    "usage.summary": {
        params: UsageSummaryRequest;
        result: UsageSummaryResponse;
    };
}
/** The params every mutating method takes besides its own. */
export interface OperationParams {
    /** The call's operation id (1 to 128 printable ASCII characters): a repeat with the same id within the dedupe window answers the first call's outcome without acting again (docs/protocol.md, Operation ids). */
    operationId?: string;
}
/** The methods that take an operation id (retry-safe). */
export declare const MUTATING_METHODS: ReadonlySet<MethodName>;
/** A client → server method name. */
export type MethodName = keyof Methods;
/** The params of method M. */
export type MethodParams<M extends MethodName> = Methods[M]["params"];
/** The result of method M. */
export type MethodResult<M extends MethodName> = Methods[M]["result"];
/** Every server → client request: its params and the result the client answers with. */
export interface ServerRequests {
    /** Asks a person to allow one tool call. */
    "approval.request": {
        params: ApprovalRequest;
        result: ApprovalReply;
    };
    /** Is a question the agent asks a person with the ask_user tool (one to four questions, each with options). */
    "question.request": {
        params: QuestionRequest;
        result: QuestionReply;
    };
    /** Is the params of the tool.call server → client request: the model called a tool this connection lent. */
    "tool.call": {
        params: ToolCallRequest;
        result: ToolCallReply;
    };
}
/** A server → client request name. */
export type ServerRequestName = keyof ServerRequests;
/** Every server → client notification and its params. */
export interface Notifications {
    /** ApprovalPending is the approval.pending notification. */
    "approval.pending": ApprovalPending;
    /** ApprovalResolved is the approval.resolved notification. */
    "approval.resolved": ApprovalResolved;
    /** CommandsChanged is the commands.changed notification. */
    "commands.changed": CommandsChanged;
    /** GatewayEvent is the gateway.event notification. */
    "gateway.event": GatewayEvent;
    /** JobEvent is the job.event notification. */
    "job.event": JobEvent;
    /** McpChanged is the mcp.changed notification: a server changed state or its tool list changed. */
    "mcp.changed": McpChanged;
    /** QuestionPending is the question.pending notification: a question waits in the unattended queue. */
    "question.pending": QuestionPending;
    /** QuestionResolved is the question.resolved notification, sent for every question, those put to a session's own client included. */
    "question.resolved": QuestionResolved;
    /** SessionEvent is one entry of a session's event log, sent as the session.event notification. On JSON-RPC it renders as {sessionId, seq, kind, payload, ts}: the set member of the payload oneof becomes `payload`, and `kind` names it. */
    "session.event": SessionEvent;
    /** SettingsChanged is the settings.changed notification, sent to every connection when settings.set or system.reloadSettings changed a section. */
    "settings.changed": SettingsChanged;
}
/** A server → client notification name. */
export type NotificationName = keyof Notifications;
/** The kinds of session events. Clients must ignore kinds they do not know. */
export type SessionEventKind = "turn.started" | "message.user" | "message.reasoning" | "message.delta" | "message.done" | "tool.call" | "tool.progress" | "tool.result" | "diff" | "usage" | "context" | "error" | "turn.queued" | "turn.dequeued" | "turn.done" | "mode.changed" | "backend.changed" | "subagent.spawn" | "subagent.update" | "subagent.done" | "team.task.update" | "compaction.started" | "compaction" | "step.started" | "step.done" | "turn.steered" | "turn.rollback" | "model.changed" | "provider.retry" | "turn.paused" | "turn.resumed" | "checkpoint" | "session.rewound";
/** The payload of each session event kind. */
export interface SessionEventPayloads {
    /** TurnStartedEvent opens a turn. */
    "turn.started": TurnStartedEvent;
    /** MessageUserEvent is the user's prompt as the model sees it. */
    "message.user": MessageUserEvent;
    /** MessageReasoningEvent is a chunk of the model's reasoning (merged like message.delta). */
    "message.reasoning": MessageReasoningEvent;
    /** MessageDeltaEvent is a chunk of the answer. Model chunks that come faster than the daemon commits are merged: consecutive chunks that arrive while the first still waits for its commit are one event (up to --merge-deltas bytes, default 16384; 0 = one event per model chunk). The concatenated text, the order of events and the seqs are unchanged. */
    "message.delta": MessageDeltaEvent;
    /** MessageDoneEvent is the whole answer of the turn. */
    "message.done": MessageDoneEvent;
    /** ToolCallEvent is emitted after a call was allowed, before it runs. */
    "tool.call": ToolCallEvent;
    /** ToolProgressEvent is a chunk of a running tool's output. */
    "tool.progress": ToolProgressEvent;
    /** ToolResultEvent is a tool call's outcome; a failed tool is data, not an RPC error. */
    "tool.result": ToolResultEvent;
    /** DiffEvent is the unified diff of a file a tool changed. */
    "diff": DiffEvent;
    /** UsageEvent reports one provider call's token usage. */
    "usage": UsageEvent;
    /** ContextEvent reports how full the context window is, just before turn.done. */
    "context": ContextEvent;
    /** ErrorEvent reports a failure inside a turn with a protocol error code. */
    "error": ErrorEvent;
    /** TurnQueuedEvent reports a prompt queued behind the running turn. */
    "turn.queued": TurnQueuedEvent;
    /** TurnDequeuedEvent reports a queued prompt leaving the queue: its turn started, the queue was dropped (session.interrupt, whenBusy interrupt or rollback; or the daemon running the session stopped: the daemon that runs it next drops the queue, each prompt's turn.done interrupted and synthetic), or it was removed (session.queue.remove, session.queue.clear). */
    "turn.dequeued": TurnDequeuedEvent;
    /** TurnDoneEvent closes a turn. */
    "turn.done": TurnDoneEvent;
    /** ModeChangedEvent reports session.setMode. */
    "mode.changed": ModeChangedEvent;
    /** BackendChangedEvent reports backend.set: {kind, ...public config}. */
    "backend.changed": BackendChangedEvent;
    /** SubagentSpawnEvent reports a child agent queued by this session. */
    "subagent.spawn": SubagentSpawnEvent;
    /** SubagentUpdateEvent reports a child agent's progress. */
    "subagent.update": SubagentUpdateEvent;
    /** SubagentDoneEvent reports a child agent's end. */
    "subagent.done": SubagentDoneEvent;
    /** TeamTaskUpdateEvent reports a team subtask's progress. */
    "team.task.update": TeamTaskUpdateEvent;
    /** CompactionStartedEvent opens a compaction. */
    "compaction.started": CompactionStartedEvent;
    /** CompactionEvent closes a compaction. */
    "compaction": CompactionEvent;
    /** StepStartedEvent opens one provider call of a turn (an addition to PROTOCOL.md §7 that the wire and json renderings need; WIRE-FORMATS.md). */
    "step.started": StepStartedEvent;
    /** StepDoneEvent closes one provider call with everything it produced. */
    "step.done": StepDoneEvent;
    /** TurnSteeredEvent is a user message sent into the running turn (session.steer, or session.prompt with whenBusy steer), emitted when the model reads it: right before the turn's next model call. */
    "turn.steered": TurnSteeredEvent;
    /** TurnRollbackEvent says that an interrupted turn was dropped from the model's history (session.prompt with whenBusy rollback): the turn's events stay in the log, but the model no longer reads what it said or did. */
    "turn.rollback": TurnRollbackEvent;
    /** ModelChangedEvent reports session.setModel, session.setEffort and the /model command: the model and effort the session's next turn uses. */
    "model.changed": ModelChangedEvent;
    /** ProviderRetryEvent is a progress event: a model call failed before its first token with an error worth another try (a rate limit, an overloaded or failing server, a dropped connection), and the daemon tries again after waitMs. It is emitted before the wait, once per retry; the turn goes on (message.delta and the rest) if a later try succeeds, and ends with error{provider_error} if none does. The wait honours the server's Retry-After (or retry-after-ms) header, else backs off exponentially with jitter. */
    "provider.retry": ProviderRetryEvent;
    /** TurnPausedEvent says that the turn stopped, right before a model call, because the session's budget is reached: what the session spent plus the estimated input of the next call would pass a limit. Nothing runs until session.setBudget raises the budget (principal.setBudget, for a budget of source principal), which resumes the turn where it stopped (turn.resumed), or session.interrupt ends it (turn.done{interrupted}). A request in the unattended approval queue (tool "budget") asks a person meanwhile: its allow raises the budget to its args.raiseTo, its deny ends the turn. The pause is kept in the store: a restarted daemon, or the one that takes the session over, finds the turn still paused. Prompts sent meanwhile queue behind it. */
    "turn.paused": TurnPausedEvent;
    /** TurnResumedEvent says that a paused turn goes on: its budget was raised. */
    "turn.resumed": TurnResumedEvent;
    /** CheckpointEvent announces a checkpoint of the session's workdir (docs/workspaces.md, checkpoint.list): recorded right before a tool that may change the workdir runs (write_file, edit_file, shell, MCP tools tagged write or exec), at the end of a turn that ran such a tool (before its message.done), after checkpoint.restore, and when a daemon put the latest checkpoint back into a managed workdir before a turn (reason materialise, restoredFrom that checkpoint). Otherwise a state equal to the session's latest checkpoint is not recorded again. The checkpoint's seq is this event's. */
    "checkpoint": CheckpointEvent;
    /** SessionRewoundEvent says that session.rewind put the session's model history, and its files when a checkpoint held them, back as they were at event to_seq: the events from to_seq+1 to from_seq stay in the log, but the model no longer reads what they said or did. */
    "session.rewound": SessionRewoundEvent;
}
/** The session event of kind K. */
export type SessionEventOf<K extends SessionEventKind> = Extract<SessionEvent, {
    kind: K;
}>;
/** A protocol error code, carried in error.data.code. */
export type ErrorCode = "method_not_found" | "invalid_params" | "internal" | "not_found" | "unauthorized" | "protocol_incompatible" | "mode_denied" | "approval_denied" | "approval_timeout" | "tool_inactive" | "session_busy" | "not_implemented" | "login_unsupported" | "search_provider_unavailable" | "browser_provider_unavailable" | "provider_error" | "overloaded" | "unsupported" | "payload_too_large" | "store_unavailable" | "store_busy" | "forbidden" | "rate_limited" | "lease_lost" | "operation_outcome_unknown" | "workspace_changed" | "checkpoint_quota_exceeded" | "session_archived" | "workdir_missing";
/** Each error code's numeric JSON-RPC code and meaning. */
export declare const ERROR_CODES: Readonly<Record<ErrorCode, {
    readonly numeric: number;
    readonly summary: string;
}>>;
/** A capability a daemon of this version may list in system.hello. */
export type Capability = "agents" | "approvals" | "backends" | "checkpoints" | "commands" | "gateway" | "jobs" | "mcp" | "memory" | "principals" | "providers" | "sessions" | "skills" | "teams" | "tools";
/** Every capability of this protocol version. */
export declare const CAPABILITIES: readonly Capability[];
